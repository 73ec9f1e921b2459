"""Mixture-of-experts serving (issue 15, item 3): llama.cpp's routed experts in host RAM
(`--n-cpu-moe N` / `--cpu-moe`, common/arg.cpp), decode reading only the experts a step routes
to, and the `serve` flag, JSON keys and command line.

Expected values are computed here from the published configs (catalog/models.yaml) and the
GGUF bits of engine/constants.py, not read back from engine/serving.py."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import engine.constants as C
from catalog import default_catalog
from engine import serving as S
from planner.serving import SERVE_JSON_KEYS
from tests.clirun import run_cli

GIB = 2**30
Q4KM = C.GGUF_BITS["q4_k_m"] / 8  # bytes per weight


@pytest.fixture(scope="module")
def cat():
    c = default_catalog()
    return c.models(), c.gpus()


def rows(cat, *requests):
    models, gpus = cat
    return S.serve(pd.DataFrame(list(requests)), models, gpus)


def llama(model, gpu="rtx-4090", **kw):
    return dict(model=model, gpu=gpu, engine="llama.cpp", precision="q4_k_m", max_model_len=8192, **kw)


def routed_expert_params(model):
    """All routed experts' weights, from the config fields: MoE layers x experts x (gate, up,
    down of width fe) (+ gpt-oss's gate_up and down biases, 2 fe + h per expert)."""
    m = default_catalog().models().set_index("id").loc[model]
    h, fe, E, L = m["hidden_size"], m["expert_intermediate_size"], m["num_experts"], m["num_layers"]
    moe_layers = (L - (m.get("first_dense_layers") or 0)) // (m.get("moe_layer_step") or 1)
    bias = 2 * fe + h if bool(m.get("expert_bias") or False) else 0
    return int(moe_layers), int(moe_layers * E * (3 * h * fe + bias))


def test_gpt_oss_120b_routed_experts_are_counted_from_the_config(cat):
    # 36 layers x 128 experts x (3 x 2880 x 2880 + 2 x 2880 + 2880) = 114,701,598,720 weights
    layers, experts = routed_expert_params("gpt-oss-120b")
    assert (layers, experts) == (36, 114_701_598_720)
    out = rows(cat, llama("gpt-oss-120b")).iloc[0]
    assert out["expert_bytes"] == pytest.approx(experts * Q4KM, rel=1e-12)
    assert out["moe_layers"] == 36
    assert out["params"] > out["active_params"] > 0


@pytest.mark.parametrize("model", ["gpt-oss-120b", "qwen3-235b-a22b", "mixtral-8x22b"])
def test_a_large_moe_fits_a_24gb_card_with_its_experts_in_host_ram_and_not_without(cat, model):
    L = int(default_catalog().models().set_index("id").loc[model, "num_layers"])
    every_layer = L + 1  # -ngl counts the output layer
    alone, auto = rows(cat, llama(model, gpu_layers=every_layer), llama(model, cpu_moe_layers=S.CPU_MOE_AUTO)).itertuples()
    # every layer on the GPU without moving experts: the weights alone exceed the card
    assert not alone.fits and alone.gpu_memory_used_bytes > alone.usable_bytes
    # with the experts of the first N layers in host RAM every layer stays on the GPU
    assert auto.fits and auto.gpu_layers == every_layer
    assert 0 < auto.cpu_moe_layers <= L
    assert auto.gpu_memory_used_bytes <= auto.usable_bytes - S.FIT_MARGIN_BYTES
    assert auto.host_ram_bytes >= auto.expert_host_bytes > 0
    assert f"-ngl {every_layer} --n-cpu-moe {int(auto.cpu_moe_layers)} " in auto.command \
        or (" --cpu-moe " in auto.command and auto.expert_host_bytes == auto.expert_bytes)
    # the fewest: with one layer fewer the GPU would not keep llama-fit-params' 1024 MiB margin
    fewer = rows(cat, llama(model, gpu_layers=every_layer, cpu_moe_layers=int(auto.cpu_moe_layers) - 1)).iloc[0]
    assert fewer.gpu_memory_used_bytes > fewer.usable_bytes - S.FIT_MARGIN_BYTES


def test_gpu_bytes_with_n_cpu_moe_are_the_weights_less_the_moved_experts(cat):
    # gpt-oss-120b, -ngl 37 --n-cpu-moe 30 on a 4090: the GPU holds every weight except the token
    # embedding (kept on the CPU by llama.cpp) and 30 of 36 layers' experts, plus the KV of 8,192
    # tokens, the compute buffer and the CUDA context
    m = default_catalog().models().set_index("id").loc["gpt-oss-120b"]
    out = rows(cat, llama("gpt-oss-120b", gpu_layers=37, cpu_moe_layers=30)).iloc[0]
    layers, experts = routed_expert_params("gpt-oss-120b")
    embed = m["vocab_size"] * m["hidden_size"] * Q4KM
    moved = experts * Q4KM * 30 / layers
    kv = out["kv_bytes_per_token"] * 8192
    compute = S.LLAMA_UBATCH * 4.0 * (m["vocab_size"] + 4.0 * m["hidden_size"] + 2.0 * m["intermediate_size"])
    expected = out["weights_bytes"] - embed - moved + kv + compute + C.CUDA_CONTEXT_BYTES
    assert out["gpu_memory_used_bytes"] == pytest.approx(expected, rel=1e-9)
    assert out["expert_host_bytes"] == pytest.approx(moved, rel=1e-9)
    assert out["host_ram_bytes"] == pytest.approx(moved + embed, rel=1e-9)
    assert "-ngl 37 --n-cpu-moe 30 -c 8192" in out["command"]


def test_n_cpu_moe_counts_layer_indices_dense_layers_included(cat):
    # DeepSeek-V3: layers 0-2 are dense (first_k_dense_replace 3), so --n-cpu-moe 3 moves nothing
    # and --n-cpu-moe 4 moves layer 3's experts, one of 58 MoE layers
    ds = rows(cat, *(llama("deepseek-v3", gpu="b200-180gb", gpu_layers=62, cpu_moe_layers=n) for n in (3, 4)))
    assert ds["expert_host_bytes"].iloc[0] == 0
    layers, experts = routed_expert_params("deepseek-v3")
    assert layers == 58
    assert ds["expert_host_bytes"].iloc[1] == pytest.approx(experts * Q4KM / 58, rel=1e-9)
    # Llama 4 Maverick: every second layer is MoE (1, 3, 5, ...): --n-cpu-moe 1 moves nothing, 2 moves layer 1's
    mv = rows(cat, *(llama("llama-4-maverick", gpu="b200-180gb", gpu_layers=49, cpu_moe_layers=n) for n in (1, 2)))
    layers, experts = routed_expert_params("llama-4-maverick")
    assert layers == 24
    assert mv["expert_host_bytes"].iloc[0] == 0
    assert mv["expert_host_bytes"].iloc[1] == pytest.approx(experts * Q4KM / 24, rel=1e-9)


def test_all_is_cpu_moe_and_a_dense_model_has_no_experts_to_move(cat):
    moe, dense = rows(cat, llama("qwen3-30b-a3b", cpu_moe_layers=S.CPU_MOE_ALL),
                      llama("llama-3-8b", cpu_moe_layers=S.CPU_MOE_ALL)).itertuples()
    assert moe.expert_host_bytes == moe.expert_bytes > 0
    assert " --cpu-moe " in moe.command
    plain = rows(cat, llama("llama-3-8b")).iloc[0]
    assert dense.cpu_moe_layers == 0 and dense.expert_bytes == 0 and "cpu-moe" not in dense.command
    assert dense.gpu_memory_used_bytes == plain["gpu_memory_used_bytes"]
    assert dense.decode_tokens_per_s == plain["decode_tokens_per_s"]


def test_batch_1_decode_reads_the_active_experts_only(cat):
    # vLLM, Mixtral 8x7B on an H100, one request: a step reads every weight except 6 of the 8
    # experts of each layer (2 per token), plus the KV of the request at its average position
    out = rows(cat, dict(model="mixtral-8x7b", gpu="h100-sxm-80gb", engine="vllm", precision="bf16",
                         max_model_len=4096, concurrency=1)).iloc[0]
    g = default_catalog().gpus().set_index("id").loc["h100-sxm-80gb"]
    layers, experts = routed_expert_params("mixtral-8x7b")
    read = out["weights_bytes"] - experts * 2 * 6 / 8 + out["kv_bytes_per_token"] * (512 + 128 / 2)
    seconds = read / (g["bandwidth_gbps"] * 1e9 * S.DECODE_EFFICIENCY[("vllm", "nvidia")]) + 32 * S.LAYER_OVERHEAD_S["vllm"]
    assert out["time_per_output_token_ms"] == pytest.approx(seconds * 1e3, rel=1e-9)


def test_experts_in_host_ram_decode_at_host_bandwidth(cat):
    # every expert of Qwen3 30B-A3B in host RAM: a token reads 8 of 128 experts per layer from it
    slow, fast = rows(cat, llama("qwen3-30b-a3b", cpu_moe_layers=S.CPU_MOE_ALL, host_bandwidth_gbps=50),
                      llama("qwen3-30b-a3b", cpu_moe_layers=S.CPU_MOE_ALL, host_bandwidth_gbps=100)).itertuples()
    _, experts = routed_expert_params("qwen3-30b-a3b")
    host_read = experts * Q4KM * 8 / 128
    # the difference in step time is the host bytes at the two bandwidths
    step = lambda r: r.time_per_output_token_ms / 1e3  # noqa: E731
    assert step(slow) - step(fast) == pytest.approx(host_read / 50e9 - host_read / 100e9, rel=1e-9)


def test_cpu_moe_layers_is_for_llamacpp_only(cat):
    with pytest.raises(ValueError, match="cpu_moe_layers is not accepted for engine 'ollama'"):
        rows(cat, dict(llama("qwen3-30b-a3b", cpu_moe_layers=4), engine="ollama"))


def run(*args):
    return run_cli("serve", *args)  # `python -m engine serve *args`, in this process (tests/clirun.py)


def test_serve_cli_cpu_moe_layers_auto_json_and_text():
    base = ["--model", "gpt-oss-120b", "--gpu", "rtx-4090", "--engine", "llama.cpp", "--max-model-len", "8192",
            "--precision", "q4_k_m"]  # (its default is the checkpoint's MXFP4 MoE: the Q4_K_M GGUF here)
    code, out, err = run(*base, "--cpu-moe-layers", "auto", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert list(data) == [*SERVE_JSON_KEYS, "schema_version"]  # every --json carries schema_version (docs/install.md)
    for key in ("params", "active_params", "moe_layers", "expert_bytes", "cpu_moe_layers", "expert_host_bytes",
                "host_bandwidth_gbps"):
        assert key in data
    assert data["fits"] is True and data["gpu_layers"] == 37 and 0 < data["cpu_moe_layers"] <= 36
    assert f"--n-cpu-moe {data['cpu_moe_layers']}" in data["command"]
    code, out, err = run(*base, "--cpu-moe-layers", "all")
    assert code == 0, err
    assert "active per token" in out and "run it: llama-server -m gpt-oss-120b-Q4_K_M.gguf -ngl 37 --cpu-moe -c 8192" in out


@pytest.mark.parametrize("args,message", [
    (("--engine", "llama.cpp", "--cpu-moe-layers", "many"),
     "cpu-moe-layers 'many' is not a number; accepted: a whole number >= 0, all or auto"),
    (("--engine", "llama.cpp", "--cpu-moe-layers", "-3"), "cpu-moe-layers '-3' is not accepted"),
    (("--engine", "vllm", "--cpu-moe-layers", "4"),
     "cpu-moe-layers '4' is not accepted with --engine vllm; accepted: 0, or --engine llama.cpp"),
])
def test_serve_cpu_moe_bad_input_exits_2_with_one_line(args, message):
    code, out, err = run("--model", "qwen3-30b-a3b", "--gpu", "rtx-4090", "--max-model-len", "4096", *args)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1


def test_gpu_layers_of_deepseek_hold_moe_layers_and_the_dense_first_layers_stay_on_the_host(cat):
    # DeepSeek-V3 Q4_K_M with -ngl 59: the output and the last 58 layers (3..60, all MoE) on the
    # GPU; layers 0-2 (dense MLP 3 x 7168 x 18432) in host RAM. Per MoE layer, from the config:
    # MLA attention q_a 7168x1536 + q_a_norm 1536 + q_b 1536x128x192 + kv_a 7168x576 + kv_a_norm 512
    # + kv_b 512x128x256 + o 128x128x7168, two norms 2x7168, router 256x7168 + 256 bias, shared
    # expert 3x7168x2048 and 256 routed experts of 3x7168x2048
    h = 7168
    attn = h * 1536 + 1536 + 1536 * 128 * 192 + h * 576 + 512 + 512 * 128 * 256 + 128 * 128 * h + 2 * h
    moe_layer = attn + 256 * h + 256 + 3 * h * 2048 + 256 * 3 * h * 2048
    output = 129280 * h
    out = rows(cat, llama("deepseek-v3", gpu="b200-180gb", gpus=1, gpu_layers=59)).iloc[0]
    # (rel 1e-6: the estimate's GGUF file total differs from params x bits by a few KB, spread by
    # parameter count; an average dense/MoE layer would be off by 1e-3)
    assert out["weights_gpu_bytes"] == pytest.approx((58 * moe_layer + output) * Q4KM, rel=1e-6)
    dense_layer = attn + 3 * h * 18432
    embed = 129280 * h
    assert out["host_ram_bytes"] - out["kv_bytes_per_token"] * 8192 * 3 / 61 == pytest.approx(
        (3 * dense_layer + embed) * Q4KM, rel=1e-6)


def test_serve_text_names_the_moe_share_only_where_a_backend_has_one(cat):
    """The text says the fitted share on CUDA (and Metal), and says 'not fitted' on Vulkan, where
    the experts are read at the dense efficiency (engine/serving.py MOE_EXPERT_EFFICIENCY)."""
    from planner.serving import format_serve
    out = rows(cat, llama("qwen3-30b-a3b"), llama("qwen3-30b-a3b", backend="vulkan"))
    cuda, vulkan = (next(line for line in format_serve(r).splitlines() if "mixture of experts" in line)
                    for _, r in out.iterrows())
    assert f"at {S.MOE_EXPERT_EFFICIENCY[('gguf', 'nvidia')]:.2f} of the dense bandwidth" in cuda
    assert "not fitted for this engine and backend" in vulkan and "of the dense bandwidth (" not in vulkan


def test_mlc_llm_reads_an_moes_experts_at_its_quantizations_bits():
    """MLC-LLM's q4f16_1 weights are every weight at 4.5 bits, the experts too; serve counted the experts at 16 bits
    (more than the file) and Qwen3-30B-A3B decoded at 690 tok/s on an RTX 4090 against llama.cpp's 226 at Q4_K_M. Two
    bandwidth-bound engines at about 4.5-4.9 bits: MLC's lead on the MoE is now the order of its lead on a dense model."""
    def decode(model, engine, precision):
        args = ["serve", "--model", model, "--gpu", "rtx-4090", "--engine", engine, "--max-model-len", "4096",
                "--concurrency", "1", "--json"] + (["--precision", precision] if precision else [])
        code, out, err = run_cli(*args)
        assert code == 0, err
        return json.loads(out)["decode_tokens_per_s"]
    dense = decode("llama-3.1-8b", "mlc-llm", None) / decode("llama-3.1-8b", "llama.cpp", "q4_k_m")
    moe = decode("qwen3-30b-a3b", "mlc-llm", None) / decode("qwen3-30b-a3b", "llama.cpp", "q4_k_m")
    assert moe < 1.5 * dense, (moe, dense)
