"""LoRA on multi-head latent attention (DeepSeek-V2/V3, Kimi K2): peft finds q_a_proj / q_b_proj (or q_proj),
kv_a_proj_with_mqa, kv_b_proj and o_proj, never k_proj or v_proj (engine/components.py mla_lora_dims,
planner/exports.py _peft_targets). The trainable counts below are get_peft_model's on each config built on the meta
device in the measuring venv (transformers 5.24.0, peft 0.21.2, 2026-12-06), not the engine's."""

import json

import pandas as pd

from catalog.user import model_from_config_file
from engine import estimate
from planner.exports import _peft_targets
from tests.clirun import run_cli

# DeepSeek-V2-Lite's shape as a deepseek_v3 config (the type Moonlight-16B-A3B uses for the same layout): MLA without a
# compressed query (q_lora_rank null); the count below is get_peft_model's on DeepseekV3Config with these fields
V2_LITE = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 2048,
           "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16,
           "num_key_value_heads": 16, "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
           "first_k_dense_replace": 1, "moe_layer_freq": 1, "q_lora_rank": None, "kv_lora_rank": 512,
           "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 102400,
           "max_position_embeddings": 163840, "tie_word_embeddings": False}


def _lora(models, model, targets):
    row = dict(model=model, task="train", method="lora", precision="bf16", batch=1, seq=1024, lora_rank=16,
               lora_targets=targets)
    return int(estimate(pd.DataFrame([row]), models)["trainable_params"].iloc[0])


def test_deepseek_v3_counts_the_adapters_peft_makes(models):
    # all-linear: the five MLA projections, the experts (ParamWrapper) and the router; q and v by their MLA modules
    assert _lora(models, "deepseek-v3", "all") == 7_645_254_656
    assert _lora(models, "deepseek-v3", "q_proj,v_proj") == 66_461_696  # q_a_proj, q_b_proj, kv_b_proj
    assert _lora(models, "deepseek-v3", "o_proj") == 22_986_752


def test_without_a_compressed_query_q_proj_is_one_module(models, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(V2_LITE))
    lite = model_from_config_file(path)
    lite["id"] = "deepseek-v2-lite"
    frame = pd.concat([models, pd.DataFrame([lite])], ignore_index=True)
    assert _lora(frame, "deepseek-v2-lite", "q_proj,k_proj") == 3_345_408  # q_proj and kv_a_proj_with_mqa
    assert _peft_targets(pd.Series({"lora_targets": "q_proj,k_proj,o_proj"}), pd.Series(lite)) == [
        "q_proj", "kv_a_proj_with_mqa", "o_proj"]


def test_the_configs_name_the_mla_modules():
    code, out, err = run_cli("estimate", "--model", "deepseek-v3", "--method", "lora", "--lora-targets", "q_proj,v_proj",
                             "--gpu", "b300", "--gpus", "8", "--zero", "3", "--export", "trl")
    assert code == 0, err
    assert "- q_a_proj\n- q_b_proj\n- kv_b_proj\n" in out and "- v_proj" not in out
    code, out, err = run_cli("estimate", "--model", "llama-3-8b", "--method", "lora", "--lora-targets", "q_proj,v_proj",
                             "--gpu", "h100-sxm-80gb", "--export", "trl")
    assert code == 0, err
    assert "- q_proj\n- v_proj\n" in out


K2 = {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
      "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 64,
      "num_key_value_heads": 64, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
      "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 384, "n_shared_experts": 1,
      "num_experts_per_tok": 8, "first_k_dense_replace": 1, "vocab_size": 163840, "max_position_embeddings": 131072,
      "tie_word_embeddings": False}


def test_kimi_k2s_own_code_has_an_nn_linear_per_expert(models, tmp_path):
    """Kimi K2 runs DeepSeek-V3's remote modeling_deepseek.py (engine/constants.py PER_EXPERT_LINEAR_MOE): its 384
    experts are nn.Linear modules, so all-linear adapts each (the engine counted a dense MLP of the active width on
    every layer: 135,984,128 at r 16), and bitsandbytes quantizes them (QLoRA weights were counted with 16-bit
    experts). The count here is worked out from the config: per layer q_a + q_b, kv_a, kv_b, o; the dense first
    layer's MLP; each MoE layer's shared expert and 384 routed experts (gate, up, down: in + out each)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(K2))
    k2 = model_from_config_file(path)
    k2["id"] = "kimi-k2"
    frame = pd.concat([models, pd.DataFrame([k2])], ignore_index=True)
    h, a = 7168, 64
    attn = (h + 1536) + (1536 + a * 192) + (h + 512 + 64) + (512 + a * 256) + (a * 128 + h)

    def mlp(w):
        return 3 * (h + w)
    per_r = 61 * attn + 1 * mlp(18432) + 60 * (mlp(2048) + 384 * mlp(2048))
    assert _lora(frame, "kimi-k2", "all") == 16 * per_r == 10_280_956_928
    row = dict(model="kimi-k2", task="train", method="qlora", precision="bf16", batch=1, seq=1024, lora_rank=16,
               lora_targets="q_proj,v_proj")
    weights = float(estimate(pd.DataFrame([row]), frame)["weights_bytes"].iloc[0])
    routed = 60 * 384 * 3 * h * 2048
    assert routed * 4 / 8 < weights < routed * 2 / 2  # the routed experts at 4 bits (NF4), not 16


def test_kimi_k2_is_launched_with_its_own_code(tmp_path):
    """transformers registers no kimi_k2 config, and Kimi K2's tokenizer is its own code: vLLM and SGLang start it
    with --trust-remote-code (its deploy guidance), and the training configs set trust_remote_code
    (engine/constants.py REMOTE_CODE_MODEL_TYPES); DeepSeek-V3, which transformers and vLLM know, needs neither."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(K2))
    for engine in ("vllm", "sglang"):
        code, out, err = run_cli("serve", "--model-config", str(path), "--gpu", "h200-sxm-141gb", "--gpus", "16",
                                 "--engine", engine, "--max-model-len", "32768", "--json")
        assert code == 0, err
        assert json.loads(out)["command"].endswith(" --trust-remote-code")
        code, out, err = run_cli("serve", "--model-config", str(path), "--gpu", "h200-sxm-141gb", "--gpus", "16",
                                 "--engine", engine, "--max-model-len", "32768", "--export", engine)
        assert code == 0, err
        assert "--trust-remote-code" in out
    for target in ("trl", "axolotl", "llama-factory"):
        code, out, err = run_cli("estimate", "--model-config", str(path), "--method", "lora", "--lora-targets", "all",
                                 "--gpu", "b300", "--gpus", "64", "--zero", "3", "--export", target)
        assert code == 0, err
        assert "trust_remote_code: true" in out, target
    code, out, err = run_cli("serve", "--model", "deepseek-v3", "--gpu", "h200-sxm-141gb", "--gpus", "8",
                             "--engine", "vllm", "--max-model-len", "32768", "--json")
    assert code == 0, err
    assert "trust-remote-code" not in json.loads(out)["command"]
