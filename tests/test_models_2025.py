"""Models a user brings in 2025-2026 that the shipped catalog does not hold (DeepSeek-V3.1, Kimi K2, ...), read
from their config.json, safetensors headers or GGUF files: what the architecture gives, what the files store, and
how the engines hold them. Each fixture is built here, in tmp_path, with the real checkpoints' tensor names; the
published figures are in each test's docstring."""

from __future__ import annotations

import json
import math

import gguf
import numpy as np
import pandas as pd
import pytest

from catalog import default_catalog
from catalog.checkpoints import model_from_files
from catalog.user import model_from_config, model_from_config_file
from engine import serving as S
from tests.clirun import run_cli
from tests.test_checkpoints import F, H, HEADS, L, llama_tensors, write_gguf, write_safetensors
from tests.test_checkpoints import _write_mixed_safetensors as write_mixed_safetensors


@pytest.fixture(scope="module")
def cat():
    c = default_catalog()
    return c.models(), c.gpus()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_an_mla_latent_is_held_whole_by_every_tensor_parallel_rank(cat, engine):
    """DeepSeek-V3's KV cache is MLA's latent, (kv_lora_rank 512 + qk_rope_head_dim 64) x 61 layers x 2 bytes = 70,272
    bytes a token (DeepSeek-V3 report, 2.1.1), and vLLM and SGLang keep one 576-wide "head" of it on every
    tensor-parallel rank (vLLM ModelConfig.get_num_kv_heads returns 1 for MLA): at TP 8 each GPU holds the whole
    latent of every request, so the requests that fit are the pool of one GPU over 70,272 bytes a token, not eight
    times that (it was split by the 128 query heads, as if it were grouped-query K/V)."""
    models, gpus = cat
    req = dict(model="deepseek-v3", gpu="h200-sxm-141gb", gpus=8, engine=engine, precision="fp8", max_model_len=32768)
    out = S.serve(pd.DataFrame([req]), models, gpus).iloc[0]
    assert out["kv_policy"] == "latent"
    assert out["kv_bytes_per_token"] == 61 * (512 + 64) * 2
    assert out["max_concurrency"] == pytest.approx(out["kv_cache_bytes_available"] / (70_272 * 32768), rel=0.01)
    assert out["max_concurrency"] < 25  # 43.8 GiB a GPU / 2.3 GB a request (it said 163.5 under vLLM)


# ---- a DeepSeek-V3-layout checkpoint (DeepseekV3ForCausalLM's tensor names), small -------------------------------

DS = dict(hidden_size=64, intermediate_size=160, moe_intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
          num_key_value_heads=4, q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
          n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, vocab_size=96,
          max_position_embeddings=512, tie_word_embeddings=False)


def _deepseek_mlp(p: str, i: int, c: dict) -> list[tuple[str, list[int]]]:
    """DeepSeek-V3's feed-forward of layer i (GLM-4.5 takes the same): dense for the first first_k_dense_replace layers,
    else routed and shared experts and a router with its e_score_correction_bias."""
    h, rows = c["hidden_size"], []
    mlps = [("mlp.", c["intermediate_size"])] if i < c["first_k_dense_replace"] else \
        [(f"mlp.experts.{e}.", c["moe_intermediate_size"]) for e in range(c["n_routed_experts"])] + \
        [("mlp.shared_experts.", c["moe_intermediate_size"] * c["n_shared_experts"])]
    for q, f in mlps:
        rows += [(p + q + "gate_proj.weight", [f, h]), (p + q + "up_proj.weight", [f, h]), (p + q + "down_proj.weight", [h, f])]
    if i >= c["first_k_dense_replace"]:
        rows += [(p + "mlp.gate.weight", [c["n_routed_experts"], h]), (p + "mlp.gate.e_score_correction_bias", [c["n_routed_experts"]])]
    return rows


def _with_mtp(out: list, layer, c: dict, mtp_layers: int) -> list[tuple[str, list[int]]]:
    """The layers, the final norm and head, then the multi-token-prediction layers numbered from num_hidden_layers
    (each its own embed_tokens, enorm, hnorm, eh_proj and shared_head beside a whole layer)."""
    h, v = c["hidden_size"], c["vocab_size"]
    for i in range(c["num_hidden_layers"]):
        out += layer(i)
    out += [("model.norm.weight", [h]), ("lm_head.weight", [v, h])]
    for i in range(c["num_hidden_layers"], c["num_hidden_layers"] + mtp_layers):
        p = f"model.layers.{i}."
        out += [(p + "embed_tokens.weight", [v, h]), (p + "enorm.weight", [h]), (p + "hnorm.weight", [h]),
                (p + "eh_proj.weight", [h, 2 * h]), (p + "shared_head.norm.weight", [h]), (p + "shared_head.head.weight", [v, h])]
        out += layer(i)
    return out


