"""Mamba2 hybrids (IBM Granite 4.0-H, NVIDIA Nemotron-H / Nemotron Nano 2 / Nemotron 3 Nano, IBM Bamba): their Mamba2
layers' weights
(engine/params.py mamba_params), the state each keeps per sequence in each engine (recurrent_state, engine/serving.py)
and training refused as not modelled (catalog/user.py _mamba2_layout, engine/scenarios.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from catalog import default_catalog
from catalog.schema import CatalogError
from catalog.user import model_from_config, model_from_config_file
from engine import estimate
from tests.clirun import run_cli

DATA = Path(__file__).parent / "data" / "configs_2026"

# Counted by transformers 5.24.0's own classes built on the meta device from these configs (torch 2.13.0 CPU):
#   /work/venv-measure/bin/python benchmarks/check_mamba2_counts.py
# (GraniteMoeHybridForCausalLM, NemotronHForCausalLM, BambaForCausalLM, FalconH1ForCausalLM: parameters, Mamba2 mixers)
MEASURED = {"granite-4.0-h-micro.json": (3_191_396_096, 36), "granite-4.0-h-tiny.json": (6_939_037_248, 36),
            "granite-4.0-h-small.json": (32_207_337_984, 36), "nvidia-nemotron-nano-9b-v2.json": (8_888_227_328, 27),
            "bamba-9b.json": (9_780_235_392, 29), "falcon-h1-7b-instruct.json": (7_585_513_568, 44),
            "nvidia-nemotron-3-nano-30b-a3b.json": (31_577_937_344, 23)}
# Nemotron 3 Nano's active parameters (the same run: all but its routed experts' 29,374,808,064, and 6 of 128 of
# those) and a small Nemotron-H with every block kind, experts included (NEMOTRON_MIXED there: total, active)
NANO3_ACTIVE = 3_580_073_408
NEMOTRON_MIXED = ({"model_type": "nemotron_h", "max_position_embeddings": 4096, "hidden_size": 96, "vocab_size": 500,
                   "hybrid_override_pattern": "ME*-EM", "num_attention_heads": 4, "num_key_value_heads": 2,
                   "head_dim": 16, "intermediate_size": 80, "mamba_num_heads": 8, "mamba_head_dim": 12, "n_groups": 2,
                   "ssm_state_size": 16, "n_routed_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 40,
                   "moe_shared_expert_intermediate_size": 56, "tie_word_embeddings": False, "use_bias": True,
                   "use_conv_bias": False}, 316_640, 255_200)
NANO3 = "nvidia-nemotron-3-nano-30b-a3b.json"


@pytest.fixture(scope="module")
def cat():
    c = default_catalog()
    return c.models(), c.gpus()


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_a_mamba2_config_counts_what_transformers_builds(name):
    record = model_from_config_file(DATA / name)
    assert (record["params"], record["mamba_layers"]) == MEASURED[name]


def test_nemotron_h_experts_count_what_transformers_builds():
    """Nemotron 3 Nano (E blocks: NemotronHMoE's ungated experts, sigmoid router and shared expert; it was refused,
    "has E (mixture-of-experts blocks ...)"): its active parameters, and every block kind in one small model."""
    nano = model_from_config_file(DATA / NANO3)
    assert (nano["active_params"], nano["num_experts"], nano["experts_per_token"]) == (NANO3_ACTIVE, 128, 6)
    assert (nano["expert_intermediate_size"], nano["shared_intermediate_size"], nano["mixer_free_layers"]) == (1856, 3712, 23)
    cfg, total, active = NEMOTRON_MIXED
    mixed = model_from_config(cfg)
    assert (mixed["params"], mixed["active_params"], mixed["mamba_layers"]) == (total, active, 2)


def test_bad_mamba2_fields_are_refused_by_name():
    nemotron = json.loads((DATA / "nvidia-nemotron-nano-9b-v2.json").read_text())
    with pytest.raises(CatalogError, match="hybrid_override_pattern.*has 'X'; accepted: .*- \\(MLP\\) and E"):
        model_from_config({**nemotron, "hybrid_override_pattern": "M*X"})
    nano = json.loads((DATA / NANO3).read_text())
    with pytest.raises(CatalogError, match="'moe_latent_size': is 1024: experts on a latent projection are not counted"):
        model_from_config({**nano, "moe_latent_size": 1024})
    with pytest.raises(CatalogError, match="'num_experts_per_tok': must be at most n_routed_experts \\(128\\), got 200"):
        model_from_config({**nano, "num_experts_per_tok": 200})
    granite = json.loads((DATA / "granite-4.0-h-micro.json").read_text())
    with pytest.raises(CatalogError, match="mamba_d_head': is 32: 32 x mamba_n_heads \\(64\\) must equal "
                                             "mamba_expand x hidden_size \\(4096\\); accepted: 64 or auto"):
        model_from_config({**granite, "mamba_d_head": 32})


def _with(models, *names):
    return pd.concat([models, pd.DataFrame([model_from_config_file(DATA / n) for n in names])], ignore_index=True)


def test_transformers_keeps_the_attention_layers_kv_and_a_state_per_sequence(cat):
    """Granite 4.0-H Micro under transformers 5.24 (benchmarks/check_mamba2_counts.py: a bf16 forward leaves
    LinearAttentionLayer conv_states (batch, conv_dim, kernel) in bf16 and recurrent_states (batch, heads, head_dim,
    state) in float32): 4 attention layers of 8 KV heads of 64, and 36 x ((4,096 + 2 x 128) x 4 x 2 + 64 x 64 x 128 x 4)
    a sequence; Nemotron Nano 2: 4 attention layers of its 56 (its MLP blocks keep nothing)."""
    models, gpus = cat
    models = _with(models, "granite-4.0-h-micro.json", "nvidia-nemotron-nano-9b-v2.json")
    state = 36 * ((4096 + 2 * 128) * 4 * 2 + 64 * 64 * 128 * 4)
    for batch, seq in ((1, 4096), (3, 10_000)):
        row = estimate(pd.DataFrame([{"model": "ibm-granite-granite-4.0-h-micro", "gpu": "h100-sxm-80gb", "task": "infer",
                                      "batch": batch, "seq": seq}]), models, gpus).iloc[0]
        assert row["kv_cache_bytes"] == 4 * 2 * 8 * 64 * 2 * batch * seq + state * batch
    nano = estimate(pd.DataFrame([{"model": "nvidia-nvidia-nemotron-nano-9b-v2", "gpu": "h100-sxm-80gb", "task": "infer",
                                   "batch": 2, "seq": 8192}]), models, gpus).iloc[0]
    assert nano["kv_cache_bytes"] == 4 * 2 * 8 * 128 * 2 * 2 * 8192 + 2 * 27 * (
        (10240 + 2 * 8 * 128) * 4 * 2 + 128 * 80 * 128 * 4)


def test_nemotron_3_nano_keeps_kv_on_its_6_attention_blocks_and_a_state_on_its_23_mamba2_ones(cat):
    """Nemotron 3 Nano's E blocks keep nothing: K/V of 2 heads of 128 on the 6 * blocks, and 23 x ((4,096 + 2 x 8 x 128)
    x 4 x 2 + 64 x 64 x 128 x 4) a sequence; every weight resident, 6 of 128 experts read a token."""
    models, gpus = cat
    models = _with(models, NANO3)
    row = estimate(pd.DataFrame([{"model": "nvidia-nvidia-nemotron-3-nano-30b-a3b-bf16", "gpu": "h100-sxm-80gb",
                                  "task": "infer", "batch": 2, "seq": 8192}]), models, gpus).iloc[0]
    assert row["kv_cache_bytes"] == 6 * 2 * 2 * 128 * 2 * 2 * 8192 + 2 * 23 * ((4096 + 2 * 8 * 128) * 4 * 2
                                                                               + 64 * 64 * 128 * 4)
    assert row["weights_bytes"] == MEASURED[NANO3][0] * 2
    # mxfp4 on the routed experts alone (QUANT_EXPERTS_ONLY: 4.25 bits), 16 bits elsewhere; with the experts counted
    # gated (3 h f) it gave -0.25 GiB
    mx = estimate(pd.DataFrame([{"model": "nvidia-nvidia-nemotron-3-nano-30b-a3b-bf16", "gpu": "h100-sxm-80gb",
                                 "task": "infer", "precision": "mxfp4"}]), models, gpus).iloc[0]
    experts = 29_374_808_064
    assert mx["weights_bytes"] == pytest.approx((MEASURED[NANO3][0] - experts) * 2 + experts * 4.25 / 8)


def _serve_json(*args):
    code, out, err = run_cli("serve", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_vllm_pages_a_mamba2_state_beside_the_attention_pages():
    """vLLM (MambaStateShapeCalculator.mamba2_state_shape): Nemotron Nano 2's mamba page is (4 - 1) x (10,240 + 2 x 8 x
    128) conv values in bf16 and a 128 x 80 x 128 temporal state, float32 for Nemotron-H (NemotronHForCausalLMConfig's
    default): 5,316,608 B, so the attention block is 16 x ceil(5,316,608 / (16 x 4,096)) = 1,312 tokens. (With the
    state in 16 bits, vLLM's default before vllm-project/vllm#39032, the same formula gives the 672 tokens that issue
    #24280 reports for this model.) 4 attention and 27 Mamba2 layers: groups of 4, a request of 32,768 tokens takes 25 +
    7 pages. Granite 4.0-H Small at TP 2: its one group is given to both ranks (extra_groups_for_head_shards), a rank's
    conv state 3 x (8,192 + 2 x 2 x 128) / 2 bf16 and temporal state 64 x 64 x 128 bf16 ("auto")."""
    page = 3 * (10240 + 2 * 8 * 128) * 2 + 128 * 80 * 128 * 4
    assert 16 * np.ceil((page - 128 * 80 * 128 * 2) / 65536) == 672
    kv = 1000 * 1312 * 4096 * 4 + 7
    d = _serve_json("--model-config", str(DATA / "nvidia-nemotron-nano-9b-v2.json"), "--gpu", "h100-sxm-80gb",
                    "--engine", "vllm", "--max-model-len", "32768", "--kv-cache-memory-bytes", str(kv))
    assert d["kv_block_tokens"] == 16 * np.ceil(page / 65536) == 1312 and d["mamba_layers"] == 27
    assert d["num_gpu_blocks"] == 1000 and d["max_concurrency"] == pytest.approx(1000 / (np.ceil(32768 / 1312) + 7))
    d = _serve_json("--model-config", str(DATA / "granite-4.0-h-small.json"), "--gpu", "h100-sxm-80gb", "--gpus", "2",
                    "--engine", "vllm", "--max-model-len", "32768")
    rank_page = 3 * (8192 + 2 * 2 * 128) // 2 * 2 + 64 * 64 * 128 * 2
    assert d["kv_block_tokens"] == 16 * np.ceil(rank_page / (16 * 2 * 4 * 128 * 2))
    # Nemotron 3 Nano: a mamba page of 3 x (4,096 + 2 x 8 x 128) x 2 + 64 x 64 x 128 x 4 (float32, nemotron_h) = 2,134,016
    # B over 2 x 2 x 128 x 2 B of K/V a token and attention layer; its routed experts' bytes (the experts' path)
    d = _serve_json("--model-config", str(DATA / NANO3), "--gpu", "h100-sxm-80gb", "--engine", "vllm",
                    "--max-model-len", "32768")
    assert (d["kv_block_tokens"], d["attention_layers"], d["mamba_layers"]) == (16 * np.ceil(2_134_016 / 16_384), 6, 23)
    assert d["expert_bytes"] == 29_374_808_064 * 2


def test_sglang_splits_the_budget_between_its_mamba_and_kv_pools():
    """SGLang (Mamba2StateShape.create, mamba_cache_per_req): Granite 4.0-H Micro's request holds 36 x (3 x (4,096 + 2 x
    128) x 2 B + 64 x 64 x 128 x 4 B) (bf16 conv, float32 temporal); 0.9 / 1.9 of the budget buys those, the rest holds
    the 4 attention layers' tokens at 2 x 8 x 64 x 2 B a layer."""
    d = _serve_json("--model-config", str(DATA / "granite-4.0-h-micro.json"), "--gpu", "h100-sxm-80gb",
                    "--engine", "sglang", "--max-model-len", "32768")
    rest = d["budget_bytes"] - d["weights_gpu_bytes"] - d["non_torch_bytes"]
    per_req = 36 * (3 * (4096 + 256) * 2 + 64 * 64 * 128 * 4)
    mamba = np.floor(rest * 0.9 / 1.9 / per_req)
    tokens = np.floor((rest - mamba * per_req) / (4 * 2048))
    assert d["kv_cache_bytes_available"] == pytest.approx(tokens * 4 * 2048)
    assert d["max_concurrency"] == pytest.approx(min(tokens / 32768, np.floor(mamba / 3)))


