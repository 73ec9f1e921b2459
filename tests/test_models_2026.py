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

from catalog.schema import CatalogError
from catalog.user import model_from_config, model_from_config_file
from tests.clirun import run_cli

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
}


@pytest.mark.parametrize("name", sorted(TRANSFORMERS_COUNTS))
def test_a_2026_config_counts_what_transformers_builds(name):
    """Each was refused by name before ('olmo2' is not supported; ...); now its count is transformers' to the
    parameter, and within 1% of the publisher's figure."""
    record = model_from_config_file(DATA / name)
    exact, published = TRANSFORMERS_COUNTS[name]
    assert record["params"] == exact
    assert abs(record["params"] / published - 1) < 0.01


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


@pytest.mark.parametrize("model_type, what", [("granitemoehybrid", "Mamba"), ("nemotron_h", "Mamba"),
                                              ("falcon_h1", "Mamba"), ("phi4flash", "SambaY"),
                                              ("gemma3n", "per-layer embeddings"), ("lfm2", "short-convolution")])
def test_a_hybrid_the_engine_does_not_count_is_refused_naming_what_it_lacks(tmp_path, model_type, what):
    """IBM Granite 4.0-H, NVIDIA Nemotron-H / Nano 2, Falcon-H1 (Mamba2 layers), Phi-4-mini-flash, Gemma 3n, LFM2:
    one line, exit status 2, naming what the engine does not count (it said only "is not supported")."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": model_type, "hidden_size": 1536, "num_attention_heads": 12,
                                "num_hidden_layers": 40, "intermediate_size": 512, "vocab_size": 100352,
                                "max_position_embeddings": 131072}))
    code, out, err = run_cli("estimate", "--model-config", str(path), "--gpu", "h100-sxm-80gb", "--task", "infer")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and what in err and "does not count yet" in err and "Traceback" not in err
