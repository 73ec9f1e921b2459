"""Late-2025 / 2026 architectures a user brings as a Hugging Face config.json that the shipped catalog does not hold:
OLMo 2 and OLMo 3 (q/k norms over all heads, OLMo 3's sliding-window layers), Seed-OSS-36B (q/k/v biases),
MiniMax-M2 (256 experts, q/k norms over all heads) and ERNIE-4.5 MoE (a dense first layer, shared experts); and the
hybrids whose Mamba / convolution layers the engine does not count, refused in one line (catalog/user.py).

The configs in tests/data/configs_2026 carry the released checkpoints' config.json keys and values (allenai/OLMo-2-1124-7B,
OLMo-2-0325-32B, Olmo-3-1025-7B, Olmo-3-1125-32B, ByteDance-Seed/Seed-OSS-36B-Instruct, MiniMaxAI/MiniMax-M2,
baidu/ERNIE-4.5-21B-A3B-PT, ERNIE-4.5-300B-A47B-PT)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog.checkpoints import model_from_files
from catalog.schema import CatalogError
from catalog.user import model_from_config, model_from_config_file
from tests.clirun import run_cli
from tests.test_models_2025 import write_f16_gguf

DATA = Path(__file__).parent / "data" / "configs_2026"

# What transformers 5.24.0's own classes hold, built on the meta device from these configs (AutoConfig.for_model(
# model_type, **config) then AutoModelForCausalLM.from_config, torch 2.13.0 CPU: sum of parameters().numel()), and the
# figure each publisher gives. MiniMax-M2's count adds its 62 x 256 e_score_correction_bias values, a buffer in
# transformers (MiniMaxM2SparseMoeBlock) but a tensor of the checkpoint that vLLM loads, as DeepSeek-V3's is counted.
TRANSFORMERS_COUNTS = {
    "olmo-2-1124-7b.json": (7_298_617_344, 7.30e9),       # OLMo 2 7B: "7.3B" (Hub model card)
    "olmo-2-0325-32b.json": (32_234_279_936, 32.2e9),     # OLMo 2 32B: "32.2B"
    "olmo-3-1025-7b.json": (7_298_011_136, 7.3e9),        # Olmo 3 7B
    "olmo-3-1125-32b.json": (32_233_522_176, 32.2e9),     # Olmo 3 32B
    "seed-oss-36b-instruct.json": (36_151_104_512, 36e9),  # Seed-OSS-36B: "36B"
    "minimax-m2.json": (228_689_748_992 + 62 * 256, 230e9),  # MiniMax-M2: "230 billion total" (transformers docs)
    "ernie-4.5-21b-a3b-pt.json": (21_825_437_888, 21.8e9),  # ERNIE-4.5-21B-A3B: "21B", 21.8B on its Hub page
    "ernie-4.5-300b-a47b-pt.json": (299_484_163_264, 300e9),  # ERNIE-4.5-300B-A47B: "300B"
    "ernie-4.5-0.3b-pt.json": (360_748_032, 0.36e9),  # ERNIE-4.5-0.3B: "0.36B"
    # Granite 4.0 Micro (ibm-granite/granite-4.0-micro: attention on all 40 layers, no experts): IBM's "3B", 3.4B
    "granite-4.0-micro.json": (3_402_836_480, 3.4e9),
    # DeepSeek-V2-Lite (deepseek-ai/DeepSeek-V2-Lite: "15.7B" total): MLA without a q projection's low rank
    # (q_lora_rank null), a dense first layer, 64 routed + 2 shared experts of 1,408, a router without a bias
    "deepseek-v2-lite.json": (15_706_484_224, 15.7e9),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMERS_COUNTS))
def test_a_2026_config_counts_what_transformers_builds(name):
    """Each was refused by name before ('olmo2' is not supported; ...); now its count is transformers' to the
    parameter, and within 1% of the publisher's figure."""
    record = model_from_config_file(DATA / name)
    exact, published = TRANSFORMERS_COUNTS[name]
    assert record["params"] == exact
    assert abs(record["params"] / published - 1) < 0.01