def test_llama_cpp_keeps_the_experts_of_the_e_blocks_among_its_first_n_layers_on_the_host():
    """--n-cpu-moe 40 on Nemotron 3 Nano: its E blocks stand between the M and * ones (MEMEM*EMEMEM*...), 17 of them
    among layers 0-39, not the 11 a run of 29 leading dense layers would leave there."""
    d = _serve_json("--model-config", str(DATA / NANO3), "--gpu", "rtx-3060-12gb", "--engine", "llama.cpp",
                    "--max-model-len", "32768", "--cpu-moe-layers", "40")
    assert d["cpu_moe_layers"] == 40 and d["expert_host_bytes"] == pytest.approx(d["expert_bytes"] * 17 / 23)


@pytest.mark.parametrize("engine", ["llama.cpp", "transformers"])
def test_llama_cpp_and_transformers_serve_a_mamba2_model(engine):
    d = _serve_json("--model-config", str(DATA / "bamba-9b.json"), "--gpu", "h100-sxm-80gb", "--engine", engine,
                    "--max-model-len", "8192")
    assert d["mamba_layers"] == 29 and d["max_concurrency"] >= 1


def test_estimate_infers_trains_and_refuses_what_is_not_modelled(tmp_path):
    path = str(DATA / "nvidia-nemotron-nano-9b-v2.json")
    code, out, err = run_cli("estimate", "--model-config", path, "--gpu", "h100-sxm-80gb", "--task", "infer")
    assert code == 0 and "parameters 8,888,227,328" in out
    # Nemotron-H: full and freeze tuning are modelled (its block layout, tests/test_hybrid_training_accuracy.py), and LoRA
    # on its projections named; on every projection peft refuses (all-linear fails on its out_proj), and so does this
    code, out, err = run_cli("estimate", "--model-config", path, "--gpu", "h100-sxm-80gb", "--method", "lora",
                             "--lora-targets", "all")
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.strip().splitlines() == ["error: lora targets 'all' on nvidia-nvidia-nemotron-nano-9b-v2: peft 0.21.2 "
                                        "refuses all-linear on its Mamba2 layers' out_proj; accepted for this model: "
                                        "--lora-targets as a list of its attention and MLP projections (q_proj,k_proj,"
                                        "v_proj,o_proj,up_proj,down_proj), --method full or freeze, --task infer, and "
                                        "`serve`"]
    code, out, err = run_cli("estimate", "--model-config", path, "--gpu", "h100-sxm-80gb", "--method", "lora", "--json")
    assert code == 0 and json.loads(out)["trainable_params"] == 4 * 8 * ((4480 + 5120) + (4480 + 1024))  # q, v: 4 blocks
    # Nemotron 3 Nano's LoRA: peft adapts the attention blocks' q and v (r 8 by default) and, where up / down are named,
    # each expert block's shared expert, never its fused experts (tests/data/measured_hybrid_training.csv's counts)
    code, out, err = run_cli("estimate", "--model-config", str(DATA / NANO3), "--gpu", "h100-sxm-80gb", "--method",
                             "lora", "--json")
    assert code == 0 and json.loads(out)["trainable_params"] == 6 * 8 * ((2688 + 4096) + (2688 + 256))  # 6 * blocks
    code, out, err = run_cli("estimate", "--model-config", str(DATA / NANO3), "--gpu", "h100-sxm-80gb", "--method",
                             "lora", "--lora-targets", "up_proj,down_proj", "--lora-rank", "8", "--json")
    assert code == 0 and json.loads(out)["trainable_params"] == 23 * 8 * 2 * (2688 + 3712)  # 23 shared experts
    code, out, err = run_cli("estimate", "--model-config", str(DATA / NANO3), "--gpu", "h100-sxm-80gb", "--method",
                             "lora", "--lora-targets", "all")
    assert code == 2 and "lora targets 'all' on" in err and "refuses all-linear" in err
    for method in ("full", "freeze"):
        for cfg in (path, str(DATA / NANO3)):
            code, out, err = run_cli("estimate", "--model-config", cfg, "--gpu", "h100-sxm-80gb", "--method", method,
                                     "--freeze-layers", "2")
            assert code == 0 and "Traceback" not in err, (cfg, method, err)
    # Falcon-H1 (its mixers beside attention): full and freeze tuning, not LoRA; with mamba_rms_norm, not at all
    falcon = str(DATA / "falcon-h1-7b-instruct.json")
    code, out, err = run_cli("estimate", "--model-config", falcon, "--gpu", "h100-sxm-80gb", "--method", "full")
    assert code == 0 and "Traceback" not in err, err
    code, out, err = run_cli("estimate", "--model-config", falcon, "--gpu", "h100-sxm-80gb", "--method", "qlora")
    assert code == 0 and "Traceback" not in err, err
    code, out, err = run_cli("estimate", "--model-config", falcon, "--gpu", "h100-sxm-80gb", "--method", "qlora",
                             "--lora-targets", "all")
    assert code == 2 and "lora targets 'all' on tiiuae-falcon-h1-7b-instruct: peft 0.21.2 refuses all-linear" in err
    normed = tmp_path / "falcon-h1-normed.json"
    normed.write_text(json.dumps(dict(json.loads(Path(falcon).read_text()), mamba_rms_norm=True)))
    code, out, err = run_cli("estimate", "--model-config", str(normed), "--gpu", "h100-sxm-80gb", "--method", "full")
    assert code == 2 and err.strip().splitlines() == [
        "error: tiiuae-falcon-h1-7b-instruct has Mamba2 layers, whose training memory is not modelled yet (modelled: "
        "Qwen3.5, Qwen3-Next, Granite 4.0-H, Bamba, and full and freeze tuning of Nemotron-H and of Falcon-H1 without "
        "mamba_rms_norm); accepted for this model: --task infer, and `serve`"]
    # Granite 4.0-H Micro (dense) and, since the hybrid probe, Granite 4.0-H's MoE models and Bamba are modelled
    # (tests/test_hybrid_training_accuracy.py)
    for name in ("granite-4.0-h-micro.json", "granite-4.0-h-small.json", "bamba-9b.json"):
        code, out, err = run_cli("estimate", "--model-config", str(DATA / name), "--gpu", "h100-sxm-80gb", "--method",
                                 "lora")
        assert code == 0 and "Traceback" not in err, (name, err)