def deepseek_tensors(c: dict, mtp_layers: int = 0) -> list[tuple[str, list[int]]]:
    """(name, shape) as deepseek-ai/DeepSeek-V3's safetensors name them (BF16 here): MLA's q_a / q_b / kv_a_with_mqa / kv_b
    projections and their norms, dense feed-forwards first, then a router with its e_score_correction_bias, routed and
    shared experts; a multi-token-prediction layer is one more layer numbered num_hidden_layers with its own
    embed_tokens, enorm, hnorm, eh_proj and shared_head."""
    h, v, heads = c["hidden_size"], c["vocab_size"], c["num_attention_heads"]
    nope, rope, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    out = [("model.embed_tokens.weight", [v, h])]

    def layer(i):
        p = f"model.layers.{i}."
        rows = [(p + "input_layernorm.weight", [h]), (p + "post_attention_layernorm.weight", [h]),
                (p + "self_attn.q_a_proj.weight", [c["q_lora_rank"], h]),
                (p + "self_attn.q_a_layernorm.weight", [c["q_lora_rank"]]),
                (p + "self_attn.q_b_proj.weight", [heads * (nope + rope), c["q_lora_rank"]]),
                (p + "self_attn.kv_a_proj_with_mqa.weight", [c["kv_lora_rank"] + rope, h]),
                (p + "self_attn.kv_a_layernorm.weight", [c["kv_lora_rank"]]),
                (p + "self_attn.kv_b_proj.weight", [heads * (nope + vd), c["kv_lora_rank"]]),
                (p + "self_attn.o_proj.weight", [h, heads * vd])]
        return rows + _deepseek_mlp(p, i, c)

    return _with_mtp(out, layer, c, mtp_layers)