def test_deepseek_v2_reads_as_deepseek_v3s_layout_with_its_own_query_and_router():
    """deepseek_v2 was refused by name ('deepseek_v2' is not supported). DeepseekV2Attention (transformers 5.24) builds
    one q_proj where q_lora_rank is null (V2-Lite), q_a_proj / q_b_proj where it is given (V2, V2.5: 1,536, the class's
    default for a config without the key); DeepseekV2TopkRouter holds no e_score_correction_bias, which DeepSeek-V3's
    router does (26 MoE layers x 64 routed experts of difference). Its prefill keeps the MLA latent, as V3's does."""
    cfg = json.loads((DATA / "deepseek-v2-lite.json").read_text())
    lite = model_from_config(cfg)
    assert lite["q_lora_rank"] == 0 and lite["kv_lora_rank"] == 512 and lite["first_dense_layers"] == 1
    assert lite["shared_intermediate_size"] == 2 * 1408 and not lite["router_bias"]
    as_v3 = model_from_config({**cfg, "model_type": "deepseek_v3"})
    assert as_v3["params"] - lite["params"] == 26 * 64  # V3's correction bias, the one difference of layout
    no_key = {k: v for k, v in cfg.items() if k != "q_lora_rank"}
    assert model_from_config(no_key)["q_lora_rank"] == 1536
    code, out, err = run_cli("estimate", "--model-config", str(DATA / "deepseek-v2-lite.json"), "--task", "infer",
                             "--seq", "8192", "--json")
    assert code == 0, err
    row = json.loads(out)
    row = row[0] if isinstance(row, list) else row
    assert row["kv_policy"] == "latent"
    # 27 layers x (512 + 64) latent values x 2 bytes x 8,192 tokens
    assert row["kv_cache_bytes"] == 27 * 576 * 2 * 8192


def test_olmo_and_minimax_q_k_norms_span_every_head():
    """Olmo2Attention / Olmo3Attention / MiniMaxM2Attention: q_norm = RMSNorm(num_attention_heads * head_dim), k_norm =
    RMSNorm(num_key_value_heads * head_dim); counted per head (2 x head_dim a layer, Qwen3's) the 32B would be
    64 x (40 x 128 + 8 x 128 - 256) = 376,832 short."""
    record = model_from_config_file(DATA / "olmo-2-0325-32b.json")
    assert record["qk_norm"] and record["qk_norm_full"]
    per_head = model_from_config({**json.loads((DATA / "olmo-2-0325-32b.json").read_text()), "model_type": "qwen3",
                                  "head_dim": 128})  # the same shapes, per-head norms, Qwen3's layout
    assert record["params"] - per_head["params"] == 64 * (40 * 128 + 8 * 128 - 2 * 128)


