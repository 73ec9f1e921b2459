"""What `serve` plans and the command it prints, against the engines' own sources: llama.cpp's quantized KV cache in
ggml's blocks, the KV cache types vLLM and SGLang have, and the printed command ("run it", `--json` command)
launching the plan the export (planner/exports.py serve_export) launches, flag for flag.

Expected values are computed here from the published configs (catalog/models.yaml) and the sources
engine/serving.py cites, not read back from its columns."""

from __future__ import annotations

import json
import shlex

import pandas as pd
import pytest

from engine import serving as S
from planner.exports import SERVE_TARGETS, serve_export
from tests.clirun import run_cli

# Llama 3.1 8B: 32 layers, 8 KV heads of 128: K and V values a token
LLAMA31_8B_KV_VALUES = 2 * 32 * 8 * 128


from tests.test_serving_engines import rows  # noqa: E402  (serve() of the requests, on `frames`)


@pytest.fixture(scope="module")
def frames(models, gpus):  # (the shipped catalog's frames, as rows() takes them; conftest's session fixtures)
    return models, gpus


# --- llama.cpp / Ollama: a quantized cache in ggml blocks ---------------------------------------------

def test_llamacpp_quantized_cache_takes_ggml_block_bytes(frames):
    """ggml/src/ggml-common.h: block_q8_0 is an fp16 scale and 32 int8 values (34 bytes per 32), block_q4_0 an fp16
    scale and 16 bytes of 4-bit values (18 bytes per 32); llama.cpp's K and V tensors are rows of those blocks. fp8 is
    written as q8_0 (llama.cpp has none). ExLlamaV2's Q8/Q4 cache and ExLlamaV3's 8/4-bit one have the same bytes; vLLM's fp8 is 1 byte a value."""
    base = dict(model="llama-3.1-8b", gpu="rtx-4090", max_model_len=8192)
    asked = [("llama.cpp", "q4_k_m", kv) for kv in ("auto", "int8", "int4", "fp8", "fp32")]
    asked += [("ollama", "q4_k_m", "int8"), ("ollama", "q4_k_m", "int4"), ("exllamav2", "exl2-4.0", "int8"),
              ("exllamav2", "exl2-4.0", "int4"), ("vllm", "bf16", "fp8"), ("exllamav3", "exl3-4.0", "int8"),
              ("exllamav3", "exl3-4.0", "int4")]
    out = rows(frames, *({**base, "engine": e, "precision": p, "kv_precision": kv} for e, p, kv in asked))
    got = dict(zip(((e, kv) for e, _, kv in asked), out["kv_bytes_per_token"]))
    values = LLAMA31_8B_KV_VALUES
    assert got[("llama.cpp", "auto")] == values * 2  # f16
    assert got[("llama.cpp", "int8")] == got[("llama.cpp", "fp8")] == values * 34 / 32 == 69632
    assert got[("llama.cpp", "int4")] == values * 18 / 32 == 36864
    assert got[("llama.cpp", "fp32")] == values * 4  # f32, no blocks
    assert got[("ollama", "int8")] == values * 34 / 32 and got[("ollama", "int4")] == values * 18 / 32
    assert got[("exllamav2", "int8")] == values * 34 / 32 and got[("exllamav2", "int4")] == values * 18 / 32
    # ExLlamaV3's -cq 8,8 / 4,4 (cache/quant.py: bits / 32 int32 words and one fp16 scale per 32 values): the same bytes
    assert got[("exllamav3", "int8")] == values * 34 / 32 and got[("exllamav3", "int4")] == values * 18 / 32
    assert got[("vllm", "fp8")] == values * 1  # vLLM's fp8 cache: one byte a value, unchanged
    # llama-server's context of one 8,192-token slot, every layer on the GPU, at those bytes
    q8 = out.iloc[1]
    assert q8.gpu_layers == 33 and q8.kv_cache_bytes_allocated == values * 34 / 32 * 8192


