"""Models described by a Hugging Face config.json, turned into catalog records and validated
exactly like the shipped models.yaml.

Accepted architectures (`model_type`), all decoders of the Llama layout the engine models
(RMSNorm, rotary positions, a gated MLP of three matrices, grouped-query attention):

- llama, mistral: no biases. Llama's optional `attention_bias` / `mlp_bias` (true adds
  biases the engine does not count) are refused by name.
- phi3 (Phi-3, Phi-3.5, Phi-4, Phi-4-mini): the Llama layout with q/k/v fused in one qkv_proj and
  gate/up in one gate_up_proj (the same weights, transformers' Phi3Attention / Phi3MLP), no biases;
  `partial_rotary_factor` rotates part of each head and adds no weights; a `sliding_window` below
  the context slides on every layer (Phi3Model's mask).
- smollm3: the Llama layout (SmolLM3Config; `no_rope_layers` skip rotary embeddings, no weights),
  tied embeddings by default.
- qwen2: the Llama layout plus biases on the q, k and v projections (transformers'
  Qwen2Attention: q_proj/k_proj/v_proj bias=True, o_proj bias=False), recorded as
  `qkv_bias: true` and counted by engine/params.py.
- gemma: the Llama layout with a GeGLU MLP (same three matrices, gelu instead of silu) and
  RMSNorm weights stored as an offset (same size), so the count is the Llama formula; its
  config defaults (transformers' GemmaConfig) are `head_dim` 256 and tied embeddings.

Fields a config leaves out take the transformers config class's default where it has one
(`num_key_value_heads` = `num_attention_heads`; `head_dim` = hidden_size / heads, 256 for
Gemma; `tie_word_embeddings` false, true for Gemma).

Issue 15, beyond the dense layout (fields in catalog/schema.py MODEL_FIELDS, counted by
engine/params.py architecture_counts):

- mixtral, qwen2_moe, qwen3_moe, deepseek_v3, gpt_oss, llama4_text: mixture of experts (experts,
  experts per token, expert width, shared experts, dense layers first or interleaved).
- qwen3 / qwen3_moe / gemma3_text: q and k norms; gemma2 / gemma3_text: four norms per layer.
- deepseek_v3: latent attention (MLA: kv_lora_rank, q_lora_rank, qk_rope/nope_head_dim, v_head_dim); kimi_k2 (Kimi K2)
  is read as its layout (SAME_LAYOUT). deepseek_v2 (DeepSeek-V2, V2-Lite, V2.5, Coder-V2): the same attention (q_lora_rank
  null: one q_proj) and experts, with a router without a correction bias (transformers 5.24 DeepseekV2TopkRouter).
- gpt_oss: q/k/v/o biases, attention sinks, expert and router biases.
- glm4_moe (GLM-4.5, GLM-4.5-Air, GLM-4.6): grouped-query attention with q/k/v biases where attention_bias (o_proj has
  none), q/k norms where use_qk_norm, a partial rotary (no weights); DeepSeek-V3's experts: shared experts, dense first
  layers, a router with its correction bias. Its multi-token-prediction layer (model.layers.{num_hidden_layers}) is not
  counted (catalog/checkpoints.py MTP).
- gemma3, llama4 and mistral3 (multimodal): their text_config is read (Gemma 3's sparse one completed with
  Gemma3TextConfig's defaults); the vision tower and projector of gemma3 (SigLIP), mistral3 (Pixtral), llama4
  and qwen2_5_vl are counted from vision_config as vision_params (vision_params_from_config); qwen2_vl's only
  from a checkpoint's or the Hub's headers.
- qwen2_vl, qwen2_5_vl: the language model is Qwen2's layout, read from the top level or text_config.
- Sliding-window (or chunked) layers: `layer_types` when listed, else the class's pattern
  (Gemma 2 and gpt-oss alternate, Gemma 3 has one full layer in sliding_window_pattern, Llama 4
  three chunked of four, Mistral/Mixtral every layer); the KV cache follows --kv-policy.

- qwen3_next (Qwen3-Next), qwen3_5 and qwen3_5_moe (Qwen3.5 / 3.6, multimodal: their text_config is read): hybrid
  linear attention, Gated DeltaNet layers (`layer_types` "linear_attention", else every layer but each
  `full_attention_interval`-th, default 4) beside full-attention layers with q/k norms and a gated output; Qwen3-Next's
  and Qwen3.5-MoE's layers are mixture of experts with a gated shared expert (Qwen3.5-MoE's config has no dense width:
  intermediate_size is recorded as the expert's); Qwen3.5 is dense. Their vision tower and merger are counted from
  vision_config (vision_params_from_config).

- olmo2, olmo3 (OLMo 2, Olmo 3): the Llama layout (post-attention and post-feedforward norms, two a layer) with q and k
  norms over the whole projection (Olmo2Attention: RMSNorm(heads x head_dim), RMSNorm(kv_heads x head_dim): `qk_norm_full`);
  Olmo 3 slides over `sliding_window` on its layer_types' sliding layers (the class's: 3 of every 4).
- seed_oss (Seed-OSS-36B): the Llama layout with q/k/v biases where attention_bias (default true) and an o_proj bias where
  attention_out_bias (then all four, `attention_bias`).
- minimax_m2 (MiniMax-M2): every layer MoE (num_local_experts of intermediate_size, no shared expert, a sigmoid router
  with its correction bias), full attention with q/k norms over the whole projection; a lightning-attention layer
  (attn_type_list 0, MiniMax-Text-01's) is refused.
- granite (Granite 3.x; a Granite 4.0 Micro GGUF, which llama.cpp converts to its granite arch): the Llama layout
  (GraniteAttention / GraniteMLP: biases only where attention_bias / mlp_bias, refused; its multipliers add no weights).
- granitemoehybrid with attention on every layer and no experts (Granite 4.0 Micro, 1B, 350M): the Llama layout, its
  shared_mlp of shared_intermediate_size as the MLP; Granite 4.0-H: Mamba2 layers where layer_types says "mamba", and on
  H-Tiny / H-Small experts of intermediate_size beside the shared_mlp (its shared expert) (_mamba2_layout).
- nemotron_h (NVIDIA Nemotron-H, Nemotron Nano 2, Nemotron 3 Nano): one block kind a layer from hybrid_override_pattern
  (M Mamba2, * attention, - an up/down relu2 MLP, E n_routed_experts ungated relu2 experts of moe_intermediate_size, a
  sigmoid router and one shared expert of moe_shared_expert_intermediate_size; moe_latent_size, Nemotron 3 Super's
  latent experts, refused), one norm each, their order kept (block_pattern: which blocks freeze tuning's last k are);
  bamba (IBM Bamba): Mamba2 on every layer but attn_layer_indices. Their Mamba2 mixers' weights are counted
  (engine/params.py mamba_params) and their state per sequence sized for inference and serving; training them is
  estimated, but LoRA on every projection of Nemotron-H and Falcon-H1 (peft refuses all-linear there), on Nemotron-H's
  expert blocks, and training a Falcon-H1 with mamba_rms_norm (engine/params.py hybrid_training_unmodelled).
- falcon_h1 (Falcon-H1): attention and a Mamba2 mixer side by side on every layer (mamba_parallel), a gated MLP, two
  norms; the mixer's intermediate mamba_d_ssm, its norm only where mamba_rms_norm; the mup multipliers add no weights.
- ernie4_5, ernie4_5_moe (ERNIE-4.5): the Llama layout, tied by default; the MoE's first moe_layer_start_index layers
  dense, then moe_num_experts experts (moe_k a token) with moe_num_shared_experts shared ones and a correction bias.

Hybrids whose other layers the engine does not count (Mamba / Mamba2: Jamba, Zamba; SambaY,
LFM2, lightning attention, Gemma 3n) are refused saying what is missing (NOT_MODELLED). MoE keys in a config of a dense
type, and every other architecture, are refused with the field named.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from catalog.schema import (
    MODEL_FIELDS,
    CatalogError,
    check_model,
    not_text,
    read_regular_file,
    show,
    validate_entries,
)
from catalog.quant import quant_precision
from engine.params import BLOCK_KINDS, architecture_counts

# A real config.json is a few KB; reading stops at 1 MB, so a wrong path (a log, a checkpoint,
# /dev/zero) is refused at once instead of filling memory.
MAX_CONFIG_BYTES = 1_000_000
ACCEPTED_CONFIG = "a path to a config.json"
SUPPORTED = ("llama", "mistral", "qwen2", "gemma", "mixtral", "qwen2_moe", "qwen3", "qwen3_moe", "gemma2",
             "gemma3_text", "gemma3", "deepseek_v3", "deepseek_v2", "gpt_oss", "llama4_text", "llama4", "phi3", "smollm3", "mistral3",
             "qwen2_vl", "qwen2_5_vl", "qwen3_next", "qwen3_5", "qwen3_5_moe", "kimi_k2", "glm4_moe", "olmo2", "olmo3",
             "seed_oss", "minimax_m2", "ernie4_5", "ernie4_5_moe", "granitemoehybrid", "granite", "nemotron_h", "bamba",
             "falcon_h1")
# Types users bring that are known and not sized: the line says what the engine lacks (transformers 5.24's modeling
# files of each), so nothing is guessed from the fields it can read
NOT_MODELLED = {
    **dict.fromkeys(("jamba", "zamba", "zamba2", "falcon_mamba", "mamba", "mamba2"),
                    "has Mamba / Mamba2 layers (their weights, and a convolution and SSM state per sequence), which the "
                    "engine does not count yet"),
    "phi4flash": "(Phi-4-mini-flash, SambaY) has Mamba layers, gated memory units and differential attention, which the "
                 "engine does not count yet",
    "lfm2": "has short-convolution layers (a state per sequence), which the engine does not count yet",
    "lfm2_moe": "has short-convolution layers (a state per sequence), which the engine does not count yet",
    "minimax": "(MiniMax-Text-01 / M1) has lightning-attention layers (a state per sequence), which the engine does not "
               "count yet",
    "gemma3n": "(Gemma 3n) has per-layer embeddings, AltUp and LAuReL blocks and layers that share another's KV cache, "
               "which the engine does not count yet",
    "gemma3n_text": "(Gemma 3n) has per-layer embeddings, AltUp and LAuReL blocks and layers that share another's KV cache, "
                    "which the engine does not count yet",
    **dict.fromkeys(("gemma4", "gemma4_text"), "(Gemma 4) has full-attention layers of their own head width and KV heads (global_head_dim), per-layer embeddings (E2B, E4B) and a MoE block beside the MLP (26B-A4B), which the engine does not count yet"),
}
# Types that are another type's layout under their own name: Kimi K2 (moonshotai/Kimi-K2-Instruct, -Thinking) is
# DeepSeek-V3's (its config.json: architectures DeepseekV3ForCausalLM, auto_map configuration_deepseek.DeepseekV3Config;
# its docs/deploy_guidance.md: "Kimi-K2 reuses the DeepSeekV3CausalLM architecture" and sets model_type kimi_k2 only so
# that engines can tell them apart). The family keeps the checkpoint's own type.
SAME_LAYOUT = {"kimi_k2": "deepseek_v3"}
# Multimodal configs whose language model is under text_config: only it is read (the vision
# tower's parameters are not counted; the record's notes say so).
TEXT_CONFIG = ("gemma3", "llama4", "mistral3", "qwen3_5", "qwen3_5_moe")
# the language model's type of each multimodal type (Mistral3Config's text_config is a MistralConfig: Mistral Small
# 3.1 / 3.2). Qwen2-VL and Qwen2.5-VL: Qwen2's layout (q/k/v biases), its fields at the top level (the checkpoints'
# config.json) or under text_config (transformers >= 4.53 writes it so): text_config optional there.
TEXT_TYPE = {"gemma3": "gemma3_text", "llama4": "llama4_text", "mistral3": "mistral", "qwen2_vl": "qwen2",
             "qwen2_5_vl": "qwen2", "qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text"}
# Hybrid linear attention (transformers 5.x configuration_qwen3_next.py, configuration_qwen3_5.py,
# configuration_qwen3_5_moe.py): the text model types and their config classes' defaults that change the count
HYBRID_TYPES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
HYBRID_DEFAULTS = {"linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
                   "linear_num_key_heads": 16, "linear_num_value_heads": 32}
# Fields a config may leave out that its transformers config class defaults (and which change the count). Gemma 3's
# checkpoints write a sparse text_config (google/gemma-3-4b-it: hidden, intermediate, layers, window, rope only):
# Gemma3TextConfig's defaults (transformers models/gemma3/configuration_gemma3.py) fill the rest.
CONFIG_CLASS_DEFAULTS = {
    "gemma3_text": {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 131_072},
}
# Mamba2 hybrids (transformers 5.24 models/granitemoehybrid, nemotron_h, bamba): read by _mamba2_layout
MAMBA2_TYPES = ("granitemoehybrid", "nemotron_h", "bamba", "falcon_h1")
# each type's Mamba2 fields in its own config names and its config class's defaults (configuration_granitemoehybrid.py
# lines 95-103, configuration_nemotron_h.py lines 117-142 with __post_init__'s mamba_* aliases lines 156-166,
# configuration_bamba.py lines 67-75): catalog field -> (config key, default)
MAMBA2_KEYS = {
    "granitemoehybrid": {"mamba_num_heads": ("mamba_n_heads", 128), "mamba_head_dim": ("mamba_d_head", "auto"),
                         "mamba_state_size": ("mamba_d_state", 256), "mamba_groups": ("mamba_n_groups", 1),
                         "mamba_conv_kernel": ("mamba_d_conv", 4), "mamba_conv_bias": ("mamba_conv_bias", True),
                         "mamba_proj_bias": ("mamba_proj_bias", False), "expand": ("mamba_expand", 2),
                         "mamba_chunk_size": ("mamba_chunk_size", 256)},
    "bamba": {"mamba_num_heads": ("mamba_n_heads", 128), "mamba_head_dim": ("mamba_d_head", "auto"),
              "mamba_state_size": ("mamba_d_state", 256), "mamba_groups": ("mamba_n_groups", 1),
              "mamba_conv_kernel": ("mamba_d_conv", 4), "mamba_conv_bias": ("mamba_conv_bias", True),
              "mamba_proj_bias": ("mamba_proj_bias", False), "expand": ("mamba_expand", 2),
              "mamba_chunk_size": ("mamba_chunk_size", 256)},
    # (FalconH1Mixer: intermediate mamba_d_ssm, else mamba_expand x hidden; configuration_falcon_h1.py lines 77-90)
    "falcon_h1": {"mamba_num_heads": ("mamba_n_heads", 128), "mamba_head_dim": ("mamba_d_head", "auto"),
                  "mamba_state_size": ("mamba_d_state", 256), "mamba_groups": ("mamba_n_groups", 1),
                  "mamba_conv_kernel": ("mamba_d_conv", 4), "mamba_conv_bias": ("mamba_conv_bias", True),
                  "mamba_proj_bias": ("mamba_proj_bias", False), "expand": ("mamba_expand", 2),
                  "mamba_chunk_size": ("mamba_chunk_size", 256)},
    # (NemotronHMamba2Mixer: intermediate = mamba_num_heads x mamba_head_dim, in_proj and out_proj bias=config.use_bias)
    "nemotron_h": {"mamba_num_heads": ("mamba_num_heads", 128), "mamba_head_dim": ("mamba_head_dim", 64),
                   "mamba_state_size": ("ssm_state_size", 128), "mamba_groups": ("n_groups", 8),
                   "mamba_conv_kernel": ("conv_kernel", 4), "mamba_conv_bias": ("use_conv_bias", True),
                   "mamba_proj_bias": ("use_bias", False), "mamba_chunk_size": ("chunk_size", 128)},
}
MAMBA2_ALIASES = {"nemotron_h": {"mamba_n_groups": "n_groups", "mamba_d_conv": "conv_kernel",
                                 "mamba_conv_bias": "use_conv_bias", "mamba_d_state": "ssm_state_size",
                                 "mamba_chunk_size": "chunk_size",
                                 # (NemotronHConfig.attribute_map: num_local_experts -> n_routed_experts)
                                 "num_local_experts": "n_routed_experts"}}
# Nemotron-H's block kinds: hybrid_override_pattern's characters and layers_block_type's names (NemotronHConfig
# _pattern_to_list, remap_legacy_layer_types)
BLOCK_LETTERS = {kind: letter for letter, kind in BLOCK_KINDS.items()}  # (the kinds as block_pattern writes them)
NEMOTRON_BLOCKS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe", "linear_attention": "mamba", "mamba": "mamba",
                   "full_attention": "attention", "attention": "attention", "mlp": "mlp", "moe": "moe"}
# Keys that mark a mixture-of-experts model of a type we do not read (Qwen2-MoE's are read).
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size",
            "num_experts_per_tok", "n_shared_experts")
MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "deepseek_v2", "gpt_oss", "llama4_text", "qwen3_next", "qwen3_5_moe_text",
             "glm4_moe", "minimax_m2", "ernie4_5_moe")
# model_type -> defaults of its transformers config class that change the count.
# (SmolLM3Config: tie_word_embeddings=True; Phi3Config: False, as the others)
TIED_DEFAULT = {"gemma": True, "gemma2": True, "gemma3_text": True, "smollm3": True, "ernie4_5": True, "ernie4_5_moe": True}
# GemmaConfig/Gemma2Config/Gemma3TextConfig(head_dim=256), Qwen3Config/Qwen3MoeConfig(head_dim=128),
# GptOssConfig(head_dim=64), Llama4TextConfig(head_dim=128), Glm4MoeConfig(head_dim=128); the others derive it
HEAD_DIM_DEFAULT = {"gemma": 256, "gemma2": 256, "gemma3_text": 256, "qwen3": 128, "qwen3_moe": 128, "glm4_moe": 128,
                    "gpt_oss": 64, "llama4_text": 128, "qwen3_next": 256, "qwen3_5_text": 256, "qwen3_5_moe_text": 256,
                    "seed_oss": 128, "minimax_m2": 128, "ernie4_5": 128,  # (SeedOssConfig, MiniMaxM2Config, Ernie4_5Config)
                    "nemotron_h": 128}  # (NemotronHConfig head_dim: int = 128)
QKV_BIAS = {"qwen2": True, "qwen2_moe": True}
# Bounds, in the config's own field names (the catalog's bounds, catalog/schema.py MODEL_FIELDS).
BOUNDS = {
    "hidden_size": 1_000_000,
    "intermediate_size": 10_000_000,
    "num_hidden_layers": 1_000,
    "num_attention_heads": 10_000,
    "num_key_value_heads": 10_000,
    "head_dim": 10_000,
    "vocab_size": 10_000_000,
    "max_position_embeddings": 100_000_000,
}
MAX_PARAMS = 10**14


def _number(cfg: dict, key: str, file: str, default=None) -> int:
    """A positive whole number within BOUNDS; a missing or null field takes `default` (the
    transformers config class's), or is refused when there is none."""
    return _count(cfg, key, file, default, low=1, high=BOUNDS[key])


def _count(cfg: dict, key: str, file: str, default, low: int = 0, high: int = 10_000_000) -> int:
    """A whole number >= low (0 allowed by default) for the architecture fields; missing or null
    takes `default` (refused when None)."""
    value = cfg.get(key)
    if value is None:
        value = default
    if value is None:
        raise CatalogError(file, None, key, "is required but missing" if key not in cfg else "is required but null")
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CatalogError(file, None, key, f"must be a whole number, got {show(value)}")
    if value < low:
        raise CatalogError(file, None, key, f"must be {'> 0' if low == 1 else f'>= {low:,}'}, got {value}")
    if value > high:
        raise CatalogError(file, None, key, f"must be <= {high:,}, got {value:,}")
    return value


def _flag(cfg: dict, key: str, file: str, default: bool) -> bool:
    value = cfg.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise CatalogError(file, None, key, f"must be true or false, got {show(value)}")
    return value


def _model_id(cfg: dict, file: str, model_id: str | None) -> tuple[str, str]:
    """(id, display name) from _name_or_path, else the file name, else its folder."""
    path = Path(file)
    source = cfg.get("_name_or_path")
    if isinstance(source, str) and not_text(source):  # it becomes the model's display name
        raise CatalogError(file, None, "_name_or_path", f"must be one line of text without control characters; "
                                                        f"got {show(source)}, which has {not_text(source)}")
    if not isinstance(source, str) or not source.strip():
        source = path.stem if path.stem.lower() not in ("config", "") else path.parent.name
    source = str(source or "custom")
    name = model_id or re.sub(r"[^a-z0-9.\-]+", "-", source.lower()).strip("-.")[:64].strip("-.") or "custom"
    if not name[0].isalnum():
        name = ("custom-" + name)[:64]
    return name, source[:120]


def _vision_field(vision: dict, key: str, file: str, default: int) -> int:
    return _count(vision, key, file, default, low=1, high=10_000_000)


def _vit_layer(h: int, f: int) -> int:
    """One ViT encoder layer of SigLIP's and Llama 4's kind: two LayerNorms (weight and bias), biased q/k/v/o, a
    biased fc1 / fc2 MLP (h wide, f inside)."""
    return 2 * 2 * h + 4 * (h * h + h) + (h * f + f) + (f * h + h)


def vision_params_from_config(cfg: dict, text_hidden: int, file: str) -> int | None:
    """The vision tower and projector's parameters of a multimodal config, from its vision_config, where the
    architecture is one of these (each formula reproduces the checkpoint's published total less its language
    model to the parameter: the catalog's gemma-3-4b/12b/27b, mistral-small-3.1-24b and qwen2.5-vl-7b):
    - gemma3: SigLIP (transformers SiglipVisionModel: a biased patch convolution, learned position embeddings for
      (image/patch)^2 patches, layers of two LayerNorms, biased q/k/v/o and a biased fc1/fc2 MLP, a final LayerNorm)
      and Gemma3MultiModalProjector (an RMSNorm over the vision width, a vision x text projection);
    - mistral3: Pixtral (an unbiased patch convolution, ln_pre, layers of two RMSNorms, unbiased q/k/v/o and a
      gated MLP of three) and Mistral3MultiModalProjector (an RMSNorm, the patch merger's (width x merge^2) x
      width layer, linear_1 width x text and linear_2 text x text, biased where multimodal_projector_bias);
    - llama4: Llama4VisionModel, its pixel-shuffle adapter and projector (the catalog's Llama 4 Scout and Maverick);
    - qwen2_5_vl: Qwen2_5_VisionTransformer (an unbiased temporal x patch x patch 3-D convolution, blocks of two
      RMSNorms, a biased qkv and proj, a biased gated MLP of three) and its merger (an RMSNorm, two biased linears
      over width x merge^2). None for another type (counted from a checkpoint's headers instead)."""
    vision, kind = cfg.get("vision_config"), cfg.get("model_type")
    if not isinstance(vision, dict) or kind not in ("gemma3", "mistral3", "qwen2_5_vl", "llama4", "qwen3_5", "qwen3_5_moe"):
        return None
    if kind in ("qwen3_5", "qwen3_5_moe"):  # Qwen3_5VisionConfig defaults: depth 27, 1,152 / 4,304, 16 px, merge 2
        h, f = _vision_field(vision, "hidden_size", file, 1152), _vision_field(vision, "intermediate_size", file, 4304)
        depth, c = _vision_field(vision, "depth", file, 27), _vision_field(vision, "in_channels", file, 3)
        patch, temporal = _vision_field(vision, "patch_size", file, 16), _vision_field(vision, "temporal_patch_size", file, 2)
        merge, out = _vision_field(vision, "spatial_merge_size", file, 2), _vision_field(vision, "out_hidden_size", file, 3584)
        positions = _vision_field(vision, "num_position_embeddings", file, 2304)
        # Qwen3_5VisionModel: a biased temporal x patch x patch 3-D convolution, learned position embeddings, blocks of
        # SigLIP's kind (two LayerNorms, biased fused qkv and proj, a biased fc1 / fc2 MLP), and its merger (a LayerNorm
        # over the width, then two biased linears over width x merge^2): transformers 5.24 modeling_qwen3_5.py
        wide = h * merge * merge
        tower = c * temporal * patch * patch * h + h + positions * h + depth * _vit_layer(h, f)
        return int(tower + 2 * h + (wide * wide + wide) + (wide * out + out))
    if kind == "llama4":  # Llama4VisionConfig defaults: 768 / 3072 / 34 layers / 448 px / 14 px patches
        h, f = _vision_field(vision, "hidden_size", file, 768), _vision_field(vision, "intermediate_size", file, 3072)
        layers, c = _vision_field(vision, "num_hidden_layers", file, 34), _vision_field(vision, "num_channels", file, 3)
        image, patch = _vision_field(vision, "image_size", file, 448), _vision_field(vision, "patch_size", file, 14)
        proj_in = _vision_field(vision, "projector_input_dim", file, 4096)
        proj_out = _vision_field(vision, "projector_output_dim", file, 4096)
        out = _vision_field(vision, "vision_output_dim", file, 7680)
        bias = _flag(vision, "multi_modal_projector_bias", file, False)
        # Llama4VisionModel: the unfold patch linear (no bias), a class embedding, (patches + 1) positions, LayerNorms
        # before and after, layers of two LayerNorms, biased q/k/v/o and a biased fc1/fc2 MLP; the pixel-shuffle
        # adapter's two unbiased linears (intermediate -> projector_input, projector_output -> projector_output);
        # Llama4MultiModalProjector's vision_output x text linear
        tower = c * patch * patch * h + h + ((image // patch) ** 2 + 1) * h + 2 * 2 * h \
            + layers * _vit_layer(h, f) + f * proj_in + proj_out * proj_out
        return int(tower + out * text_hidden + (text_hidden if bias else 0))
    if kind == "gemma3":  # SiglipVisionConfig defaults: 768 / 3072 / 12 layers / 224 px / 16 px patches
        h, f = _vision_field(vision, "hidden_size", file, 768), _vision_field(vision, "intermediate_size", file, 3072)
        layers, c = _vision_field(vision, "num_hidden_layers", file, 12), _vision_field(vision, "num_channels", file, 3)
        image, patch = _vision_field(vision, "image_size", file, 224), _vision_field(vision, "patch_size", file, 16)
        tower = (c * patch * patch * h + h) + (image // patch) ** 2 * h + layers * _vit_layer(h, f) + 2 * h
        return int(tower + h * text_hidden + h)
    if kind == "mistral3":  # PixtralVisionConfig defaults: 1024 / 4096 / 24 layers / 16 px patches
        h, f = _vision_field(vision, "hidden_size", file, 1024), _vision_field(vision, "intermediate_size", file, 4096)
        layers, c = _vision_field(vision, "num_hidden_layers", file, 24), _vision_field(vision, "num_channels", file, 3)
        patch, merge = _vision_field(vision, "patch_size", file, 16), _count(cfg, "spatial_merge_size", file, 2, low=1)
        bias = _flag(cfg, "multimodal_projector_bias", file, False)
        tower = c * patch * patch * h + h + layers * (2 * h + 4 * h * h + 3 * h * f)
        projector = h + (h * merge * merge) * h + (h * text_hidden + (text_hidden if bias else 0)) \
            + (text_hidden * text_hidden + (text_hidden if bias else 0))
        return int(tower + projector)
    # qwen2_5_vl (Qwen2_5_VLVisionConfig defaults: depth 32, 3,584 wide... as the 7B's)
    h, f = _vision_field(vision, "hidden_size", file, 3584), _vision_field(vision, "intermediate_size", file, 3420)
    depth, c = _vision_field(vision, "depth", file, 32), _vision_field(vision, "in_chans", file, 3)
    patch, temporal = _vision_field(vision, "patch_size", file, 14), _vision_field(vision, "temporal_patch_size", file, 2)
    merge, out = _vision_field(vision, "spatial_merge_size", file, 2), _vision_field(vision, "out_hidden_size", file, 3584)
    wide = h * merge * merge
    tower = c * temporal * patch * patch * h + depth * (2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * (h * f + f) + (f * h + h))
    return int(tower + h + (wide * wide + wide) + (wide * out + out))



def _mamba2_layout(cfg: dict, model_type: str, file: str) -> tuple[dict, dict]:
    """A Mamba2 hybrid's config -> (the config the Llama-layout reader goes on with, its Mamba2 catalog fields).

    granitemoehybrid (GraniteMoeHybridDecoderLayer, transformers 5.24): each layer attention or a Mamba2 mixer
    (layer_types "attention" / "mamba"), a shared_mlp of shared_intermediate_size (input_linear h x 2 f, output_linear
    f x h: Llama's three matrices' weights) and, where num_local_experts > 0 (Granite 4.0-H Tiny / Small), experts of
    intermediate_size (GraniteMoeHybridMoE: input_linear E x 2 f x h, output_linear E x h x f, a router E x h) beside
    it: the shared_mlp is then the shared expert. bamba (BambaDecoderLayer): Mamba2 on every layer but
    attn_layer_indices, a gated MLP of intermediate_size. nemotron_h (NemotronHBlock): one block kind a layer from
    hybrid_override_pattern (M Mamba2, * attention, - an up/down relu2 MLP, E ungated relu2 experts with a shared
    expert and a sigmoid router: Nemotron 3 Nano) or layers_block_type, one norm; num_hidden_layers is the pattern's
    length (NemotronHConfig.num_hidden_layers)."""
    cfg = dict(cfg)
    for old, new in MAMBA2_ALIASES.get(model_type, {}).items():  # (NemotronHConfig.__post_init__'s aliases)
        if old in cfg and new not in cfg:
            cfg[new] = cfg.pop(old)
    arch = {}
    if model_type == "granitemoehybrid":
        types = cfg.get("layer_types", cfg.get("layers_block_type"))
        layers = _number(cfg, "num_hidden_layers", file)
        if not isinstance(types, list) or len(types) != layers:
            raise CatalogError(file, None, "layer_types", f"must list {layers} layer kinds (num_hidden_layers) for "
                                                          f"model_type 'granitemoehybrid', got {show(types)}; accepted: "
                                                          "'attention' or 'mamba' each")
        unknown = sorted({str(t) for t in types} - {"attention", "full_attention", "mamba", "linear_attention"})
        if unknown:
            raise CatalogError(file, None, "layer_types", f"has {show(unknown[0])}; accepted: attention, mamba")
        mamba = sum(1 for t in types if t in ("mamba", "linear_attention"))
        if mamba:  # (the layers' order: which layers freeze tuning's last k are, engine/params.py block_tail)
            arch["block_pattern"] = "".join("M" if t in ("mamba", "linear_attention") else "*" for t in types)
        experts = _count(cfg, "num_local_experts", file, 8)
        if experts > 0:  # GraniteMoeHybridMoE beside the shared_mlp (num_experts_per_tok default 2)
            arch.update(num_experts=experts, experts_per_token=_count(cfg, "num_experts_per_tok", file, 2, low=1),
                        expert_intermediate_size=_count(cfg, "intermediate_size", file, 11008, low=1),
                        shared_intermediate_size=_count(cfg, "shared_intermediate_size", file, 1024, low=1))
            if arch["experts_per_token"] > experts:
                raise CatalogError(file, None, "num_experts_per_tok", f"must be at most num_local_experts ({experts}), "
                                                                      f"got {arch['experts_per_token']}")
            # (no dense MLP beside the experts: the dense width recorded is the expert's, counted nowhere)
            cfg["intermediate_size"] = arch["expert_intermediate_size"]
        else:
            cfg["intermediate_size"] = cfg.get("shared_intermediate_size", 1024)  # (GraniteMoeHybridConfig default)
    elif model_type == "bamba":
        layers = _number(cfg, "num_hidden_layers", file)
        indices = cfg.get("attn_layer_indices")
        if not isinstance(indices, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in indices):
            raise CatalogError(file, None, "attn_layer_indices", f"must be a list of layer numbers, got {show(indices)}")
        attention = {i for i in indices if 0 <= i < layers}
        mamba = layers - len(attention)
        arch["block_pattern"] = "".join("*" if i in attention else "M" for i in range(layers))
    elif model_type == "falcon_h1":
        # FalconH1DecoderLayer: attention and a Mamba2 mixer side by side on every layer (their outputs summed, the mup
        # multipliers scaling them add no weights), a gated MLP, input_layernorm and pre_ff_layernorm; the mixer's
        # in_proj bias is mamba_proj_bias, its out_proj's projectors_bias (counted together: refused when they differ),
        # its gated RMSNorm only where mamba_rms_norm (default false)
        mamba = _number(cfg, "num_hidden_layers", file)
        if _flag(cfg, "projectors_bias", file, False) != _flag(cfg, "mamba_proj_bias", file, False):
            raise CatalogError(file, None, "projectors_bias", f"is {show(cfg.get('projectors_bias', False))} and "
                                                              f"mamba_proj_bias {show(cfg.get('mamba_proj_bias', False))}: "
                                                              "a bias on one Mamba2 projection alone is not counted; "
                                                              "accepted: the same value for both")
        arch.update(mamba_parallel=True, mamba_norm=_flag(cfg, "mamba_rms_norm", file, False))
    else:  # nemotron_h
        pattern = cfg.get("hybrid_override_pattern", cfg.get("layers_block_type", cfg.get("layer_types")))
        kinds = list(pattern) if isinstance(pattern, str) else pattern
        if not isinstance(kinds, list) or not kinds or any(not isinstance(k, str) or k not in NEMOTRON_BLOCKS
                                                           for k in kinds):
            bad = next((k for k in kinds if not isinstance(k, str) or k not in NEMOTRON_BLOCKS), None) \
                if isinstance(kinds, list) and kinds else pattern
            raise CatalogError(file, None, "hybrid_override_pattern", f"has {show(bad)}; accepted: a string of M "
                                                                      "(Mamba2), * (attention), - (MLP) and E "
                                                                      "(experts)")
        kinds = [NEMOTRON_BLOCKS[k] for k in kinds]
        mamba, mlp, moe = kinds.count("mamba"), kinds.count("mlp"), kinds.count("moe")
        layers = len(kinds)
        cfg["num_hidden_layers"] = layers
        # NemotronHConfig's defaults where the config leaves them out (num_key_value_heads 8, intermediate_size 21504, the
        # - blocks' width; head_dim 128: HEAD_DIM_DEFAULT)
        cfg.setdefault("num_key_value_heads", 8)
        cfg.setdefault("intermediate_size", 21504)
        # E blocks (Nemotron 3 Nano; transformers 5.24 modeling_nemotron_h.py NemotronHMoE lines 715-757): a norm, then
        # n_routed_experts ungated relu2 experts (NemotronHExperts lines 654-676: up_proj E x moe_intermediate_size x
        # h, down_proj E x h x moe_intermediate_size), a router E x h (NemotronHTopkRouter lines 759-769; its
        # e_score_correction_bias is a buffer, not a parameter) and one shared NemotronHMLP of
        # moe_shared_expert_intermediate_size (n_shared_experts builds nothing more). They are the model's MoE layers:
        # first_dense_layers counts the other blocks, so architecture_counts' moe_layers is the E blocks wherever they
        # stand (engine/params.py), and the blocks with an MLP alone are the - and E ones.
        arch.update(mixer_free_layers=mlp + moe, mlp_free_layers=layers - mlp - moe, mlp_ungated=True, norms_per_layer=1,
                    block_pattern="".join(BLOCK_LETTERS[k] for k in kinds))
        if moe:
            if cfg.get("moe_latent_size") is not None:  # (NemotronHMoE's fc1/fc2_latent_proj: Nemotron 3 Super)
                raise CatalogError(file, None, "moe_latent_size", f"is {show(cfg['moe_latent_size'])}: experts on a "
                                                                  "latent projection are not counted yet; accepted: "
                                                                  "null (the experts read the hidden state)")
            # (NemotronHConfig defaults: n_routed_experts 8, num_experts_per_tok 2, moe_intermediate_size and
            # moe_shared_expert_intermediate_size 7688)
            arch.update(num_experts=_count(cfg, "n_routed_experts", file, 8, low=1),
                        experts_per_token=_count(cfg, "num_experts_per_tok", file, 2, low=1),
                        expert_intermediate_size=_count(cfg, "moe_intermediate_size", file, 7688, low=1),
                        shared_intermediate_size=_count(cfg, "moe_shared_expert_intermediate_size", file, 7688, low=1),
                        first_dense_layers=layers - moe)
            if arch["experts_per_token"] > arch["num_experts"]:
                raise CatalogError(file, None, "num_experts_per_tok", f"must be at most n_routed_experts "
                                                                      f"({arch['num_experts']}), got "
                                                                      f"{arch['experts_per_token']}")
    for key in MOE_KEYS:  # Granite's experts are read above; the others' keys are their classes' unused defaults
        cfg.pop(key, None)
    keys = MAMBA2_KEYS[model_type]
    for field, (key, default) in keys.items():
        if field in ("mamba_conv_bias", "mamba_proj_bias"):
            arch[field] = _flag(cfg, key, file, default)
        elif field != "mamba_head_dim" and field != "expand":
            arch[field] = _count(cfg, key, file, default, low=1, high=100_000)
    key, default = keys["mamba_head_dim"]
    heads = arch["mamba_num_heads"]
    if "expand" in keys:  # intermediate = int(mamba_expand x hidden_size) (GraniteMoeHybridMambaLayer, BambaMixer)
        expand = cfg.get(keys["expand"][0], keys["expand"][1])
        if isinstance(expand, bool) or not isinstance(expand, (int, float)) or not 0 < expand <= 64:
            raise CatalogError(file, None, keys["expand"][0], f"must be a number above 0, got {show(expand)}")
        inner = int(expand * _number(cfg, "hidden_size", file))
        if model_type == "falcon_h1" and cfg.get("mamba_d_ssm", 1024) is not None:  # (FalconH1Config: 1024)
            inner = _count(cfg, "mamba_d_ssm", file, 1024, low=1)
        head_dim = cfg.get(key, default)
        head_dim = inner // heads if head_dim == "auto" else _count(cfg, key, file, default, low=1, high=100_000)
        if head_dim * heads != inner:  # (the config classes' own check: mamba_d_head x mamba_n_heads == intermediate)
            accepted = f"{inner // heads} or auto" if inner % heads == 0 else \
                f"a {keys['mamba_num_heads'][0]} that divides {inner}, and {inner} / it"
            raise CatalogError(file, None, key, f"is {head_dim}: {head_dim} x {keys['mamba_num_heads'][0]} ({heads}) must "
                                                f"equal {keys['expand'][0]} x hidden_size ({inner}); accepted: {accepted}")
        arch["mamba_head_dim"] = head_dim
    else:
        arch["mamba_head_dim"] = _count(cfg, key, file, default, low=1, high=100_000)
    if heads % arch["mamba_groups"]:
        raise CatalogError(file, None, keys["mamba_groups"][0], f"must divide {keys['mamba_num_heads'][0]} ({heads}), "
                                                                f"got {arch['mamba_groups']}")
    if mamba:
        arch["mamba_layers"] = mamba
    else:  # attention on every layer (Granite 4.0 Micro, 1B, 350M): the Llama layout
        arch = {k: v for k, v in arch.items() if not k.startswith("mamba_")}
    return cfg, arch

def model_from_config(cfg, file: str = "config.json", model_id: str | None = None) -> dict:
    """Map config.json fields to a validated model record. Raises CatalogError (one line naming
    the file and the config field)."""
    if not isinstance(cfg, dict):
        raise CatalogError(file, None, None, f"must be a JSON object of config fields, got {type(cfg).__name__}")
    model_type = cfg.get("model_type")
    if model_type is None:
        raise CatalogError(file, None, "model_type", f"is required but missing; accepted: {', '.join(SUPPORTED)}")
    if not isinstance(model_type, (str, int, float)):  # a list or an object: no model type (and not hashable)
        raise CatalogError(file, None, "model_type", f"must be text, got {type(model_type).__name__} "
                                                     f"{show(model_type)}; accepted: {', '.join(SUPPORTED)}")
    mamba_arch = {}
    if model_type in MAMBA2_TYPES:  # Mamba2 hybrids: their layer kinds and mixers (_mamba2_layout)
        cfg, mamba_arch = _mamba2_layout(cfg, model_type, file)
    if model_type in NOT_MODELLED:
        raise CatalogError(file, None, "model_type", f"{show(model_type)} {NOT_MODELLED[model_type]}; accepted: "
                                                     f"{', '.join(SUPPORTED)}")
    if model_type not in SUPPORTED:
        hint = " (multimodal: see text_config)" if "text_config" in cfg else ""
        raise CatalogError(file, None, "model_type",
                           f"{show(model_type)} is not supported{hint}; accepted: {', '.join(SUPPORTED)}")
    notes = []
    # the family records the checkpoint's own model_type (what frameworks key on: Liger patches gemma3 and llama4,
    # not mistral3), engine/params.py model_types reads it
    checkpoint_type, outer = model_type, cfg
    if model_type in TEXT_TYPE:  # multimodal: its language model
        text = cfg.get("text_config")
        if isinstance(text, dict):
            outer_name = cfg.get("_name_or_path")
            cfg = dict(text)
            if outer_name is not None and "_name_or_path" not in cfg:
                cfg["_name_or_path"] = outer_name
        elif model_type in TEXT_CONFIG:
            raise CatalogError(file, None, "text_config", f"is required for model_type {model_type} (its language model)")
        model_type = TEXT_TYPE[model_type]
    model_type = SAME_LAYOUT.get(model_type, model_type)
    if model_type in CONFIG_CLASS_DEFAULTS:  # a sparse config: its config class's defaults
        cfg = {**CONFIG_CLASS_DEFAULTS[model_type], **{k: v for k, v in cfg.items() if v is not None}}
    if model_type not in MOE_TYPES:
        for key in MOE_KEYS:
            value = cfg.get(key)
            if value not in (None, 0, False, [], {}):
                raise CatalogError(file, None, key, f"is {show(value)}: model_type {model_type} is read as a dense model; "
                                                    f"accepted mixture-of-experts types: {', '.join(MOE_TYPES)}")
    if model_type in ("llama", "mistral", "mixtral", "qwen3", "qwen3_moe", "llama4_text", "phi3", "smollm3", *HYBRID_TYPES,
                      "olmo2", "olmo3", "granite", *MAMBA2_TYPES):
        # Qwen2's q/k/v biases are fixed by its code; gpt-oss has them all (counted below)
        for key in ("attention_bias", "mlp_bias"):
            if _flag(cfg, key, file, False):
                raise CatalogError(file, None, key, "true adds biases the engine does not count; accepted: false "
                                                    "(the Llama layout has none)")

    hidden = _number(cfg, "hidden_size", file)
    heads = _number(cfg, "num_attention_heads", file)
    kv_heads = _number(cfg, "num_key_value_heads", file, default=heads)
    if kv_heads > heads or heads % kv_heads:
        raise CatalogError(file, None, "num_key_value_heads", f"must divide num_attention_heads ({heads}), got {kv_heads}")
    arch = {}
    if model_type in ("deepseek_v3", "deepseek_v2"):
        # MLA (DeepseekV3Config, DeepseekV2Config): q/k heads of qk_nope_head_dim + qk_rope_head_dim
        for key, default in (("kv_lora_rank", 512), ("qk_rope_head_dim", 64), ("qk_nope_head_dim", 128),
                             ("v_head_dim", 128)):
            arch[key] = _count(cfg, key, file, default)
        # q_lora_rank null: one q_proj (DeepSeek-V2-Lite; DeepseekV2Attention builds q_proj where it is None); a V2
        # config that leaves the key out takes DeepseekV2Config's 1536
        v2_default = model_type == "deepseek_v2" and "q_lora_rank" not in cfg
        arch["q_lora_rank"] = 1536 if v2_default else _count(cfg, "q_lora_rank", file, 0)
        head_dim = arch["qk_nope_head_dim"] + arch["qk_rope_head_dim"]
    elif cfg.get("head_dim") is not None or model_type in HEAD_DIM_DEFAULT:
        head_dim = _number(cfg, "head_dim", file, default=HEAD_DIM_DEFAULT.get(model_type))
    else:
        if hidden % heads:
            raise CatalogError(file, None, "head_dim", f"is missing and hidden_size ({hidden}) is not a multiple of "
                                                       f"num_attention_heads ({heads}); give head_dim")
        head_dim = hidden // heads
    arch.update(mamba_arch)
    if model_type == "qwen3_5_moe_text" and cfg.get("intermediate_size") is None:  # every layer MoE: no dense width
        cfg = {**cfg, "intermediate_size": cfg.get("moe_intermediate_size")}
    ffn = _number(cfg, "intermediate_size", file)
    layers = _number(cfg, "num_hidden_layers", file)
    vocab = _number(cfg, "vocab_size", file)
    context = _number(cfg, "max_position_embeddings", file)
    tied = _flag(cfg, "tie_word_embeddings", file, TIED_DEFAULT.get(model_type, False))
    qkv_bias = QKV_BIAS.get(model_type, False)
    if model_type == "glm4_moe":  # Glm4MoeAttention: q/k/v_proj bias=config.attention_bias, o_proj bias=False
        qkv_bias = _flag(cfg, "attention_bias", file, False)
    if model_type == "seed_oss":
        if _flag(cfg, "mlp_bias", file, False):  # SeedOssMLP: gate/up/down bias=config.mlp_bias
            raise CatalogError(file, None, "mlp_bias", "true adds biases the engine does not count; accepted: false")
        # SeedOssAttention: q/k/v_proj bias=config.attention_bias (SeedOssConfig default True), o_proj
        # bias=config.attention_out_bias (default False); Seed-OSS-36B has q/k/v biases only
        qkv_bias = _flag(cfg, "attention_bias", file, True)
        if _flag(cfg, "attention_out_bias", file, False):
            if not qkv_bias:
                raise CatalogError(file, None, "attention_out_bias", "true with attention_bias false (an o_proj bias "
                                                                     "alone) is not counted; accepted: false")
            qkv_bias, arch["attention_bias"] = False, True  # q, k, v and o biases (engine/params.py attention_bias)
    if model_type in ("ernie4_5", "ernie4_5_moe") and _flag(cfg, "use_bias", file, False):
        raise CatalogError(file, None, "use_bias", "true adds biases to every projection and the lm_head, which the "
                                                   "engine does not count; accepted: false")

    # mixture of experts, per transformers' config classes
    if model_type in MOE_TYPES:
        experts_key = {"mixtral": "num_local_experts", "gpt_oss": "num_local_experts", "llama4_text": "num_local_experts",
                       "deepseek_v3": "n_routed_experts", "deepseek_v2": "n_routed_experts", "glm4_moe": "n_routed_experts", "minimax_m2": "num_local_experts",
                       "ernie4_5_moe": "moe_num_experts"}.get(model_type, "num_experts")
        # (Ernie4_5_MoeConfig.attribute_map: num_experts_per_tok is moe_k in its config.json)
        per_token_key = "moe_k" if model_type == "ernie4_5_moe" else "num_experts_per_tok"
        arch["num_experts"] = _count(cfg, experts_key, file, None, low=1)
        arch["experts_per_token"] = _count(cfg, per_token_key, file, None, low=1)
        if arch["experts_per_token"] > arch["num_experts"]:
            raise CatalogError(file, None, "num_experts_per_tok", f"must be at most {experts_key} ({arch['num_experts']}), "
                                                                  f"got {arch['experts_per_token']}")
        if model_type in ("mixtral", "gpt_oss", "llama4_text", "minimax_m2"):
            arch["expert_intermediate_size"] = ffn  # each expert's width is intermediate_size
        else:
            arch["expert_intermediate_size"] = _count(cfg, "moe_intermediate_size", file, None, low=1)
        # one shared expert and its sigmoid gate (Qwen2MoeSparseMoeBlock, Qwen3NextSparseMoeBlock)
        if model_type in ("qwen2_moe", "qwen3_next", "qwen3_5_moe_text"):
            arch["shared_intermediate_size"] = _count(cfg, "shared_expert_intermediate_size", file, 0)
            arch["shared_expert_gate"] = arch["shared_intermediate_size"] > 0
        if model_type in ("qwen2_moe", "qwen3_moe", "qwen3_next"):
            if cfg.get("mlp_only_layers") not in (None, []):
                raise CatalogError(file, None, "mlp_only_layers", f"is {show(cfg.get('mlp_only_layers'))}; accepted: [] "
                                                                  "(dense layers between MoE layers are not read)")
            arch["moe_layer_step"] = _count(cfg, "decoder_sparse_step", file, 1, low=1)
        if model_type in ("deepseek_v3", "deepseek_v2", "glm4_moe"):
            # DeepseekV3MoE: n_shared_experts x moe_intermediate_size, dense first (Glm4MoeMoE: the same experts, shared
            # experts and router with e_score_correction_bias; Glm4MoeConfig's defaults n_shared_experts 1,
            # first_k_dense_replace 1, and no moe_layer_freq). DeepseekV2Moe: the same experts and shared experts
            # (DeepseekV2Config's defaults n_shared_experts 2, first_k_dense_replace 0) and a router of n_routed_experts x
            # hidden without the correction bias (DeepseekV2TopkRouter: softmax, greedy or group-limited top-k)
            glm, v2 = model_type == "glm4_moe", model_type == "deepseek_v2"
            shared_default = 2 if v2 else int(glm)
            arch["shared_intermediate_size"] = (_count(cfg, "n_shared_experts", file, shared_default)
                                                * arch["expert_intermediate_size"])
            arch["first_dense_layers"] = _count(cfg, "first_k_dense_replace", file, int(glm))
            arch["moe_layer_step"] = 1 if glm else _count(cfg, "moe_layer_freq", file, 1, low=1)
            arch["router_bias"] = not v2  # e_score_correction_bias, n_routed_experts per MoE layer (in the checkpoint)
        if model_type == "llama4_text":  # Llama4TextMoe: one shared expert of intermediate_size
            arch["shared_intermediate_size"] = ffn
            arch["moe_layer_step"] = _count(cfg, "interleave_moe_layer_step", file, 1, low=1)
            ffn = _count(cfg, "intermediate_size_mlp", file, ffn, low=1)  # the dense layers' width
        if model_type == "gpt_oss":  # GptOssExperts: gate_up and down biases; the router has a bias
            arch.update(expert_bias=True, router_bias=True)
        if model_type == "minimax_m2":
            # MiniMaxM2SparseMoeBlock: every layer MoE, no shared expert; its e_score_correction_bias (num_local_experts a
            # layer) is a buffer in transformers but a tensor of the checkpoint (block_sparse_moe.e_score_correction_bias,
            # which vLLM's minimax_m2.py loads), counted as DeepSeek-V3's is
            arch["router_bias"] = True
            kinds = cfg.get("attn_type_list")
            if isinstance(kinds, list) and any(k != 1 for k in kinds):  # 0: lightning attention (MiniMax-Text-01)
                raise CatalogError(file, None, "attn_type_list", "has lightning-attention layers (0), which the engine "
                                                                 "does not count yet; accepted: 1 (full attention) on every layer")
        if model_type == "ernie4_5_moe":
            # Ernie4_5_MoeDecoderLayer: MoE where (i + 1) % moe_layer_interval == 0 and moe_layer_start_index <= i <=
            # moe_layer_end_index (-1: the last), else a dense MLP of intermediate_size; Ernie4_5_MoeSparseMoeBlock's
            # shared experts are one MLP of moe_num_shared_experts x moe_intermediate_size (no gate); the router's
            # moe_statics.e_score_correction_bias holds moe_num_experts values
            start = _count(cfg, "moe_layer_start_index", file, 1)
            interval = _count(cfg, "moe_layer_interval", file, 1, low=1)
            end = cfg.get("moe_layer_end_index", -1)
            if interval != 1 or end not in (-1, None, layers - 1):
                raise CatalogError(file, None, "moe_layer_interval" if interval != 1 else "moe_layer_end_index",
                                   f"is {show(interval if interval != 1 else end)}; accepted: MoE layers from "
                                   f"moe_layer_start_index to the last (interval 1, end -1 or {layers - 1})")
            arch["first_dense_layers"] = min(start, layers)
            arch["shared_intermediate_size"] = _count(cfg, "moe_num_shared_experts", file, 0) * arch["expert_intermediate_size"]
            arch["router_bias"] = True
    if model_type == "gpt_oss":  # GptOssAttention: q/k/v/o biases and one sink per head
        arch.update(attention_bias=True, attention_sinks=True)
    if model_type in ("qwen3", "qwen3_moe", "gemma3_text", *HYBRID_TYPES):  # q_norm, k_norm over head_dim
        arch["qk_norm"] = True
    if model_type == "glm4_moe" and _flag(cfg, "use_qk_norm", file, False):  # Glm4MoeAttention's q_norm / k_norm
        arch["qk_norm"] = True
    if model_type in ("olmo2", "olmo3", "minimax_m2"):
        # Olmo2Attention / Olmo3Attention / MiniMaxM2Attention: q_norm = RMSNorm(num_attention_heads * head_dim), k_norm =
        # RMSNorm(num_key_value_heads * head_dim), over the whole projection (no config field turns them off); OLMo's
        # two norms a layer are post_attention_layernorm and post_feedforward_layernorm (no input norm): 2 x h, as Llama
        arch.update(qk_norm=True, qk_norm_full=True)
    if model_type in HYBRID_TYPES:
        # Gated DeltaNet layers: layer_types when listed, else every full_attention_interval-th layer is full attention
        # (Qwen3NextConfig / Qwen3_5TextConfig: `(i + 1) % full_attention_interval` == 0 -> "full_attention")
        types = cfg.get("layer_types")
        if isinstance(types, list) and len(types) == layers:
            unknown = sorted({str(t) for t in types} - {"linear_attention", "full_attention"})
            if unknown:
                raise CatalogError(file, None, "layer_types", f"has {show(unknown[0])}; accepted: linear_attention, "
                                                              "full_attention")
            arch["linear_attention_layers"] = sum(1 for t in types if t == "linear_attention")
            arch["block_pattern"] = "".join("L" if t == "linear_attention" else "*" for t in types)
        else:
            interval = _count(cfg, "full_attention_interval", file, 4, low=1)
            arch["linear_attention_layers"] = layers - layers // interval
            arch["block_pattern"] = "".join("*" if (i + 1) % interval == 0 else "L" for i in range(layers))
        for key, default in HYBRID_DEFAULTS.items():
            arch[key] = _count(cfg, key, file, default, low=1)
        arch["attention_output_gate"] = True  # Qwen3NextAttention: q_proj gives query and gate (no config field)
    if model_type in ("gemma2", "gemma3_text"):  # input, post_attention, pre_ and post_feedforward norms
        arch["norms_per_layer"] = 4

    # sliding-window layers: layer_types when the config lists them, else the class's pattern
    window = cfg.get("sliding_window")
    if model_type == "llama4_text":  # chunked attention on the layers with rope (3 of 4: no_rope_layers)
        window = cfg.get("attention_chunk_size")
    window = window if isinstance(window, int) and not isinstance(window, bool) and 0 < window < context else 0
    sliding = 0
    if window:
        types = cfg.get("layer_types")
        if isinstance(types, list) and len(types) == layers:
            sliding = sum(1 for t in types if t in ("sliding_attention", "chunked_attention"))
        elif model_type == "gemma2":  # Gemma2: layers 0, 2, 4, ... slide
            sliding = (layers + 1) // 2
        elif model_type == "gemma3_text":  # Gemma3: every sliding_window_pattern-th layer is full
            pattern = _count(cfg, "sliding_window_pattern", file, 6, low=1)
            sliding = layers - layers // pattern
        elif model_type == "gpt_oss":  # GptOss: alternating, sliding first
            sliding = (layers + 1) // 2
        elif model_type == "olmo3":  # Olmo3Config: "full_attention" where (i + 1) % 4 == 0, else sliding
            sliding = layers - layers // 4
        elif model_type == "llama4_text":
            no_rope = cfg.get("no_rope_layers")
            if isinstance(no_rope, list) and len(no_rope) == layers:
                sliding = sum(1 for v in no_rope if v)  # 1 = the layer uses rope (chunked)
            else:
                sliding = layers - layers // 4
        elif model_type in ("mistral", "mixtral", "phi3") or (model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")
                                                              and cfg.get("use_sliding_window", False)):
            # (Phi3Model: one sliding-window causal mask for every layer where config.sliding_window is set)
            sliding = (layers if model_type in ("mistral", "mixtral", "phi3")
                       else layers - _count(cfg, "max_window_layers", file, 0))
        elif model_type == "smollm3" and cfg.get("use_sliding_window", False):  # SmolLM3: every layer, as Qwen3
            sliding = layers
        if sliding <= 0:
            window, sliding = 0, 0
        arch.update(sliding_window=window, sliding_window_layers=min(sliding, layers))

    counts = architecture_counts({"hidden_size": hidden, "intermediate_size": ffn, "num_layers": layers,
                                  "num_heads": heads, "num_kv_heads": kv_heads, "head_dim": head_dim,
                                  "vocab_size": vocab, "tied_embeddings": tied, "qkv_bias": qkv_bias, **arch})
    params = int(counts["total"])
    if params > MAX_PARAMS:
        raise CatalogError(file, None, "num_hidden_layers",
                           f"the fields give {params:,} parameters; at most {MAX_PARAMS:,} accepted (check hidden_size, "
                           "intermediate_size, num_hidden_layers and vocab_size)")

    notes.insert(0, f"From a Hugging Face config.json (model_type {model_type}).")
    if qkv_bias:
        notes.append(f"q/k/v projections have biases ({ {'glm4_moe': 'GLM-4.5', 'seed_oss': 'Seed-OSS'}.get(model_type, 'Qwen2')}), counted in params.")
    if model_type == "gemma":
        notes.append("Gemma: GeGLU MLP (gelu) and scaled embeddings, memory modelled as the Llama layout.")
    if arch.get("num_experts"):
        notes.append(f"Mixture of experts: {arch['num_experts']} experts, {arch['experts_per_token']} per token; "
                     f"{int(counts['active']):,} parameters active per token.")
    if arch.get("sliding_window"):
        notes.append(f"Sliding-window attention over {arch['sliding_window']:,} tokens on "
                     f"{arch['sliding_window_layers']} of {layers} layers (KV cache per --kv-policy).")
    if arch.get("linear_attention_layers"):
        notes.append(f"Hybrid linear attention: {arch['linear_attention_layers']} of {layers} layers are Gated DeltaNet "
                     "(no KV cache: a fixed state per sequence), the rest full attention with a gated output.")
    if arch.get("mamba_layers"):
        attention = layers - arch["mamba_layers"] - arch.get("mixer_free_layers", 0)
        notes.append(f"Hybrid Mamba2: {arch['mamba_layers']} of {layers} layers are Mamba2 (no KV cache: a convolution "
                     f"and SSM state per sequence), {attention} attention"
                     + (f", {arch['mixer_free_layers']} an MLP alone" if arch.get("mixer_free_layers") else "")
                     + (" (its experts)" if arch.get("mixer_free_layers") and arch.get("num_experts") else "") + "."
                     + ({"nemotron_h": " LoRA takes its projections listed (peft refuses all-linear on its Mamba2 "
                                       "out_proj)" + ("; on its expert blocks it is not modelled." if arch.get("num_experts")
                                                      else "."),
                         "falcon_h1": " LoRA takes its projections listed (peft refuses all-linear on its Mamba2 "
                                      "out_proj)." if not arch.get("mamba_norm")
                         else " Training such a model (its mixers' gated norm: mamba_rms_norm) is not modelled."}
                        .get(model_type, "")))
        # (engine/params.py hybrid_training_unmodelled)
    if arch.get("kv_lora_rank"):
        notes.append(f"Latent attention (MLA): {arch['kv_lora_rank'] + arch['qk_rope_head_dim']} cached values per "
                     "token and layer.")
    vision = vision_params_from_config(outer, hidden, file) if checkpoint_type in TEXT_TYPE else None
    if vision:
        arch["vision_params"] = vision
        notes.append(f"Vision tower and projector: {vision:,} parameters, counted from vision_config.")
    elif checkpoint_type in TEXT_TYPE:
        notes.append("Language model only: the vision encoder's parameters are not counted from this config "
                     "(a checkpoint's or the Hub's headers count them).")
    quant = cfg.get("quantization_config")
    stored = quant_precision(quant)
    if stored:  # the precision its checkpoint stores (serve plans it so without --precision: planner/serving.py)
        arch["stored_precision"] = stored
        notes.append(f"Checkpoint is pre-quantized ({stored}): serve plans it at {stored} unless --precision says otherwise.")
    elif isinstance(quant, dict) and isinstance(quant.get("quant_method"), str) and not not_text(quant["quant_method"]):
        notes.append(f"Checkpoint is pre-quantized ({quant['quant_method'][:40]}): choose the matching precision.")
    notes.append("Release date unknown (a config.json has none).")

    ident, display = _model_id(cfg, file, model_id)
    record = {
        "id": ident,
        "name": display,
        "family": f"custom-{checkpoint_type}",
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_layers": layers,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": vocab,
        "max_context": context,
        "tied_embeddings": tied,
        "qkv_bias": qkv_bias,
        **arch,
        "params": int(params),
        "release_date": None,
        "source": f"config.json ({Path(file).name})"[:2000],
        "notes": " ".join(notes),
    }
    clean = validate_entries([record], MODEL_FIELDS, file, "model")[0]
    check_model(clean, file)
    return clean


def _no_duplicate_keys(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {show(key)} appears twice; keep one")
        out[key] = value
    return out


def parse_config(raw: str | bytes, file: str = "config.json") -> dict:
    """config.json text -> dict; size, encoding, JSON syntax and duplicate keys checked."""
    if len(raw) > MAX_CONFIG_BYTES:
        raise CatalogError(file, None, None, f"is {len(raw):,} bytes; a config.json is at most {MAX_CONFIG_BYTES:,}")
    if isinstance(raw, (bytes, bytearray)):
        try:
            raw = bytes(raw).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise CatalogError(file, None, None, f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    raw = raw.removeprefix("\ufeff")
    if not raw.strip():
        raise CatalogError(file, None, None, "is empty; expected a JSON object of config fields")
    try:
        return json.loads(raw, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise CatalogError(file, None, None, f"is not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") from None
    except RecursionError:
        raise CatalogError(file, None, None, "is not valid JSON for a config: nested too deeply") from None
    except ValueError as exc:  # duplicate keys; integers longer than Python's digit limit
        if "digits" in str(exc):
            raise CatalogError(file, None, None, "is not accepted: it has a number thousands of digits long") from None
        raise CatalogError(file, None, None, f"is not accepted: {exc}") from None


def model_from_config_text(raw: str | bytes, file: str = "config.json", model_id: str | None = None) -> dict:
    """An uploaded config.json's text or bytes -> a validated model record."""
    return model_from_config(parse_config(raw, file), file, model_id)


def model_from_config_file(path: str | Path, model_id: str | None = None) -> dict:
    """A config.json on disk -> a validated model record. Only a regular file (symlinks
    followed) of at most MAX_CONFIG_BYTES is read: a FIFO, a device, a directory or an empty
    path is refused by name (catalog.schema.read_regular_file)."""
    if str(path) == "":
        raise CatalogError("model config ''", None, None, f"is not a file; accepted: {ACCEPTED_CONFIG}")
    try:
        raw = read_regular_file(path, MAX_CONFIG_BYTES, "a config.json", ACCEPTED_CONFIG)
    except FileNotFoundError as exc:
        raise CatalogError(str(path), None, None, f"cannot be read: {exc.strerror or exc}; accepted: {ACCEPTED_CONFIG}") from None
    return model_from_config_text(raw, str(path), model_id)