def _serve(*args) -> dict:
    code, out, err = run_cli("serve", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_olmo_3_slides_on_three_layers_of_four_and_olmo_2_on_none():
    """Olmo3Config's layer_types: sliding_attention over 4,096 tokens except every 4th layer (vLLM's olmo2.py gives
    those layers a sliding window): 24 of 32 for the 7B. Its KV cache per token before any window is OLMo's
    2 x 32 layers x 32 KV heads x 128 x 2 bytes = 524,288, and the window-aware plan keeps less than the full
    cache of every layer; OLMo 2 slides on none."""
    olmo3 = model_from_config_file(DATA / "olmo-3-1025-7b.json")
    assert (olmo3["sliding_window"], olmo3["sliding_window_layers"]) == (4096, 24)
    assert "Sliding-window attention over 4,096 tokens on 24 of 32 layers" in olmo3["notes"]
    cfg = json.loads((DATA / "olmo-3-1025-7b.json").read_text())
    cfg.pop("layer_types")  # the class's own pattern: (i + 1) % 4 == 0 is full attention
    assert model_from_config(cfg)["sliding_window_layers"] == 24
    assert model_from_config_file(DATA / "olmo-2-1124-7b.json")["sliding_window_layers"] == 0
    row = _serve("--model-config", str(DATA / "olmo-3-1025-7b.json"), "--gpu", "h100-sxm-80gb", "--engine", "vllm",
                 "--max-model-len", "32768")
    assert row["kv_bytes_per_token"] == 2 * 32 * 32 * 128 * 2
    assert row["params"] == 7_298_011_136 and row["fits"]


def test_minimax_m2_serves_fp8_with_its_experts_and_full_attention_kv():
    """MiniMax-M2: every one of its 62 layers is full attention (attn_type_list all 1) with 8 KV heads of 128, so
    vLLM at tensor parallel 4 keeps 2 KV heads a GPU: 62 x 2 x 2 x 128 x 2 bytes = 63,488 a token on each; its
    checkpoint is FP8 blocks (quantization_config fp8), which serve plans without --precision; 8 of 256 experts
    active: 11.03B a token with the embedding and lm_head (MiniMax: "10 billion active")."""
    record = model_from_config_file(DATA / "minimax-m2.json")
    assert (record["num_experts"], record["experts_per_token"], record["expert_intermediate_size"]) == (256, 8, 1536)
    assert record["active_params"] == 11_030_553_088
    row = _serve("--model-config", str(DATA / "minimax-m2.json"), "--gpu", "h100-sxm-80gb", "--gpus", "4",
                 "--engine", "vllm", "--max-model-len", "131072")
    assert row["precision"] == "fp8" and row["kv_bytes_per_token"] == 63_488
    lightning = {**json.loads((DATA / "minimax-m2.json").read_text()), "attn_type_list": [0, 1] * 31}
    with pytest.raises(CatalogError, match="attn_type_list.*lightning-attention"):
        model_from_config(lightning)


def test_seed_oss_counts_its_q_k_v_biases_and_an_o_bias_when_asked():
    """SeedOssAttention: q/k/v_proj bias=attention_bias, o_proj bias=attention_out_bias; Seed-OSS-36B has the first
    only (80 x 128 + 2 x 8 x 128 = 12,288 a layer). An o_proj bias adds hidden_size a layer; mlp_bias is refused."""
    cfg = json.loads((DATA / "seed-oss-36b-instruct.json").read_text())
    plain = model_from_config({**cfg, "attention_bias": False})
    record = model_from_config(cfg)
    assert record["qkv_bias"] and record["params"] - plain["params"] == 64 * 12_288
    both = model_from_config({**cfg, "attention_out_bias": True})
    assert both["attention_bias"] and both["params"] - record["params"] == 64 * 5120
    with pytest.raises(CatalogError, match="mlp_bias"):
        model_from_config({**cfg, "mlp_bias": True})


def test_ernie_4_5_moe_keeps_its_dense_first_layers_and_shared_experts():
    """Ernie4_5_MoeDecoderLayer: layers before moe_layer_start_index are dense (intermediate_size), the rest MoE with
    moe_num_shared_experts x moe_intermediate_size of shared experts and a router correction bias; 6 of 64 experts
    active for the 21B (3.35B a token, "A3B"), 8 of 64 for the 300B (47.9B, "A47B")."""
    small = model_from_config_file(DATA / "ernie-4.5-21b-a3b-pt.json")
    assert (small["first_dense_layers"], small["shared_intermediate_size"], small["tied_embeddings"]) == (1, 3072, True)
    assert small["active_params"] == 3_352_150_208
    large = model_from_config_file(DATA / "ernie-4.5-300b-a47b-pt.json")
    assert (large["first_dense_layers"], large["shared_intermediate_size"]) == (3, 0)
    assert abs(large["active_params"] / 47e9 - 1) < 0.02
    cfg = json.loads((DATA / "ernie-4.5-21b-a3b-pt.json").read_text())
    with pytest.raises(CatalogError, match="moe_layer_interval.*is 2; accepted"):
        model_from_config({**cfg, "moe_layer_interval": 2})
    with pytest.raises(CatalogError, match="use_bias"):
        model_from_config({**cfg, "use_bias": True})


def test_granite_4_reads_its_attention_only_and_its_mamba_models():
    """GraniteMoeHybridConfig covers Granite 4.0 Micro (every layer "attention", num_local_experts 0: the Llama layout
    with shared_mlp's shared_intermediate_size) and Granite 4.0-H (Mamba2 layers between attention ones, experts on
    H-Tiny / H-Small). Both are read (the H models were refused naming Mamba2; tests/test_mamba2_models.py counts them);
    a layer kind it does not know is refused by name."""
    cfg = json.loads((DATA / "granite-4.0-micro.json").read_text())
    record = model_from_config(cfg)
    assert (record["intermediate_size"], record["tied_embeddings"], record["family"]) == (8192, True, "custom-granitemoehybrid")
    assert record.get("mamba_layers", 0) == 0
    hybrid = {**cfg, "layer_types": (["mamba"] * 5 + ["attention"]) * 6 + ["mamba"] * 4}  # Granite 4.0-H Micro's pattern
    assert model_from_config(hybrid)["mamba_layers"] == 34
    moe = model_from_config({**cfg, "num_local_experts": 64, "num_experts_per_tok": 6, "intermediate_size": 512})
    assert (moe["num_experts"], moe["experts_per_token"], moe["expert_intermediate_size"]) == (64, 6, 512)
    with pytest.raises(CatalogError, match="layer_types.*has 'sliding'; accepted: attention, mamba"):
        model_from_config({**cfg, "layer_types": ["sliding"] * 40})


@pytest.mark.parametrize("model_type, what", [("zamba2", "Mamba"), ("jamba", "Mamba"), ("phi4flash", "SambaY"),
                                              ("gemma3n", "per-layer embeddings"), ("lfm2", "short-convolution"),
                                              ("gemma4", "global_head_dim"), ("gemma4_text", "MoE block")])
def test_a_hybrid_the_engine_does_not_count_is_refused_naming_what_it_lacks(tmp_path, model_type, what):
    """Zamba2 (Mamba2 with shared attention blocks), Jamba (Mamba1), Phi-4-mini-flash, Gemma 3n, LFM2, Gemma 4:
    one line, exit status 2, naming what the engine does not count (it said only "is not supported")."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": model_type, "hidden_size": 1536, "num_attention_heads": 12,
                                "num_hidden_layers": 40, "intermediate_size": 512, "vocab_size": 100352,
                                "max_position_embeddings": 131072}))
    code, out, err = run_cli("estimate", "--model-config", str(path), "--gpu", "h100-sxm-80gb", "--task", "infer")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and what in err and "does not count yet" in err and "Traceback" not in err


# ---- the same architectures as GGUF files (llama.cpp's arch names and tensor names: gguf-py constants.py MODEL_TENSORS,
# convert_hf_to_gguf.py Olmo2Model / SeedOssModel / MiniMaxM2Model / Ernie4_5MoeModel), small ----------------------

SMALL = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=128, max_position_embeddings=4096)


def _gguf(path, arch: str, c: dict, tensors, extra=None, head_dim=None):
    """A GGUF of `arch` with c's shapes, F16 matrices and F32 vectors; `extra`: more metadata (ints, or a list of bools)."""
    meta = {"block_count": c["num_hidden_layers"], "embedding_length": c["hidden_size"],
            "feed_forward_length": c["intermediate_size"], "attention.head_count": c["num_attention_heads"],
            "attention.head_count_kv": c["num_key_value_heads"], "context_length": c["max_position_embeddings"],
            "vocab_size": c["vocab_size"], **({"attention.key_length": head_dim} if head_dim else {}), **(extra or {})}
    return write_f16_gguf(path, arch, {**{f"{arch}.{k}": v for k, v in meta.items()}, "general.file_type": 1}, tensors)


def _attention(p: str, c: dict, d: int, q_norm=None, k_norm=None, biases=False) -> list:
    h, a, kv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    rows = [(p + "attn_q.weight", (a * d, h)), (p + "attn_k.weight", (kv * d, h)), (p + "attn_v.weight", (kv * d, h)),
            (p + "attn_output.weight", (h, a * d))]
    rows += [(p + "attn_q_norm.weight", (q_norm,)), (p + "attn_k_norm.weight", (k_norm,))] if q_norm else []
    rows += [(p + "attn_q.bias", (a * d,)), (p + "attn_k.bias", (kv * d,)), (p + "attn_v.bias", (kv * d,))] if biases else []
    return rows


def _dense_ffn(p: str, h: int, f: int) -> list:
    return [(p + "ffn_gate.weight", (f, h)), (p + "ffn_up.weight", (f, h)), (p + "ffn_down.weight", (h, f))]


def _ends(c: dict) -> tuple[list, list]:
    h, v = c["hidden_size"], c["vocab_size"]
    return [("token_embd.weight", (v, h))], [("output_norm.weight", (h,)), ("output.weight", (v, h))]


@pytest.mark.parametrize("pattern", ["bools", "period", None])
def test_an_olmo_gguf_is_read_as_olmo_2_or_3_with_its_sliding_layers(tmp_path, pattern):
    """llama.cpp writes OLMo 2 and Olmo 3 as general.architecture olmo2 (src/models/olmo2.cpp: attn_q_norm over
    n_embd, attn_k_norm over n_head_kv x head, post-attention and post-feedforward norms); Olmo 3's file has
    attention.sliding_window and a sliding_window_pattern, per layer (convert_hf_to_gguf.py) or a period (llama.cpp
    reads either, default 4). It was refused ("general.architecture 'olmo2' is not read")."""
    c, h, d = SMALL, SMALL["hidden_size"], SMALL["hidden_size"] // SMALL["num_attention_heads"]
    head, tail = _ends(c)
    tensors = list(head)
    for i in range(c["num_hidden_layers"]):
        p = f"blk.{i}."
        tensors += _attention(p, c, d, q_norm=4 * d, k_norm=2 * d) + _dense_ffn(p, h, c["intermediate_size"])
        tensors += [(p + "post_attention_norm.weight", (h,)), (p + "post_ffw_norm.weight", (h,))]
    types = ["full_attention" if (i + 1) % 4 == 0 else "sliding_attention" for i in range(8)]
    extra = {"bools": {"attention.sliding_window": 1024, "attention.sliding_window_pattern": [t == "sliding_attention"
                                                                                              for t in types]},
             "period": {"attention.sliding_window": 1024, "attention.sliding_window_pattern": 4}, None: {}}[pattern]
    record, info = model_from_files([_gguf(tmp_path / "olmo.gguf", "olmo2", c, tensors + tail, extra)])
    same = model_from_config({"model_type": "olmo3" if pattern else "olmo2", **c,
                              **({"sliding_window": 1024, "layer_types": types} if pattern else {})})
    assert record["params"] == same["params"] == info["params_stored"]
    assert record["family"] == ("custom-olmo3" if pattern else "custom-olmo2") and record["qk_norm_full"]
    assert (record["sliding_window"], record["sliding_window_layers"]) == ((1024, 6) if pattern else (0, 0))


def test_seed_oss_minimax_m2_and_ernie_ggufs_count_as_their_configs(tmp_path):
    """Seed-OSS (q/k/v biases as tensors), MiniMax-M2 (stacked experts of expert_feed_forward_length, exp_probs_b,
    q/k norms over all heads: src/models/minimax-m2.cpp) and ERNIE-4.5 MoE (leading_dense_block_count dense blocks,
    shared experts: src/models/ernie4-5-moe.cpp) GGUFs were refused by architecture; each now counts as its config."""
    c, h, f = SMALL, SMALL["hidden_size"], SMALL["intermediate_size"]
    head, tail = _ends(c)
    # Seed-OSS: head_dim 32 (not hidden / heads), q/k/v biases
    tensors = list(head)
    for i in range(8):
        p = f"blk.{i}."
        tensors += _attention(p, c, 32, biases=True) + _dense_ffn(p, h, f)
        tensors += [(p + "attn_norm.weight", (h,)), (p + "post_attention_norm.weight", (h,))]
    record, info = model_from_files([_gguf(tmp_path / "seed.gguf", "seed_oss", c, tensors + tail, head_dim=32)])
    same = model_from_config({"model_type": "seed_oss", **c, "head_dim": 32})
    assert record["params"] == same["params"] == info["params_stored"] and record["qkv_bias"]
    # MiniMax-M2: 8 experts of 24, 2 a token, every layer MoE
    e, fe = 8, 24
    tensors = list(head)
    for i in range(8):
        p = f"blk.{i}."
        tensors += _attention(p, c, 32, q_norm=4 * 32, k_norm=2 * 32)
        tensors += [(p + "attn_norm.weight", (h,)), (p + "ffn_norm.weight", (h,)), (p + "ffn_gate_inp.weight", (e, h)),
                    (p + "exp_probs_b.bias", (e,)), (p + "ffn_gate_exps.weight", (e, fe, h)),
                    (p + "ffn_up_exps.weight", (e, fe, h)), (p + "ffn_down_exps.weight", (e, h, fe))]
    path = _gguf(tmp_path / "minimax.gguf", "minimax-m2", {**c, "intermediate_size": fe}, tensors + tail,
                 {"expert_count": e, "expert_used_count": 2, "expert_feed_forward_length": fe}, head_dim=32)
    record, info = model_from_files([path])
    same = model_from_config({"model_type": "minimax_m2", **c, "intermediate_size": fe, "head_dim": 32,
                              "num_local_experts": e, "num_experts_per_tok": 2})
    assert record["params"] == same["params"] == info["params_stored"]
    # ERNIE-4.5 MoE: 2 dense blocks first, then 8 experts of 24 and 2 shared ones, tied embeddings
    tensors = list(head)
    for i in range(8):
        p = f"blk.{i}."
        tensors += _attention(p, c, 16) + [(p + "attn_norm.weight", (h,)), (p + "ffn_norm.weight", (h,))]
        tensors += _dense_ffn(p, h, f) if i < 2 else [
            (p + "ffn_gate_inp.weight", (e, h)), (p + "exp_probs_b.bias", (e,)), (p + "ffn_gate_exps.weight", (e, fe, h)),
            (p + "ffn_up_exps.weight", (e, fe, h)), (p + "ffn_down_exps.weight", (e, h, fe)),
            (p + "ffn_gate_shexp.weight", (2 * fe, h)), (p + "ffn_up_shexp.weight", (2 * fe, h)),
            (p + "ffn_down_shexp.weight", (h, 2 * fe))]
    path = _gguf(tmp_path / "ernie.gguf", "ernie4_5-moe", c, tensors + tail[:1],
                 {"expert_count": e, "expert_used_count": 2, "expert_feed_forward_length": fe,
                  "leading_dense_block_count": 2, "interleave_moe_layer_step": 1, "expert_shared_count": 2})
    record, info = model_from_files([path])
    same = model_from_config({"model_type": "ernie4_5_moe", **c, "moe_num_experts": e, "moe_k": 2,
                              "moe_intermediate_size": fe, "moe_layer_start_index": 2, "moe_num_shared_experts": 2})
    assert record["params"] == same["params"] == info["params_stored"] and record["first_dense_layers"] == 2
    # ERNIE-4.5 dense (0.3B's layout: head_dim 128 beside hidden / heads 16), and its biases refused by name
    tensors = list(head)
    for i in range(8):
        p = f"blk.{i}."
        tensors += _attention(p, c, 128) + _dense_ffn(p, h, f) + [(p + "attn_norm.weight", (h,)), (p + "ffn_norm.weight", (h,))]
    record, info = model_from_files([_gguf(tmp_path / "ernie-dense.gguf", "ernie4_5", c, tensors + tail[:1], head_dim=128)])
    same = model_from_config({"model_type": "ernie4_5", **c, "head_dim": 128})
    assert record["params"] == same["params"] == info["params_stored"] and record["head_dim"] == 128
    biased = tensors + [("blk.0.attn_q.bias", (4 * 128,))]
    with pytest.raises(CatalogError, match="use_bias"):
        model_from_files([_gguf(tmp_path / "ernie-bias.gguf", "ernie4_5", c, biased + tail[:1], head_dim=128)])


def test_a_granite_4_micro_gguf_counts_as_its_config(tmp_path):
    """convert_hf_to_gguf.py GraniteHybridModel writes a GraniteMoeHybrid checkpoint with attention on every layer and
    no experts (Granite 4.0 Micro, 1B, 350M) as llama.cpp's granite arch, its shared_mlp as ffn_gate / ffn_up /
    ffn_down, tied embeddings: read as the config.json of the same shapes (it was refused: 'granite' is not read)."""
    c, h, d = SMALL, SMALL["hidden_size"], SMALL["hidden_size"] // SMALL["num_attention_heads"]
    head, tail = _ends(c)
    tensors = list(head)
    for i in range(c["num_hidden_layers"]):
        p = f"blk.{i}."
        tensors += _attention(p, c, d) + _dense_ffn(p, h, c["intermediate_size"])
        tensors += [(p + "attn_norm.weight", (h,)), (p + "ffn_norm.weight", (h,))]
    record, info = model_from_files([_gguf(tmp_path / "granite.gguf", "granite", c, tensors + tail[:1])])
    same = model_from_config({"model_type": "granitemoehybrid", **c, "shared_intermediate_size": c["intermediate_size"],
                              "num_local_experts": 0, "layer_types": ["attention"] * 8, "tie_word_embeddings": True})
    assert record["params"] == same["params"] == info["params_stored"] and record["tied_embeddings"]
    assert record["family"] == "custom-granite"


@pytest.mark.parametrize("arch, what", [("falcon-h1", "Mamba"), ("qwen3next", "Gated DeltaNet")])
def test_a_hybrid_gguf_is_refused_naming_what_the_engine_lacks(tmp_path, arch, what):
    """Falcon-H1 and Qwen3-Next GGUFs: one line saying what is not counted (it said only "general.architecture
    'granitehybrid' is not read"; Granite 4.0-H's, Nemotron-H's and Nemotron 3 Nano's are read:
    tests/test_mamba2_models.py)."""
    head, tail = _ends(SMALL)
    path = _gguf(tmp_path / "hybrid.gguf", arch, SMALL, head + tail)
    code, out, err = run_cli("estimate", "--model-file", str(path), "--gpu", "h100-sxm-80gb", "--task", "infer")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert what in err and "does not count yet" in err and "Traceback" not in err