def test_llamacpp_quantized_cache_leaves_a_linear_attention_state_in_its_dtype(frames):
    """Qwen3-Next under llama.cpp: 12 full-attention layers keep K and V (2 KV heads of 256), 36 Gated DeltaNet
    layers a state per sequence in their own dtype. -ctk q8_0 quantizes the K/V values only."""
    base = dict(model="qwen3-next-80b-a3b", gpu="h100-sxm-80gb", engine="llama.cpp", precision="q4_k_m",
                max_model_len=4096)
    f16, q8, q4 = (r for _, r in rows(frames, *({**base, "kv_precision": kv} for kv in ("fp16", "int8", "int4"))).iterrows())
    values = 2 * 12 * 2 * 256  # K and V values a token
    state = f16.kv_bytes_per_token - values * 2
    assert state > 0
    assert q8.kv_bytes_per_token == pytest.approx(state + values * 34 / 32, rel=1e-12)
    assert q4.kv_bytes_per_token == pytest.approx(state + values * 18 / 32, rel=1e-12)


# --- vLLM and SGLang: the KV cache types they have ------------------------------------------------------

@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("kv", ["int8", "int4", "fp32"])
def test_vllm_and_sglang_refuse_a_kv_cache_they_do_not_have(frames, engine, kv):
    """vLLM's --kv-cache-dtype (vllm/config/cache.py CacheDType: auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2, ...)
    and SGLang's (server_args.py: auto, fp8_e5m2, fp8_e4m3, bf16) have no int8 or int4 cache of 1 or 0.5 bytes a value,
    and fp32 only as the model's own dtype: planned on one, the plan counted bytes the engine never allocates."""
    with pytest.raises(ValueError, match=rf"kv_precision '{kv}' is not accepted for {engine}; accepted: auto, fp16, "
                                         r"bf16, fp8 \(its --kv-cache-dtype"):
        rows(frames, dict(model="llama-3.1-8b", gpu="h100-sxm-80gb", engine=engine, precision="bf16", max_model_len=8192,
                       kv_precision=kv))


def test_vllm_and_sglang_plan_the_kv_caches_they_have(frames):
    kvs = ("auto", "fp16", "bf16", "fp8")
    out = rows(frames, *(dict(model="llama-3.1-8b", gpu="h100-sxm-80gb", engine=e, precision="bf16", max_model_len=8192,
                           kv_precision=kv) for e in ("vllm", "sglang") for kv in kvs))
    per_token = dict(zip(((e, kv) for e in ("vllm", "sglang") for kv in kvs), out["kv_bytes_per_token"]))
    for e in ("vllm", "sglang"):
        assert per_token[(e, "auto")] == per_token[(e, "fp16")] == per_token[(e, "bf16")] == LLAMA31_8B_KV_VALUES * 2
        assert per_token[(e, "fp8")] == LLAMA31_8B_KV_VALUES


def test_serve_exits_2_naming_the_kv_type_and_the_accepted_ones():
    code, out, err = run_cli("serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--engine", "vllm",
                             "--max-model-len", "8192", "--kv-precision", "int8")
    assert code == 2 and out == ""
    assert "'int8' is not accepted for vllm; accepted: auto, fp16, bf16, fp8" in err and len(err.splitlines()) == 1


def test_a_search_over_engines_leaves_out_the_kv_cache_an_engine_does_not_have(frames):
    """cheapest with an int8 KV cache over vLLM, SGLang and llama.cpp: vLLM and SGLang have none, so their rows are
    left out (engine/serving.py kv_refused), as a weight format an engine does not run is (formats_refused); the
    llama.cpp rows still answer, on its q8_0 cache."""
    from planner.serving import cheapest
    models, gpus = frames
    out = cheapest("llama-3.1-8b", 4, 8192, 10.0, 5.0, models, gpus, engines=("vllm", "sglang", "llama.cpp"),
                   precisions=("bf16", "q4_k_m"), gpu_ids=["rtx-4090", "h100-sxm-80gb"], kv_precision="int8")
    assert len(out) and set(out["engine"]) == {"llama.cpp"}
    assert (out["kv_bytes_per_token"] * out["gpus"] == LLAMA31_8B_KV_VALUES * 34 / 32).all()  # (per GPU)
    fp8 = cheapest("llama-3.1-8b", 4, 8192, 10.0, 5.0, models, gpus, engines=("vllm", "sglang", "llama.cpp"),
                   precisions=("bf16", "q4_k_m"), gpu_ids=["rtx-4090", "h100-sxm-80gb"], kv_precision="fp8")
    assert set(fp8["engine"]) == {"vllm", "sglang", "llama.cpp"}  # a type every one of them has
    req = pd.DataFrame({"engine": ["vllm", "sglang", "llama.cpp", "llama.cpp", "ollama", "ollama", "mlc-llm", "exllamav2",
                                   "exllamav2"],
                        "kv_precision": ["int4", "fp8", "int4", "fp32", "int8", "fp32", "int8", "int4", "fp32"]})
    assert S.kv_refused(req).tolist() == [True, False, False, False, False, True, True, False, True]


