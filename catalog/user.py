"""Models described by a Hugging Face config.json, turned into catalog records and validated
exactly like the shipped models.yaml.

Accepted architectures (`model_type`), all decoders of the Llama layout the engine models
(RMSNorm, rotary positions, a gated MLP of three matrices, grouped-query attention):

- llama, mistral: no biases. Llama's optional `attention_bias` / `mlp_bias` (true adds
  biases the engine does not count) are refused by name.
- qwen2: the Llama layout plus biases on the q, k and v projections (transformers'
  Qwen2Attention: q_proj/k_proj/v_proj bias=True, o_proj bias=False), recorded as
  `qkv_bias: true` and counted by engine/params.py.
- gemma: the Llama layout with a GeGLU MLP (same three matrices, gelu instead of silu) and
  RMSNorm weights stored as an offset (same size), so the count is the Llama formula; its
  config defaults (transformers' GemmaConfig) are `head_dim` 256 and tied embeddings.

Fields a config leaves out take the transformers config class's default where it has one
(`num_key_value_heads` = `num_attention_heads`; `head_dim` = hidden_size / heads, 256 for
Gemma; `tie_word_embeddings` false, true for Gemma). A sliding-window attention setting is
recorded in `notes` (the engine sizes the KV cache for the whole sequence, an upper bound).
Mixture-of-experts configs and every other architecture are refused with the field named.
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
from engine.params import total_params

# A real config.json is a few KB; reading stops at 1 MB, so a wrong path (a log, a checkpoint,
# /dev/zero) is refused at once instead of filling memory.
MAX_CONFIG_BYTES = 1_000_000
ACCEPTED_CONFIG = "a path to a config.json"
SUPPORTED = ("llama", "mistral", "qwen2", "gemma")
# Keys that mark a mixture-of-experts model (Mixtral, Qwen2-MoE, DeepSeek, ...).
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size",
            "num_experts_per_tok", "n_shared_experts")
# model_type -> defaults of its transformers config class that change the count.
TIED_DEFAULT = {"llama": False, "mistral": False, "qwen2": False, "gemma": True}
HEAD_DIM_DEFAULT = {"gemma": 256}  # GemmaConfig(head_dim=256); the others derive it
QKV_BIAS = {"llama": False, "mistral": False, "qwen2": True, "gemma": False}
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
    value = cfg.get(key)
    if value is None:
        value = default
    if value is None:
        raise CatalogError(file, None, key, "is required but missing" if key not in cfg else "is required but null")
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        value = int(value)  # 4096.0 is 4096
    if isinstance(value, bool) or not isinstance(value, int):
        raise CatalogError(file, None, key, f"must be a whole number, got {show(value)}")
    if value <= 0:
        raise CatalogError(file, None, key, f"must be > 0, got {value}")
    if value > BOUNDS[key]:
        raise CatalogError(file, None, key, f"must be <= {BOUNDS[key]:,}, got {value:,}")
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


def model_from_config(cfg, file: str = "config.json", model_id: str | None = None) -> dict:
    """Map config.json fields to a validated model record. Raises CatalogError (one line naming
    the file and the config field)."""
    if not isinstance(cfg, dict):
        raise CatalogError(file, None, None, f"must be a JSON object of config fields, got {type(cfg).__name__}")
    model_type = cfg.get("model_type")
    if model_type is None:
        raise CatalogError(file, None, "model_type", f"is required but missing; accepted: {', '.join(SUPPORTED)}")
    if model_type not in SUPPORTED:
        hint = " (a multimodal config: its language model is under text_config)" if "text_config" in cfg else ""
        raise CatalogError(file, None, "model_type",
                           f"{show(model_type)} is not supported{hint}; accepted: {', '.join(SUPPORTED)}")
    for key in MOE_KEYS:
        value = cfg.get(key)
        if value not in (None, 0, False, [], {}):
            raise CatalogError(file, None, key, f"is {show(value)}: mixture-of-experts models are not modelled yet; "
                                                "accepted: dense models without this field")
    if model_type != "qwen2":  # Qwen2's q/k/v biases are fixed by its code, not by this flag
        for key in ("attention_bias", "mlp_bias"):
            if _flag(cfg, key, file, False):
                raise CatalogError(file, None, key, "true adds biases the engine does not count; accepted: false "
                                                    "(the Llama layout has none)")

    hidden = _number(cfg, "hidden_size", file)
    heads = _number(cfg, "num_attention_heads", file)
    kv_heads = _number(cfg, "num_key_value_heads", file, default=heads)
    if kv_heads > heads or heads % kv_heads:
        raise CatalogError(file, None, "num_key_value_heads", f"must divide num_attention_heads ({heads}), got {kv_heads}")
    if cfg.get("head_dim") is not None or model_type in HEAD_DIM_DEFAULT:
        head_dim = _number(cfg, "head_dim", file, default=HEAD_DIM_DEFAULT.get(model_type))
    else:
        if hidden % heads:
            raise CatalogError(file, None, "head_dim", f"is missing and hidden_size ({hidden}) is not a multiple of "
                                                       f"num_attention_heads ({heads}); give head_dim")
        head_dim = hidden // heads
    ffn = _number(cfg, "intermediate_size", file)
    layers = _number(cfg, "num_hidden_layers", file)
    vocab = _number(cfg, "vocab_size", file)
    context = _number(cfg, "max_position_embeddings", file)
    tied = _flag(cfg, "tie_word_embeddings", file, TIED_DEFAULT[model_type])
    qkv_bias = QKV_BIAS[model_type]

    params = total_params(hidden, ffn, layers, heads, kv_heads, head_dim, vocab, tied, qkv_bias)
    if params > MAX_PARAMS:
        raise CatalogError(file, None, "num_hidden_layers",
                           f"the fields give {params:,} parameters; at most {MAX_PARAMS:,} accepted (check hidden_size, "
                           "intermediate_size, num_hidden_layers and vocab_size)")

    notes = [f"From a Hugging Face config.json (model_type {model_type})."]
    if qkv_bias:
        notes.append("q/k/v projections have biases (Qwen2), counted in params.")
    if model_type == "gemma":
        notes.append("Gemma: GeGLU MLP (gelu) and scaled embeddings, memory modelled as the Llama layout.")
    window = cfg.get("sliding_window")
    uses_window = cfg.get("use_sliding_window", model_type != "qwen2")
    if isinstance(window, int) and not isinstance(window, bool) and window > 0 and uses_window and window < context:
        notes.append(f"Sliding-window attention over {window:,} tokens: the KV cache estimate counts the whole "
                     "sequence (an upper bound beyond the window).")
    quant = cfg.get("quantization_config")
    if isinstance(quant, dict) and isinstance(quant.get("quant_method"), str) and not not_text(quant["quant_method"]):
        notes.append(f"Checkpoint is pre-quantized ({quant['quant_method'][:40]}): choose the matching precision.")
    notes.append("Release date unknown (a config.json has none).")

    ident, display = _model_id(cfg, file, model_id)
    record = {
        "id": ident,
        "name": display,
        "family": f"custom-{model_type}",
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