def write_f16_gguf(path, arch: str, meta: dict, tensors):
    """A GGUF of `arch` with these metadata keys (whole numbers, or lists as arrays): 1-D tensors F32, the others F16
    (torch's (rows, columns))."""
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in meta.items():
        if isinstance(value, list):
            w.add_array(key, value)
        else:
            w.add_uint32(key, value)
    for name, shape in tensors:
        w.add_tensor(name, np.zeros(shape, np.float32 if len(shape) == 1 else np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_checkpoint(folder, cfg: dict, tensors) -> None:
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    write_safetensors(folder / "model.safetensors", tensors)


def test_deepseeks_multi_token_prediction_layer_is_named_not_counted(tmp_path):
    """DeepSeek-V3 / V3.1 / R1 store their multi-token-prediction module as model.layers.61 (num_hidden_layers 61,
    num_nextn_predict_layers 1): 671B in the model, 14B in that layer, 685B on the Hub page (the DeepSeek-V3 README).
    transformers drops it on load and vLLM loads it only for speculative decoding, so the stored parameters and bytes
    are the 61 layers', as the config counts them; the layer was counted (the stored bytes, which an inference row
    takes for its weights, 15.4 GB too many on the real checkpoint, and the parameters disagreeing with the config)."""
    cfg = {"model_type": "deepseek_v3", "num_nextn_predict_layers": 1, **DS}
    write_checkpoint(tmp_path / "ds", cfg, deepseek_tensors(DS, mtp_layers=1))
    record, info = model_from_files(tmp_path / "ds")
    model_only = sum(math.prod(s) for _n, s in deepseek_tensors(DS))
    assert record["params"] == info["params_stored"] == model_only and info["weights_source"] == "header"
    assert info["weights_bytes_stored"] == 2 * model_only
    mtp = sum(math.prod(s) for _n, s in deepseek_tensors(DS, mtp_layers=1)) - model_only
    assert any(f"multi-token-prediction layer (layers from 3 on): {mtp:,} parameters" in n for n in info["notes"])


def test_kimi_k2_is_read_as_the_deepseek_v3_layout(tmp_path):
    """moonshotai/Kimi-K2-Instruct's config.json names model_type kimi_k2 with architectures DeepseekV3ForCausalLM
    (61 layers, 384 experts of 2,048, one shared, the first layer dense, MLA of rank 512, 64 heads, 163,840 tokens):
    1T parameters in total, 32B active per token (its model card). It was refused ("'kimi_k2' is not supported");
    it is DeepSeek-V3's layout and counts as a deepseek_v3 config of the same fields does, its family keeps its type."""
    k2 = {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
          "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 64,
          "num_key_value_heads": 64, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
          "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 384, "n_shared_experts": 1,
          "num_experts_per_tok": 8, "first_k_dense_replace": 1, "vocab_size": 163840, "max_position_embeddings": 131072,
          "tie_word_embeddings": False, "num_nextn_predict_layers": 0,
          "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(k2))
    record = model_from_config_file(path)
    same = model_from_config({**k2, "model_type": "deepseek_v3"})
    assert record["family"] == "custom-kimi_k2" and record["params"] == same["params"] == 1_026_408_232_448
    assert abs(record["params"] / 1e12 - 1.03) < 0.01 and record["kv_lora_rank"] == 512
    assert record["stored_precision"] == "fp8"
    # served as DeepSeek-V3 is: its latent whole on each of 8 GPUs (61 x 576 x 2 bytes a token)
    code, out, err = run_cli("serve", "--model-config", str(path), "--gpu", "h200-sxm-141gb", "--gpus", "16",
                             "--engine", "vllm", "--max-model-len", "32768", "--json")
    assert code == 0, err
    assert json.loads(out)["kv_bytes_per_token"] == 61 * 576 * 2


def test_a_qwen3_vl_gguf_with_its_mmproj_is_read_as_qwen3(tmp_path):
    """Qwen/Qwen3-VL-8B-Instruct-GGUF: general.architecture qwen3vl, Qwen3's tensors (q/k norms, a dense SwiGLU) and two
    keys that add no weights (rope.dimension_sections, n_deepstack_layers: its deepstack mergers are in the mmproj), beside
    mmproj-Qwen3VL-8B-Instruct-F16.gguf. It was refused ("general.architecture 'qwen3vl' is not read"); its language model
    counts as the Qwen3 file of the same tensors does, the mmproj as vision_params."""
    tensors = [(n, s) for n, s in llama_tensors()]
    for i in range(L):
        tensors += [(f"blk.{i}.attn_q_norm.weight", (H // HEADS,)), (f"blk.{i}.attn_k_norm.weight", (H // HEADS,))]
    extra = {"qwen3vl.n_deepstack_layers": 3, "qwen3vl.attention.key_length": H // HEADS}
    vl = write_gguf(tmp_path / "Qwen3VL-Q8_0.gguf", arch="qwen3vl", extra=extra, tensors=tensors)
    text = write_gguf(tmp_path / "Qwen3-Q8_0.gguf", arch="qwen3", extra={"qwen3.attention.key_length": H // HEADS},
                      tensors=tensors)
    mmproj = write_gguf(tmp_path / "mmproj-F16.gguf", arch="clip", tensors=[("v.blk.0.ffn_up.weight", (F, H)), ("mm.0.weight", (H, H))])
    record, info = model_from_files([vl, mmproj])
    same, _ = model_from_files([text])
    assert record["params"] == same["params"] == info["params_stored"] and info["weights_source"] == "header"
    assert record["qk_norm"] and record["family"] == "custom-qwen3"
    assert record["vision_params"] == F * H + H * H


def glm_tensors(c: dict, mtp_layers: int = 0) -> list[tuple[str, list[int]]]:
    """(name, shape) as zai-org/GLM-4.5-Air's safetensors name them: grouped-query attention with q/k/v biases (and
    q_norm / k_norm where use_qk_norm), DeepSeek-V3's experts (dense first layers, a router with its
    e_score_correction_bias, routed and shared experts), the multi-token-prediction layer numbered num_hidden_layers."""
    h, v, heads, kvh, d = c["hidden_size"], c["vocab_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    out = [("model.embed_tokens.weight", [v, h])]

    def layer(i):
        p = f"model.layers.{i}."
        rows = [(p + "input_layernorm.weight", [h]), (p + "post_attention_layernorm.weight", [h]),
                (p + "self_attn.q_proj.weight", [heads * d, h]), (p + "self_attn.q_proj.bias", [heads * d]),
                (p + "self_attn.k_proj.weight", [kvh * d, h]), (p + "self_attn.k_proj.bias", [kvh * d]),
                (p + "self_attn.v_proj.weight", [kvh * d, h]), (p + "self_attn.v_proj.bias", [kvh * d]),
                (p + "self_attn.o_proj.weight", [h, heads * d])]
        if c.get("use_qk_norm"):
            rows += [(p + "self_attn.q_norm.weight", [d]), (p + "self_attn.k_norm.weight", [d])]
        return rows + _deepseek_mlp(p, i, c)

    return _with_mtp(out, layer, c, mtp_layers)


@pytest.mark.parametrize("qk_norm", [False, True])
def test_a_glm_4_5_checkpoint_is_read_with_its_biases_experts_and_mtp_layer(tmp_path, qk_norm):
    """GLM-4.5-Air (zai-org/GLM-4.5-Air, model_type glm4_moe: 46 layers, 128 experts of 1,408 and one shared, the first
    layer dense, q/k/v biases, 106B in total and 12B active by its model card) was refused ("'glm4_moe' is not
    supported"). Its config counts as its tensors do (the MTP layer named, not counted); the full-size configs give
    106,852,251,264 (Air) and 352,797,829,024 (GLM-4.5, use_qk_norm, 160 experts: 355B by its card), each plus its MTP
    layer the Hub's totals of 110.5B and 358.3B."""
    c = dict(model_type="glm4_moe", hidden_size=64, intermediate_size=160, moe_intermediate_size=32, num_hidden_layers=3,
             num_attention_heads=8, num_key_value_heads=2, head_dim=16, n_routed_experts=4, n_shared_experts=1,
             num_experts_per_tok=2, first_k_dense_replace=1, vocab_size=96, max_position_embeddings=512,
             attention_bias=True, use_qk_norm=qk_norm, partial_rotary_factor=0.5, num_nextn_predict_layers=1,
             tie_word_embeddings=False)
    write_checkpoint(tmp_path / "glm", c, glm_tensors(c, mtp_layers=1))
    record, info = model_from_files(tmp_path / "glm")
    assert record["params"] == info["params_stored"] == sum(math.prod(s) for _n, s in glm_tensors(c))
    assert info["weights_source"] == "header" and record["qkv_bias"] and bool(record["qk_norm"]) == qk_norm
    assert record["family"] == "custom-glm4_moe" and record["first_dense_layers"] == 1
    assert any(n.startswith("multi-token-prediction layer (layers from 3 on)") for n in info["notes"])
    air = dict(c, hidden_size=4096, intermediate_size=10944, moe_intermediate_size=1408, num_hidden_layers=46,
               num_attention_heads=96, num_key_value_heads=8, head_dim=128, n_routed_experts=128, num_experts_per_tok=8,
               vocab_size=151552, max_position_embeddings=131072, use_qk_norm=False)
    assert model_from_config(air)["params"] == 106_852_251_264
    full = dict(air, hidden_size=5120, intermediate_size=12288, moe_intermediate_size=1536, num_hidden_layers=92,
                n_routed_experts=160, first_k_dense_replace=3, use_qk_norm=True)
    assert model_from_config(full)["params"] == 352_797_829_024


def test_the_serve_command_names_the_files_the_model_was_read_from(tmp_path):
    """`serve --model-file Qwen3VL-8B-Instruct-Q4_K_M.gguf --model-file mmproj-....gguf` printed
    `llama-server -m qwen3-vl-8b-instruct-Q4_K_M.gguf --mmproj mmproj-qwen3-vl-8b-instruct-f16.gguf`: the names a
    catalog model's download would have, not the user's files, so the line did not run. It names the files now (and a
    --draft-model GGUF for -md, a safetensors folder for vLLM / SGLang); another --precision is another file and keeps
    the placeholder."""
    folder = tmp_path / "my models"
    folder.mkdir()
    model = write_gguf(folder / "Tiny-Q8_0.gguf")
    mmproj = write_gguf(folder / "mmproj-Tiny-F16.gguf", arch="clip", tensors=[("v.blk.0.ffn_up.weight", (F, H))])
    draft = write_gguf(folder / "Draft-Q8_0.gguf")

    def command(*args):
        code, out, err = run_cli("serve", *args, "--gpu", "h100-sxm-80gb", "--max-model-len", "256", "--json")
        assert code == 0, err
        return json.loads(out)["command"]

    line = command("--model-file", model, "--model-file", mmproj, "--engine", "llama.cpp", "--draft-model", draft)
    assert f"-m '{model}' --mmproj '{mmproj}' " in line and f" -md '{draft}' " in line
    assert f"FROM {model}' > Modelfile" in command("--model-file", model, "--engine", "ollama")
    assert "-m tiny-llama-Q4_K_M.gguf " in command("--model-file", model, "--engine", "llama.cpp", "--precision", "q4_k_m")
    write_checkpoint(folder / "ds", {"model_type": "deepseek_v3", **DS}, deepseek_tensors(DS))
    for engine, flag in (("vllm", "vllm serve"), ("sglang", "--model-path")):
        assert f"{flag} '{folder / 'ds'}' " in command("--model-file", folder / "ds", "--engine", engine)


def _gguf_ffn(p: str, i: int, c: dict, h: int, f: int, e: int, mf: int) -> list[tuple[str, tuple]]:
    """llama.cpp's names for DeepSeek-V3's (and GLM-4.5's) feed-forward of block i: dense first, then the router with its
    exp_probs_b, the routed experts stacked (ffn_*_exps) and the shared one (ffn_*_shexp)."""
    if i < c["first_k_dense_replace"]:
        return [(p + "ffn_gate.weight", (f, h)), (p + "ffn_up.weight", (f, h)), (p + "ffn_down.weight", (h, f))]
    return [(p + "ffn_gate_inp.weight", (e, h)), (p + "exp_probs_b.bias", (e,)),
            (p + "ffn_gate_exps.weight", (e * mf, h)), (p + "ffn_up_exps.weight", (e * mf, h)),
            (p + "ffn_down_exps.weight", (e * h, mf)), (p + "ffn_gate_shexp.weight", (mf, h)),
            (p + "ffn_up_shexp.weight", (mf, h)), (p + "ffn_down_shexp.weight", (h, mf))]


@pytest.mark.parametrize("mla_layout", [True, False])
def test_a_deepseek2_gguf_is_read_as_deepseek_v3(tmp_path, mla_layout):
    """DeepSeek-V3 / V3.1 / R1 and Kimi K2 GGUFs (general.architecture deepseek2, unsloth's and bartowski's) were refused
    ("general.architecture 'deepseek2' is not read"). Their metadata maps onto DeepseekV3Config's fields: q/kv_lora_rank,
    rope.dimension_count (qk_rope_head_dim), expert_count / expert_shared_count / leading_dense_block_count /
    expert_feed_forward_length; the heads' widths from key/value_length_mla where llama.cpp's MLA conversion (2025-04)
    wrote the latent's 576 / 512 into key/value_length and head_count_kv 1, and kv_b_proj split into attn_k_b and
    attn_v_b. Either layout counts as the safetensors checkpoint's config does, the KV cache is the latent."""
    c, a = DS, "deepseek2"
    heads, nope, rope, vd, kl = (c[k] for k in ("num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim",
                                                "v_head_dim", "kv_lora_rank"))
    h, ql = c["hidden_size"], c["q_lora_rank"]
    meta = {f"{a}.attention.q_lora_rank": ql, f"{a}.attention.kv_lora_rank": kl, f"{a}.rope.dimension_count": rope,
            f"{a}.expert_count": c["n_routed_experts"], f"{a}.expert_shared_count": c["n_shared_experts"],
            f"{a}.expert_used_count": c["num_experts_per_tok"], f"{a}.leading_dense_block_count": c["first_k_dense_replace"],
            f"{a}.expert_feed_forward_length": c["moe_intermediate_size"]}
    if mla_layout:
        meta |= {f"{a}.attention.key_length": kl + rope, f"{a}.attention.value_length": kl,
                 f"{a}.attention.key_length_mla": nope + rope, f"{a}.attention.value_length_mla": vd}
    else:
        meta |= {f"{a}.attention.key_length": nope + rope, f"{a}.attention.value_length": vd}
    e, mf, f = c["n_routed_experts"], c["moe_intermediate_size"], c["intermediate_size"]
    tensors = [("token_embd.weight", (c["vocab_size"], h))]
    for i in range(c["num_hidden_layers"]):
        p = f"blk.{i}."
        tensors += [(p + "attn_norm.weight", (h,)), (p + "attn_q_a_norm.weight", (ql,)), (p + "attn_kv_a_norm.weight", (kl,)),
                    (p + "ffn_norm.weight", (h,)), (p + "attn_q_a.weight", (ql, h)), (p + "attn_q_b.weight", (heads * (nope + rope), ql)),
                    (p + "attn_kv_a_mqa.weight", (kl + rope, h)), (p + "attn_output.weight", (h, heads * vd))]
        tensors += [(p + "attn_k_b.weight", (heads * kl, nope)), (p + "attn_v_b.weight", (heads * vd, kl))] if mla_layout \
            else [(p + "attn_kv_b.weight", (heads * (nope + vd), kl))]
        tensors += _gguf_ffn(p, i, c, h, f, e, mf)
    tensors += [("output_norm.weight", (h,)), ("output.weight", (c["vocab_size"], h))]
    meta |= {f"{a}.block_count": c["num_hidden_layers"], f"{a}.embedding_length": h, f"{a}.feed_forward_length": f,
             f"{a}.attention.head_count": heads, f"{a}.attention.head_count_kv": 1 if mla_layout else heads,
             f"{a}.context_length": c["max_position_embeddings"], f"{a}.vocab_size": c["vocab_size"], "general.file_type": 1}
    path = write_f16_gguf(tmp_path / "DeepSeek-F16.gguf", a, meta, tensors)
    record, info = model_from_files([path])
    same = model_from_config({"model_type": "deepseek_v3", **DS})
    assert record["params"] == same["params"] == info["params_stored"] and info["weights_source"] == "header"
    assert (record["kv_lora_rank"], record["qk_nope_head_dim"], record["v_head_dim"], record["num_kv_heads"]) == (kl, nope, vd, heads)
    code, out, err = run_cli("estimate", "--model-file", path, "--gpu", "h100-sxm-80gb", "--task", "infer", "--seq", "256",
                             "--precision", "q8_0", "--json")  # (a GGUF type: llama.cpp's cache, the latent in f16)
    assert code == 0, err
    assert json.loads(out)["kv_cache_bytes"] == 256 * c["num_hidden_layers"] * (kl + rope) * 2


def test_an_fp8_block_checkpoint_counts_its_e4m3_weights_and_not_their_scales(tmp_path):
    """DeepSeek-V3.1's and Kimi K2's FP8 checkpoints store each linear weight in e4m3 beside an F32 `weight_scale_inv` of
    one value per 128 x 128 block (quantization_config fp8, weight_block_size [128, 128]). The e4m3 elements are the
    parameters; the scales are not (DeepSeek-V3.1: 40,838,232 of them, 163 MB). They were counted, so the stored count
    disagreed with the config's and the note called the tensors 'packed' ('element counts are not parameters'); now the
    parameters agree (weights_source header), the scales' bytes are in the stored bytes and in scale_bytes."""
    quant = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    folder = tmp_path / "fp8"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "deepseek_v3", **DS, "quantization_config": quant}))
    rows, scales = [], 0
    for name, shape in deepseek_tensors(DS):
        if len(shape) == 2 and "embed" not in name and "lm_head" not in name and ".mlp.gate." not in name:
            scale = [-(-shape[0] // 128), -(-shape[1] // 128)]
            rows += [(name, shape, "F8_E4M3", 1), (name + "_scale_inv", scale, "F32", 4)]
            scales += 4 * math.prod(scale)
        else:
            rows.append((name, shape, "BF16", 2))
    stored = write_mixed_safetensors(folder / "model.safetensors", rows)
    record, info = model_from_files(folder)
    assert info["params_stored"] == record["params"] == sum(math.prod(s) for _n, s in deepseek_tensors(DS))
    assert info["weights_source"] == "header" and info["precision"] == "fp8"
    assert info["weights_bytes_stored"] == stored and info["scale_bytes"] == scales > 0
    assert not any("packed" in n for n in info["notes"])


def test_a_glm_4_5_gguf_counts_its_layers_without_the_nextn_layer(tmp_path):
    """llama.cpp's GLM-4.5 / 4.5-Air GGUFs (general.architecture glm4moe) were refused. Their block_count counts the
    multi-token-prediction layer too (convert_hf_to_gguf.py Glm4MoeModel: num_hidden_layers + nextn_predict_layers, its
    blk.N.nextn.* tensors beside a whole layer's), which llama.cpp loads with TENSOR_SKIP: the model is the layers before
    it, q/k/v biases and q/k norms as the file's tensors say, and counts as its config.json does."""
    c = dict(model_type="glm4_moe", hidden_size=64, intermediate_size=160, moe_intermediate_size=32, num_hidden_layers=3,
             num_attention_heads=8, num_key_value_heads=2, head_dim=16, n_routed_experts=4, n_shared_experts=1,
             num_experts_per_tok=2, first_k_dense_replace=1, vocab_size=96, max_position_embeddings=512,
             attention_bias=True, use_qk_norm=True, tie_word_embeddings=False)
    h, d, v, e, mf, f = 64, 16, 96, 4, 32, 160
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "post_attention_norm", "q_proj": "attn_q",
             "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output", "q_norm": "attn_q_norm", "k_norm": "attn_k_norm"}
    tensors = [("token_embd.weight", (v, h))]
    for i in range(c["num_hidden_layers"] + 1):  # the last one is the nextn layer
        p = f"blk.{i}."
        for hf_name, shape in glm_tensors(c):
            prefix = f"model.layers.{i}.self_attn."
            if hf_name.startswith(prefix) or hf_name.startswith(f"model.layers.{i}.input") or \
                    hf_name.startswith(f"model.layers.{i}.post"):
                stem, kind = hf_name.split(".")[-2], hf_name.split(".")[-1]
                tensors.append((p + names[stem] + "." + kind, tuple(shape)))
        tensors += _gguf_ffn(p, i, c, h, f, e, mf)
    nextn = [(f"blk.3.nextn.{n}", s) for n, s in (("eh_proj.weight", (h, 2 * h)), ("embed_tokens.weight", (v, h)),
                                                  ("enorm.weight", (h,)), ("hnorm.weight", (h,)),
                                                  ("shared_head_head.weight", (v, h)), ("shared_head_norm.weight", (h,)))]
    tensors += nextn + [("output_norm.weight", (h,)), ("output.weight", (v, h))]
    a = "glm4moe"
    meta = {f"{a}.block_count": 4, f"{a}.nextn_predict_layers": 1, f"{a}.embedding_length": h, f"{a}.feed_forward_length": f,
            f"{a}.attention.head_count": 8, f"{a}.attention.head_count_kv": 2, f"{a}.attention.key_length": d,
            f"{a}.rope.dimension_count": d // 2, f"{a}.expert_count": e, f"{a}.expert_used_count": 2,
            f"{a}.expert_shared_count": 1, f"{a}.leading_dense_block_count": 1, f"{a}.expert_feed_forward_length": mf,
            f"{a}.context_length": 512, f"{a}.vocab_size": v, "general.file_type": 1}
    record, info = model_from_files([write_f16_gguf(tmp_path / "GLM-F16.gguf", a, meta, tensors)])
    assert record["params"] == model_from_config(c)["params"] == info["params_stored"] == \
        sum(math.prod(s) for _n, s in glm_tensors(c)) and info["weights_source"] == "header"
    assert record["num_layers"] == 3 and record["qkv_bias"] and record["qk_norm"] and record["family"] == "custom-glm4_moe"
    layer3 = sum(math.prod(s) for n, s in tensors if n.startswith("blk.3."))
    assert any(f"multi-token-prediction layer (blk.3 on): {layer3:,} parameters" in n for n in info["notes"])
    # llama.cpp counts the nextn block in n_layer: -ngl / num_gpu name it on top of the planned 3 layers + output (4),
    # where -ngl 4 put the first layer on the CPU (llama-model.cpp: i_gpu_start = n_layer + 1 - n_gpu_layers)
    assert info["gguf_extra_blocks"] == 1
    path = str(tmp_path / "GLM-F16.gguf")
    for engine, export, flag in (("llama.cpp", "llama-server", " -ngl 5 "), ("ollama", "ollama", "PARAMETER num_gpu 5\n")):
        code, out, err = run_cli("serve", "--model-file", path, "--gpu", "h100-sxm-80gb", "--engine", engine,
                                 "--max-model-len", "256", "--precision", "q8_0")  # (the F16 file re-quantized)
        assert code == 0, err
        assert (" -ngl 5 " if engine == "llama.cpp" else '"num_gpu": 5,') in out and "GPU layers (-ngl): 4 of 4" in out
        assert "; -ngl 5 with the file's 1 block(s) llama.cpp counts but does not run)" in out
        code, out, err = run_cli("serve", "--model-file", path, "--gpu", "h100-sxm-80gb", "--engine", engine,
                                 "--max-model-len", "256", "--precision", "q8_0", "--export", export)
        assert code == 0 and flag in out, (err, out)


@pytest.mark.parametrize("window", [None, 0])
def test_a_llama_4_gguf_is_read_with_its_experts_and_chunked_attention(tmp_path, window):
    """Llama 4 Scout GGUFs (general.architecture llama4: unsloth's, ggml-org's) were refused. Their metadata maps onto
    Llama4TextConfig: expert_count experts of expert_feed_forward_length and a shared one as wide, dense layers of
    feed_forward_length (interleave_moe_layer_step), and llama.cpp's own chunked attention (no key in the file: 8,192
    tokens on 3 of every 4 layers, none where attention.sliding_window is 0). The count is the config's."""
    h, layers, heads, kvh, d, e, fe, fd, v = 64, 4, 4, 2, 16, 4, 32, 96, 128
    c = {"model_type": "llama4_text", "hidden_size": h, "num_hidden_layers": layers, "num_attention_heads": heads,
         "num_key_value_heads": kvh, "head_dim": d, "num_local_experts": e, "num_experts_per_tok": 1,
         "intermediate_size": fe, "intermediate_size_mlp": fd, "interleave_moe_layer_step": 2, "vocab_size": v,
         "max_position_embeddings": 65536, "tie_word_embeddings": False}
    tensors = [("token_embd.weight", (v, h))]
    for i in range(layers):
        p = f"blk.{i}."
        tensors += [(p + "attn_norm.weight", (h,)), (p + "ffn_norm.weight", (h,)), (p + "attn_q.weight", (heads * d, h)),
                    (p + "attn_k.weight", (kvh * d, h)), (p + "attn_v.weight", (kvh * d, h)), (p + "attn_output.weight", (h, heads * d))]
        if i % 2 == 1:  # Llama4TextDecoderLayer: is_moe_layer = (layer_idx + 1) % interleave_moe_layer_step == 0
            tensors += [(p + "ffn_gate_inp.weight", (e, h)), (p + "ffn_gate_exps.weight", (e * fe, h)),
                        (p + "ffn_up_exps.weight", (e * fe, h)), (p + "ffn_down_exps.weight", (e * h, fe)),
                        (p + "ffn_gate_shexp.weight", (fe, h)), (p + "ffn_up_shexp.weight", (fe, h)), (p + "ffn_down_shexp.weight", (h, fe))]
        else:
            tensors += [(p + "ffn_gate.weight", (fd, h)), (p + "ffn_up.weight", (fd, h)), (p + "ffn_down.weight", (h, fd))]
    tensors += [("output_norm.weight", (h,)), ("output.weight", (v, h))]
    a = "llama4"
    meta = {f"{a}.block_count": layers, f"{a}.embedding_length": h, f"{a}.feed_forward_length": fd,
            f"{a}.attention.head_count": heads, f"{a}.attention.head_count_kv": kvh, f"{a}.attention.key_length": d,
            f"{a}.expert_count": e, f"{a}.expert_used_count": 1, f"{a}.expert_feed_forward_length": fe,
            f"{a}.interleave_moe_layer_step": 2, f"{a}.context_length": 65536, f"{a}.vocab_size": v, "general.file_type": 1}
    if window is not None:
        meta[f"{a}.attention.sliding_window"] = window
    record, info = model_from_files([write_f16_gguf(tmp_path / "Llama4-F16.gguf", a, meta, tensors)])
    assert record["params"] == info["params_stored"] == sum(math.prod(s) for _n, s in tensors)
    assert record["params"] == model_from_config(c)["params"] and info["weights_source"] == "header"
    assert (record["num_experts"], record["moe_layer_step"], record["family"]) == (e, 2, "custom-llama4_text")
    chunked = (record["sliding_window"], record["sliding_window_layers"])
    assert chunked == ((8192, layers - layers // 4) if window is None else (0, 0))


def test_a_deepseek2_gguf_without_the_routers_bias_is_read_as_deepseek_v2(tmp_path):
    """DeepSeek-V2 / V2-Lite / Coder-V2 GGUFs are llama.cpp's deepseek2 too, but their routers have no correction bias
    (no exp_probs_b tensor) and V2-Lite's query has no low rank (no attention.q_lora_rank key, one attn_q weight).
    They are read as deepseek_v2 (catalog/user.py): the count is that of the same fields' config.json, with one q_proj
    and no bias, not DeepSeek-V3's layout."""
    c, a = {**DS, "q_lora_rank": None}, "deepseek2"
    heads, nope, rope, vd, kl = (c[k] for k in ("num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim",
                                                "v_head_dim", "kv_lora_rank"))
    h, e, mf, f = c["hidden_size"], c["n_routed_experts"], c["moe_intermediate_size"], c["intermediate_size"]
    meta = {f"{a}.attention.kv_lora_rank": kl, f"{a}.rope.dimension_count": rope, f"{a}.expert_count": e,
            f"{a}.expert_shared_count": c["n_shared_experts"], f"{a}.expert_used_count": c["num_experts_per_tok"],
            f"{a}.leading_dense_block_count": c["first_k_dense_replace"], f"{a}.expert_feed_forward_length": mf,
            f"{a}.attention.key_length": nope + rope, f"{a}.attention.value_length": vd,
            f"{a}.block_count": c["num_hidden_layers"], f"{a}.embedding_length": h, f"{a}.feed_forward_length": f,
            f"{a}.attention.head_count": heads, f"{a}.attention.head_count_kv": heads,
            f"{a}.context_length": c["max_position_embeddings"], f"{a}.vocab_size": c["vocab_size"], "general.file_type": 1}
    tensors = [("token_embd.weight", (c["vocab_size"], h))]
    for i in range(c["num_hidden_layers"]):
        p = f"blk.{i}."
        tensors += [(p + "attn_norm.weight", (h,)), (p + "attn_kv_a_norm.weight", (kl,)), (p + "ffn_norm.weight", (h,)),
                    (p + "attn_q.weight", (heads * (nope + rope), h)), (p + "attn_kv_a_mqa.weight", (kl + rope, h)),
                    (p + "attn_kv_b.weight", (heads * (nope + vd), kl)), (p + "attn_output.weight", (h, heads * vd))]
        tensors += [t for t in _gguf_ffn(p, i, c, h, f, e, mf) if ".exp_probs_b" not in t[0]]
    tensors += [("output_norm.weight", (h,)), ("output.weight", (c["vocab_size"], h))]
    path = write_f16_gguf(tmp_path / "DeepSeek-V2-Lite-F16.gguf", a, meta, tensors)
    record, info = model_from_files([path])
    same = model_from_config({"model_type": "deepseek_v2", **c})
    assert record["params"] == same["params"] == info["params_stored"] and info["weights_source"] == "header"
    assert record["q_lora_rank"] == 0 and not record["router_bias"]
    as_v3 = model_from_config({"model_type": "deepseek_v3", **c})
    assert as_v3["params"] - record["params"] == (c["num_hidden_layers"] - c["first_k_dense_replace"]) * e