def test_ollama_refuses_an_fp32_cache(frames):
    """OLLAMA_KV_CACHE_TYPE is f16, q8_0 or q4_0: an fp32 plan counted 4 bytes a value where Ollama runs 2."""
    with pytest.raises(ValueError, match=r"kv_precision 'fp32' is not accepted for ollama; accepted: auto, fp16, bf16, "
                                         r"fp8, int8, int4 \(its OLLAMA_KV_CACHE_TYPE: f16, q8_0, q4_0"):
        rows(frames, dict(model="llama-3.1-8b", gpu="rtx-4090", engine="ollama", precision="q4_k_m", max_model_len=8192,
                       kv_precision="fp32"))


# --- the printed command launches the plan the export launches ----------------------------------------

def _words(command: str) -> tuple[dict, list, dict]:
    """A command line as (environment assignments, the program's words, its flags and their values): shlex's words,
    a flag followed by another flag (or nothing) having None."""
    words = shlex.split(command)
    env = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    first = next((i for i, w in enumerate(words) if w.startswith("-")), len(words))
    flags = {}
    for i, word in enumerate(words[first:], first):
        if word.startswith("-"):
            following = words[i + 1] if i + 1 < len(words) else None
            flags[word] = following if following is not None and not following.startswith("-") else None
    return env, words[:first], flags


def _ollama(command: str) -> tuple[dict, dict]:
    """Ollama's command: the server's environment and the request's options (num_gpu, num_ctx)."""
    words = shlex.split(command)
    env = dict(w.split("=", 1) for w in words[:words.index("ollama")])
    return env, {k: str(v) for k, v in json.loads(words[words.index("-d") + 1])["options"].items()}


def _ollama_export(text: str) -> tuple[dict, dict]:
    """The Modelfile export: the server's environment (its `server:` comment) and the PARAMETER lines."""
    server = next(line for line in text.splitlines() if line.startswith("# server: "))
    env = dict(w.split("=", 1) for w in shlex.split(server.removeprefix("# server: ")) if "=" in w)
    params = dict(line.split()[1:3] for line in text.splitlines() if line.startswith("PARAMETER "))
    return env, params


def _export_line(text: str) -> str:
    (line,) = [line for line in text.splitlines() if line and not line.startswith("#")]
    return line