def _gguf(path, arch, meta, arrays, tensors):
    import gguf
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in meta.items():
        w.add_uint32(f"{arch}.{key}", value)
    for key, values in arrays.items():
        w.add_array(f"{arch}.{key}", values)
    w.add_token_list([f"t{i}" for i in range(128)])
    w.add_file_type(1)
    for name, shape in tensors:
        w.add_tensor(name, np.zeros(shape, np.float16 if len(shape) > 1 else np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _mamba_tensors(i, h, heads, head_dim, state, groups, kernel):
    inner, conv = heads * head_dim, heads * head_dim + 2 * groups * state
    p = f"blk.{i}."
    return [(p + "ssm_in.weight", (inner + conv + heads, h)), (p + "ssm_conv1d.weight", (conv, kernel)),
            (p + "ssm_conv1d.bias", (conv,)), (p + "ssm_dt.bias", (heads,)), (p + "ssm_a", (heads,)),
            (p + "ssm_d", (heads,)), (p + "ssm_norm.weight", (inner,)), (p + "ssm_out.weight", (h, inner))]


def _attn_tensors(i, h, heads, kv, d):
    p = f"blk.{i}."
    return [(p + "attn_q.weight", (heads * d, h)), (p + "attn_k.weight", (kv * d, h)), (p + "attn_v.weight", (kv * d, h)),
            (p + "attn_output.weight", (h, heads * d))]


def _nemotron_h_tensors(h, layout, mlp):
    """llama.cpp's tensors of a small Nemotron-H of `layout` (M: a Mamba2 block, *: attention, any other letter the
    tensors mlp(i) gives), with its embedding, output and each block's norm."""
    tensors = [("token_embd.weight", (128, h)), ("output.weight", (128, h)), ("output_norm.weight", (h,))]
    for i, kind in enumerate(layout):
        tensors.append((f"blk.{i}.attn_norm.weight", (h,)))
        if kind == "M":
            tensors += _mamba_tensors(i, h, 8, 16, 8, 2, 4)
        elif kind == "*":
            tensors += _attn_tensors(i, h, 4, 2, 32)
        else:
            tensors += mlp(i)
    return tensors


def test_a_granite_4_h_gguf_is_read_as_its_config(tmp_path):
    """convert_hf_to_gguf.py GraniteHybridModel's metadata (head_count_kv 0 on Mamba2 layers, ssm.* keys, experts and
    the shared expert's width) and llama.cpp's tensors of a small Granite 4.0-H with experts: the record is the one its
    config.json gives, and the tensors hold exactly the parameters the architecture counts."""
    from catalog.checkpoints import model_from_files
    h, layers, kinds = 64, 4, ["mamba", "attention", "mamba", "mamba"]
    tensors = [("token_embd.weight", (128, h)), ("output_norm.weight", (h,))]
    for i, kind in enumerate(kinds):
        tensors += [(f"blk.{i}.attn_norm.weight", (h,)), (f"blk.{i}.ffn_norm.weight", (h,)),
                    (f"blk.{i}.ffn_gate_inp.weight", (4, h)), (f"blk.{i}.ffn_gate_exps.weight", (4, 32, h)),
                    (f"blk.{i}.ffn_up_exps.weight", (4, 32, h)), (f"blk.{i}.ffn_down_exps.weight", (4, h, 32)),
                    (f"blk.{i}.ffn_gate_shexp.weight", (48, h)), (f"blk.{i}.ffn_up_shexp.weight", (48, h)),
                    (f"blk.{i}.ffn_down_shexp.weight", (h, 48))]
        tensors += _attn_tensors(i, h, 4, 2, 16) if kind == "attention" else _mamba_tensors(i, h, 8, 16, 8, 2, 4)
    path = _gguf(tmp_path / "granite-h-tiny.gguf", "granitehybrid",
                 {"block_count": layers, "embedding_length": h, "attention.head_count": 4, "context_length": 2 ** 20,
                  "feed_forward_length": 32, "expert_count": 4, "expert_used_count": 2,
                  "expert_shared_feed_forward_length": 48, "ssm.conv_kernel": 4, "ssm.state_size": 8,
                  "ssm.group_count": 2, "ssm.inner_size": 128, "ssm.time_step_rank": 8},
                 {"attention.head_count_kv": [0, 2, 0, 0]}, tensors)
    record, info = model_from_files([path])
    config = model_from_config({"model_type": "granitemoehybrid", "hidden_size": h, "num_hidden_layers": layers,
                                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
                                "max_position_embeddings": 2 ** 20, "intermediate_size": 32, "num_local_experts": 4,
                                "num_experts_per_tok": 2, "shared_intermediate_size": 48, "layer_types": kinds,
                                "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_d_state": 8, "mamba_n_groups": 2,
                                "mamba_d_conv": 4, "tie_word_embeddings": True})
    assert record["params"] == config["params"] == info["params_stored"] == sum(int(np.prod(s)) for _n, s in tensors)
    assert (record["mamba_layers"], record["num_experts"], record["shared_intermediate_size"]) == (3, 4, 48)


def test_a_nemotron_h_gguf_is_read_as_its_config(tmp_path):
    """NemotronHModel's metadata: head_count_kv and feed_forward_length per block (0 where the block has none), ssm.*
    keys and key_length; llama.cpp's tensors of a small Nemotron-H (M * - M): read as its config.json, every tensor
    counted."""
    from catalog.checkpoints import model_from_files
    h = 64
    tensors = _nemotron_h_tensors(h, "M*-M", lambda i: [(f"blk.{i}.ffn_up.weight", (96, h)),
                                                         (f"blk.{i}.ffn_down.weight", (h, 96))])
    path = _gguf(tmp_path / "nemotron-h.gguf", "nemotron_h",
                 {"block_count": 4, "embedding_length": h, "attention.head_count": 4, "context_length": 8192,
                  "attention.key_length": 32, "attention.value_length": 32, "ssm.conv_kernel": 4, "ssm.state_size": 8,
                  "ssm.group_count": 2, "ssm.inner_size": 128, "ssm.time_step_rank": 8},
                 {"attention.head_count_kv": [0, 2, 0, 0], "feed_forward_length": [0, 0, 96, 0]}, tensors)
    record, info = model_from_files([path])
    assert record["params"] == info["params_stored"] == sum(int(np.prod(s)) for _n, s in tensors)
    assert (record["mamba_layers"], record["mixer_free_layers"], record["head_dim"]) == (2, 1, 32)


def test_a_nemotron_3_nano_gguf_is_read_as_its_config(tmp_path):
    """convert_hf_to_gguf.py NemotronHModel's nemotron_h_moe (is_moe): feed_forward_length per block (the experts' width
    on E blocks, 0 elsewhere), expert_count, expert_used_count, expert_feed_forward_length and
    expert_shared_feed_forward_length; llama.cpp's tensors (gguf-py 0.19 constants.py MODEL_TENSORS[NEMOTRON_H_MOE]:
    ffn_gate_inp, ffn_up_exps, ffn_down_exps, ffn_up_shexp, ffn_down_shexp, exp_probs_b) of a small M E * E: read as
    its config.json. The tensors hold the router's correction bias too (exp_probs_b, 8 a block), a buffer that
    transformers' parameters leave out, as the count does."""
    from catalog.checkpoints import model_from_files
    h, e, fe, fs = 64, 8, 24, 40

    def experts(i):
        p = f"blk.{i}."
        return [(p + "ffn_gate_inp.weight", (e, h)), (p + "exp_probs_b.bias", (e,)),
                (p + "ffn_up_exps.weight", (e, fe, h)), (p + "ffn_down_exps.weight", (e, h, fe)),
                (p + "ffn_up_shexp.weight", (fs, h)), (p + "ffn_down_shexp.weight", (h, fs))]

    tensors = _nemotron_h_tensors(h, "ME*E", experts)
    path = _gguf(tmp_path / "nemotron-3-nano.gguf", "nemotron_h_moe",
                 {"block_count": 4, "embedding_length": h, "attention.head_count": 4, "context_length": 8192,
                  "attention.key_length": 32, "attention.value_length": 32, "ssm.conv_kernel": 4, "ssm.state_size": 8,
                  "ssm.group_count": 2, "ssm.inner_size": 128, "ssm.time_step_rank": 8, "expert_count": e,
                  "expert_used_count": 2, "expert_feed_forward_length": fe, "expert_shared_feed_forward_length": fs},
                 {"attention.head_count_kv": [0, 0, 2, 0], "feed_forward_length": [0, fe, 0, fe]}, tensors)
    record, info = model_from_files([path])
    config = model_from_config({"model_type": "nemotron_h", "hidden_size": h, "hybrid_override_pattern": "ME*E",
                                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 128,
                                "max_position_embeddings": 8192, "mamba_num_heads": 8, "mamba_head_dim": 16,
                                "ssm_state_size": 8, "n_groups": 2, "conv_kernel": 4, "n_routed_experts": e,
                                "num_experts_per_tok": 2, "moe_intermediate_size": fe,
                                "moe_shared_expert_intermediate_size": fs})
    assert record["params"] == config["params"] == info["params_stored"] - 2 * e \
        == sum(int(np.prod(s)) for _n, s in tensors) - 2 * e
    assert (record["mamba_layers"], record["num_experts"], record["experts_per_token"], record["mixer_free_layers"],
            record["family"]) == (1, e, 2, 2, "custom-nemotron_h")


def test_training_rows_of_a_mamba2_model_are_labelled_not_modelled_in_tables(cat):
    """planning.not_modelled: a training matrix keeps a Mamba2 model's rows as "✗ not modelled" (no figures), beside
    the answers of the models it does model; inference rows of the same model are estimated."""
    from planner import planning
    models, gpus = cat
    models = _with(models, "nvidia-nemotron-nano-9b-v2.json", "granite-4.0-h-micro.json", "granite-4.0-h-small.json")
    sc = planning.expand({"task": "train", "method": "lora", "lora_targets": "all"},
                         model=["nvidia-nvidia-nemotron-nano-9b-v2", "llama-3.1-8b", "ibm-granite-granite-4.0-h-micro",
                                "ibm-granite-granite-4.0-h-small"], gpu=["h100-sxm-80gb"])
    conf = planning.configurations(sc, models, gpus)
    # (Granite 4.0-H Micro and, since the hybrid probe, Small are modelled: tests/test_hybrid_training_accuracy.py;
    # Nemotron-H's LoRA on every projection is not: peft refuses all-linear on it)
    assert conf["label"].tolist()[:3] == ["✗ not modelled", "1", "1"] and conf["label"].iloc[3] != "✗ not modelled"
    # its LoRA with the projections named is estimated (q and v, the default: without checkpointing its frozen Mamba2
    # mixers keep more than one H100 holds at 2,048 tokens, so no count of them fits)
    sc = planning.expand({"task": "train", "method": "lora"}, model=["nvidia-nvidia-nemotron-nano-9b-v2"],
                         gpu=["h100-sxm-80gb"])
    conf = planning.configurations(sc, models, gpus)
    assert conf["label"].iloc[0] != "✗ not modelled" and conf["peak_bytes"].notna().all()
    sc = planning.expand({"task": "infer"}, model=["nvidia-nvidia-nemotron-nano-9b-v2"], gpu=["h100-sxm-80gb"])
    assert planning.configurations(sc, models, gpus)["label"].iloc[0] != "✗ not modelled"


def test_the_state_per_layer_follows_vllms_and_sglangs_shapes_under_tensor_parallelism():
    """MambaStateShapeCalculator.mamba2_state_shape / Mamba2StateShape.create: the conv state's groups are raised to tp
    where tp does not divide them (extra_groups_for_head_shards), so Granite 4.0-H Small's one group is held by every
    rank; Nemotron Nano 2's 8 groups split over 2 ranks as they are. The SSM state does not change."""
    from engine.params import recurrent_state
    granite = model_from_config_file(DATA / "granite-4.0-h-small.json")
    for tp, groups in ((1, 1), (2, 2), (8, 8)):
        conv, ssm = recurrent_state(granite, conv_positions="kernel-1", tp=tp)
        assert (conv, ssm) == (36 * 3 * (8192 + 2 * groups * 128), 36 * 128 * 64 * 128)
    nano = model_from_config_file(DATA / "nvidia-nemotron-nano-9b-v2.json")
    assert recurrent_state(nano, conv_positions="kernel-1", tp=2)[0] == 27 * 3 * (10240 + 2 * 8 * 128)
    assert recurrent_state(nano, conv_positions="kernel", tp=1)[0] == 27 * 4 * (10240 + 2 * 8 * 128)


def test_falcon_h1_keeps_kv_on_every_layer_and_a_mamba2_state_beside_it(cat):
    """Falcon-H1 (FalconH1DecoderLayer: attention and a Mamba2 mixer side by side on every layer; transformers 5.24's
    LinearAttentionAndFullAttentionLayer keeps K/V and both states on each, benchmarks/check_mamba2_counts.py): 44
    layers of 2 KV heads of 128 a token and 44 x ((3,072 + 2 x 256) x 4 x 2 + 24 x 128 x 256 x 4) a sequence. vLLM: a
    mamba page of 3 x 3,584 x 2 + 24 x 128 x 256 x 2 = 1,594,368 B over 1,024 B of K/V a token gives the 1,568-token
    block (and its 0.71% padding) a Falcon-H1 start-up log shows; 44 attention and 44 Mamba2 layers, one group each."""
    models, gpus = cat
    models = _with(models, "falcon-h1-7b-instruct.json")
    row = estimate(pd.DataFrame([{"model": "tiiuae-falcon-h1-7b-instruct", "gpu": "h100-sxm-80gb", "task": "infer",
                                  "batch": 2, "seq": 8192}]), models, gpus).iloc[0]
    assert row["kv_cache_bytes"] == 44 * 2 * 2 * 128 * 2 * 2 * 8192 + 2 * 44 * ((3072 + 512) * 4 * 2 + 24 * 128 * 256 * 4)
    page = 3 * (3072 + 2 * 256) * 2 + 24 * 128 * 256 * 2
    assert page == 1_594_368 and round((1568 * 1024 / page - 1) * 100, 2) == 0.71
    kv = 500 * 1568 * 1024 * 44 + 5
    d = _serve_json("--model-config", str(DATA / "falcon-h1-7b-instruct.json"), "--gpu", "h100-sxm-80gb",
                    "--engine", "vllm", "--max-model-len", "32768", "--kv-cache-memory-bytes", str(kv))
    assert (d["kv_block_tokens"], d["attention_layers"], d["mamba_layers"], d["num_gpu_blocks"]) == (1568, 44, 44, 500)
    assert d["max_concurrency"] == pytest.approx(500 / (np.ceil(32768 / 1568) + 1))


def test_a_mamba2_prefill_holds_what_transformers_holds(cat):
    """Granite 4.0-H Micro and Nemotron Nano 2's whole prefill measured on fake tensors (transformers 5.24's torch path
    without mamba_ssm, benchmarks/check_mamba2_counts.py --whole; none of these rows fitted: the Mamba2 mixer's
    coefficients, engine/components.py MAMBA_PREFILL_COEF, come from single-layer runs of other sizes). The part beside
    the weights (the KV cache, the states and the largest layer's working set) within -1% and +2% (+0.6% to +0.95%
    here); without the mixer's working set it was 78-83% under."""
    models, gpus = cat
    names = ("granite-4.0-h-micro.json", "nvidia-nemotron-nano-9b-v2.json")
    ids = {n: model_from_config_file(DATA / n)["id"] for n in names}
    models = _with(models, *names)
    measured = pd.read_csv(Path(__file__).parent / "data" / "measured_mamba2_prefill.csv")
    frame = pd.DataFrame({"model": measured["config"].map(ids), "gpu": "h200-sxm-141gb", "task": "infer",
                          "precision": "bf16", "batch": measured["batch"], "seq": measured["seq"]})
    res = estimate(frame, models, gpus, fragmentation=0, context_bytes=0, cublas_bytes=0)
    rest_err = (res["peak_bytes"] - res["weights_bytes"]).to_numpy() / measured["activation_bytes"].to_numpy() - 1
    assert (rest_err > -0.01).all() and (rest_err < 0.02).all(), rest_err


def test_a_block_pattern_that_disagrees_with_the_counts_is_refused_by_name():
    """The record's block_pattern (Nemotron-H's hybrid_override_pattern, kept for freeze tuning's last k blocks) must
    have one letter a layer and agree with mamba_layers, mixer_free_layers and mlp_free_layers."""
    from catalog.schema import MODEL_FIELDS, CatalogError, check_model
    from catalog.user import model_from_config_file
    record = model_from_config_file(DATA / "nvidia-nemotron-nano-9b-v2.json")
    assert record["block_pattern"] == "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"
    check_model(dict(record), "x.json")
    # the hybrids whose layers each hold a mixer and an MLP keep their layers' order too (M Mamba2, L Gated DeltaNet,
    # * attention); Falcon-H1, every layer alike, none
    assert model_from_config_file(DATA / "bamba-9b.json")["block_pattern"] == "M" * 9 + "*" + "M" * 8 + "*" + "M" * 8 \
        + "*" + "M" * 4
    granite = model_from_config_file(DATA / "granite-4.0-h-micro.json")
    assert [i for i, c in enumerate(granite["block_pattern"]) if c == "*"] == [5, 15, 25, 35]
    assert model_from_config_file(DATA / "falcon-h1-7b-instruct.json").get("block_pattern") is None
    qwen = default_catalog().models().set_index("id").loc["qwen3-next-80b-a3b", "block_pattern"]
    assert qwen == "LLL*" * 12
    with pytest.raises(CatalogError, match="is not read for a model whose Mamba2 mixers run beside attention"):
        check_model(dict(model_from_config_file(DATA / "falcon-h1-7b-instruct.json"), block_pattern="M" * 44), "x.json")
    with pytest.raises(CatalogError, match="has 35 blocks of the kind linear_attention_layers counts, where linear_attention_layers is 36"):
        check_model(dict(default_catalog().models().set_index("id").loc["qwen3-next-80b-a3b"].dropna().to_dict(),
                         id="q", block_pattern="LLL*" * 11 + "LL**"), "x.json")
    for pattern, says in ((record["block_pattern"][:-1], "has 55 blocks where num_layers is 56"),
                          (record["block_pattern"].replace("*", "M", 1), "has 28 blocks of the kind mamba_layers counts")):
        with pytest.raises(CatalogError, match=says):
            check_model(dict(record, block_pattern=pattern), "x.json")
    with pytest.raises(ValueError, match="a string of M, L, \\*, - and E"):
        MODEL_FIELDS["block_pattern"].check("M-X")


def test_tables_label_only_the_all_linear_lora_rows_of_nemotron_h_and_falcon_h1_as_not_modelled():
    """planning.not_modelled (the "✗ not modelled" label of a table row) follows the engine per method and targets:
    Nemotron-H's and Falcon-H1's full and freeze rows are estimated, and their LoRA and QLoRA rows with the projections
    listed; on every projection ('all': peft's all-linear, which peft refuses there) they are not; inference rows
    always are."""
    from planner import planning
    models = default_catalog().models()
    records = [model_from_config_file(DATA / name) for name in ("nvidia-nemotron-nano-9b-v2.json",
                                                                "falcon-h1-7b-instruct.json")]
    models = pd.concat([models, pd.DataFrame(records)], ignore_index=True)
    frame = planning.expand({"task": "train", "batch": 1, "seq": 1024, "freeze_layers": 2},
                            model=[r["id"] for r in records], method=["full", "freeze", "lora", "qlora"],
                            lora_targets=["q_proj,v_proj", "all"])
    frame = pd.concat([frame, frame.head(2).assign(task="infer", method="none")], ignore_index=True)
    label = planning.not_modelled(frame, models)
    want = (frame["method"].astype(str).isin(["lora", "qlora"]) & (frame["lora_targets"].astype(str) == "all")).to_numpy()
    assert want.sum() == 4 and (label == want).all(), frame.assign(label=label)