# every weight format x KV cache type each engine takes (engine/serving.py engine_precisions, KV_ENGINE_TYPES), on one
# and two GPUs, a draft model, routed experts in host RAM and a vision tower
TORCH_KV = ("auto", "fp16", "bf16", "fp8")
GRID = (
    [dict(engine="vllm", precision=p, kv_precision=kv, gpus=g, **({"engine_version": "0.27"} if p == "nf4" else {}))
     for p in ("bf16", "fp16", "fp32", "fp8", "int8", "int4", "nf4") for kv in TORCH_KV for g in (1, 2)]  # (nf4: bitsandbytes, to 0.27)
    + [dict(engine="sglang", precision=p, kv_precision=kv, gpus=g)
       for p in ("bf16", "fp16", "fp8", "int8", "int4") for kv in TORCH_KV for g in (1, 2)]
    + [dict(engine="llama.cpp", precision=p, kv_precision=kv, gpus=g) for p in ("q4_k_m", "q8_0")
       for kv in ("auto", "fp16", "bf16", "fp32", "fp8", "int8", "int4") for g in (1, 2)]
    + [dict(engine="ollama", precision="q4_k_m", kv_precision=kv) for kv in ("auto", "fp16", "bf16", "fp8", "int8", "int4")]
    + [dict(engine="vllm", precision="bf16", kv_precision="fp8", draft_model="llama-3.2-1b"),
       dict(engine="vllm", precision="bf16", gpus=2, draft_model="llama-3.2-1b", draft_tensor_parallel_size=1),
       dict(engine="vllm", precision="fp8", engine_version="0.6", draft_model="llama-3.2-1b"),
       dict(engine="vllm", precision="bf16", kv_cache_memory_bytes=4_000_000_000, gpu_memory_utilization=0.8125),
       dict(engine="sglang", precision="bf16", kv_precision="fp8", draft_model="llama-3.2-1b",
            gpu_memory_utilization=0.7885),
       dict(engine="llama.cpp", precision="q4_k_m", kv_precision="int8", draft_model="llama-3.2-1b", max_num_seqs=2),
       dict(engine="llama.cpp", model="mixtral-8x7b", gpu="rtx-4090", precision="q4_k_m", cpu_moe_layers=-1,
            kv_precision="int4"),
       dict(engine="llama.cpp", model="qwen3-30b-a3b", gpu="rtx-4090", precision="q4_k_m", cpu_moe_layers=-2),
       dict(engine="llama.cpp", model="gemma-3-4b", precision="q4_k_m", kv_precision="fp8"),
       dict(engine="ollama", model="gemma-3-4b", precision="q8_0", kv_precision="int8")]
)


@pytest.fixture(scope="module")
def grid(frames):
    models, _ = frames
    requests = [{"model": "llama-3.1-8b", "gpu": "h100-sxm-80gb", "max_model_len": 8192, **r} for r in GRID]
    out = rows(frames, *requests)
    by_id = models.set_index("id")
    target = {engine: name for name, engine in SERVE_TARGETS.items()}
    pairs = []
    for _, row in out.iterrows():
        draft = by_id.loc[row["draft_model"]] if isinstance(row["draft_model"], str) else None
        pairs.append((row, serve_export(target[row["engine"]], row, by_id.loc[row["model"]], draft).text))
    return pairs


def test_the_printed_command_carries_the_exports_flags_and_values(grid):
    """The command serve prints ("run it", --json `command`) and `serve --export` launch the same plan: the same
    program, environment, flags and values (shlex's words of both), for every engine x weight format x KV cache type
    above. Before, the command left out SGLang's --kv-cache-dtype fp8_e4m3, Ollama's OLLAMA_KV_CACHE_TYPE and
    OLLAMA_FLASH_ATTENTION=1, llama.cpp's -fa on beside a quantized cache, vLLM's --dtype and its bitsandbytes
    --quantization for 4-bit weights, and spelt SGLang's --tp-size as --tp."""
    assert len(grid) == len(GRID)
    for row, export in grid:
        what = f"{row['engine']} {row['precision']} kv {row['kv_precision']} x{row['gpus']}: {row['command']}"
        if row["engine"] == "ollama":
            assert _ollama(row["command"]) == _ollama_export(export), what
        else:
            assert _words(row["command"]) == _words(_export_line(export)), what


def test_the_commands_carry_the_kv_cache_and_weights_planned(grid):
    """What the comparison above rests on, in the engines' own words: the KV cache type and the weights' format."""
    got = {(r["engine"], r["precision"], r["kv_precision"], int(r["gpus"])): _words(r["command"])
           for r, _ in grid if not isinstance(r["draft_model"], str) and r["engine"] != "ollama"}
    assert got[("sglang", "bf16", "fp8", 2)][2]["--kv-cache-dtype"] == "fp8_e4m3"
    assert got[("sglang", "bf16", "fp8", 2)][2]["--tp-size"] == "2"
    assert got[("vllm", "fp16", "auto", 1)][2]["--dtype"] == "float16"
    assert "--quantization" not in got[("vllm", "int4", "fp8", 1)][2]  # vLLM 0.28 removed bitsandbytes (VLLM_BNB_UNTIL)
    assert got[("vllm", "bf16", "fp8", 1)][2]["--kv-cache-dtype"] == "fp8"
    q8 = got[("llama.cpp", "q4_k_m", "int8", 2)][2]
    assert (q8["-ctk"], q8["-ctv"], q8["-fa"], q8["-sm"]) == ("q8_0", "q8_0", "on", "layer")
    assert "-fa" not in got[("llama.cpp", "q4_k_m", "fp32", 1)][2]  # f32 is not quantized
    moe = {r["model"]: _words(r["command"])[2] for r, _ in grid if r["cpu_moe_layers"] != 0}
    assert int(moe["mixtral-8x7b"]["--n-cpu-moe"]) > 0 and "--cpu-moe" in moe["qwen3-30b-a3b"]
    ollama = {r["kv_precision"]: _ollama(r["command"])[0] for r, _ in grid if r["engine"] == "ollama" and r["model"] == "llama-3.1-8b"}
    assert ollama["int4"] == {"OLLAMA_NUM_PARALLEL": "1", "OLLAMA_FLASH_ATTENTION": "1", "OLLAMA_KV_CACHE_TYPE": "q4_0"}
    assert ollama["auto"] == {"OLLAMA_NUM_PARALLEL": "1"}


@pytest.mark.parametrize("precision, config, weights_gib", [
    ("int4", "BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='fp4', bnb_4bit_use_double_quant=True, "
             "bnb_4bit_compute_dtype='float16')", 5.4),
    ("nf4", "BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', bnb_4bit_use_double_quant=True, "
            "bnb_4bit_compute_dtype='float16')", 5.3),
    ("int8", "BitsAndBytesConfig(load_in_8bit=True)", 8.4),
])
def test_transformers_loads_the_quantized_weights_it_was_sized_for(frames, precision, config, weights_gib):
    """transformers' command for bitsandbytes weights (Llama 3 8B on a T4): the quantization config sized (NF4 at
    4.127 bits with its scales quantized again, int4 as bitsandbytes' FP4 at the same layout, LLM.int8), the rest in
    float16 as bitsandbytes' quantizer sets it; without it from_pretrained loaded ~15 GiB of bf16 weights."""
    row = rows(frames, dict(model="llama-3-8b", gpu="t4", engine="transformers", precision=precision,
                         max_model_len=4096)).iloc[0]
    assert row.weights_bytes / 2**30 == pytest.approx(weights_gib, abs=0.1)
    code = shlex.split(row.command)
    assert code[:2] == ["python", "-c"]
    assert code[2] == ("from transformers import AutoModelForCausalLM, BitsAndBytesConfig; AutoModelForCausalLM"
                       f".from_pretrained('meta-llama/Meta-Llama-3-8B', device_map='auto', torch_dtype='float16', "
                       f"quantization_config={config})")
    compile(code[2], "command", "exec")  # Python as written


def test_transformers_loads_16_bit_weights_in_the_dtype_sized(frames):
    # (an H100: transformers keeps FP8 in 8 bits from compute capability 8.9 only, engine/serving.py FORMAT_REFUSED_BY_ENGINE)
    out = rows(frames, *(dict(model="llama-3-8b", gpu="h100-sxm-80gb", engine="transformers", precision=p,
                           max_model_len=4096) for p in ("bf16", "fp16", "fp8")))
    dtypes = [shlex.split(c)[2].split("torch_dtype=")[1].rstrip(")") for c in out["command"]]
    assert dtypes == ["'bfloat16'", "'float16'", "'auto'"]  # fp8: the checkpoint's own quantization_config
    assert all("quantization_config" not in c for c in out["command"])


def test_the_cli_command_and_export_agree_beyond_the_models_context():
    """Through the command line: `serve --json`'s command and `serve --export vllm` beyond the model's context carry
    the same variable, flags and values."""
    argv = ("serve", "--model", "llama-3-8b", "--gpu", "h100-sxm-80gb", "--engine", "vllm", "--max-model-len", "16384",
            "--allow-long-context", "--kv-precision", "fp8", "--precision", "fp16")
    code, out, err = run_cli(*argv, "--json")
    assert code == 0, err
    command = json.loads(out)["command"]
    code, text, err = run_cli(*argv, "--export", "vllm")
    assert code == 0, err
    assert _words(command) == _words(_export_line(text))
    assert _words(command)[0] == {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}


def test_serve_on_a_card_without_bf16_defaults_to_fp16_and_says_so_in_its_command():
    """A T4 has no bf16 (compute capability 7.5): vLLM refuses --dtype bfloat16 there and its 'auto' picks float16
    (vllm/platforms/cuda.py, vllm/config/model.py _resolve_auto_dtype). serve without --precision plans fp16 and
    writes --dtype float16; --precision bf16 is refused, naming fp16; an A100 keeps the bf16 default."""
    argv = ("serve", "--model", "llama-3.2-3b", "--engine", "vllm", "--max-model-len", "4096", "--json")
    code, out, err = run_cli(*argv, "--gpu", "t4")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["precision"] == "fp16" and "--dtype float16" in plan["command"]
    code, out, err = run_cli(*argv, "--gpu", "a100-80gb-sxm")
    assert code == 0 and json.loads(out)["precision"] == "bf16", err
    code, out, err = run_cli(*argv, "--gpu", "t4", "--precision", "bf16")
    assert code == 2 and "precision 'bf16' is not accepted on gpu 't4' (turing)" in err and "accepted: fp16" in err


def test_serve_names_the_transformers_batch_that_does_not_fit():
    code, out, err = run_cli("serve", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "transformers",
                             "--max-model-len", "8192", "--concurrency", "7")
    assert code == 0, err
    assert "DOES NOT FIT: a batch of 7 requests of 8,192 tokens" in out and "transformers holds 4 at once" in out


@pytest.mark.parametrize("argv, precision", [
    (("--model", "gpt-oss-120b", "--gpu", "h100-sxm-80gb", "--engine", "vllm"), "mxfp4"),
    (("--model", "gpt-oss-20b", "--gpu", "rtx-4090", "--engine", "llama.cpp"), "mxfp4_moe"),
    (("--model", "gpt-oss-20b", "--gpu", "rtx-4090", "--engine", "ollama"), "mxfp4_moe"),
    (("--model", "deepseek-v3", "--gpu", "h200-sxm-141gb", "--gpus", "8", "--engine", "vllm"), "fp8"),
    (("--model", "deepseek-v3", "--gpu", "h200-sxm-141gb", "--gpus", "8", "--engine", "llama.cpp"), "q4_k_m"),
    (("--model", "gpt-oss-20b", "--gpu", "t4", "--engine", "vllm"), "fp16"),   # MXFP4 needs Ampere (fp4-needs-ampere)
    (("--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--engine", "vllm"), "bf16"),
])
def test_serve_plans_a_published_quantized_checkpoint_in_its_own_format(argv, precision):
    """gpt-oss's checkpoint stores its experts in MXFP4 and DeepSeek V3's is FP8 (catalog stored_precision): what
    `vllm serve openai/gpt-oss-120b` loads. serve planned them at bf16 unless told (gpt-oss-120b on one H100: 217.6
    GiB, does not fit); now in their own format where the engine and card take it, else the engine's default."""
    code, out, err = run_cli("serve", *argv, "--max-model-len", "8192", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["precision"] == precision
    if argv[1] == "gpt-oss-120b":
        assert plan["fits"] and plan["max_concurrency"] >= 1


def test_serve_offers_the_checkpoints_own_format_among_what_fits():
    code, out, err = run_cli("serve", "--model", "gpt-oss-120b", "--gpu", "h100-sxm-80gb", "--engine", "vllm",
                             "--max-model-len", "8192", "--precision", "bf16", "--json")
    assert code == 0, err
    options = {o["precision"]: o["gpus"] for o in json.loads(out)["fits_with"]}
    assert options.get("mxfp4") == 1
