"""Models described by a Hugging Face config.json, turned into catalog records and validated
exactly like the shipped models.yaml."""

from __future__ import annotations

import json
import re
from pathlib import Path

from catalog.schema import MODEL_FIELDS, CatalogError, check_model, validate_entries
from engine.params import total_params

MAX_CONFIG_BYTES = 1_000_000
# Architectures whose decoder is the Llama layout the engine models (RMSNorm, rotary,
# SwiGLU MLP, grouped-query attention, no biases).
LLAMA_LIKE = ("llama", "mistral")
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")


def _number(cfg: dict, key: str, file: str, default=None, required=True):
    value = cfg.get(key, default)
    if value is None:
        if required:
            raise CatalogError(file, None, key, "is required but missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise CatalogError(file, None, key, f"must be a whole number, got {value!r}")
    return value


def model_from_config(cfg, file: str = "config.json", model_id: str | None = None) -> dict:
    """Map config.json fields to a validated model record. Raises CatalogError."""
    if not isinstance(cfg, dict):
        raise CatalogError(file, None, None, f"must be a JSON object, got {type(cfg).__name__}")
    model_type = cfg.get("model_type")
    if model_type not in LLAMA_LIKE:
        raise CatalogError(file, None, "model_type",
                           f"{model_type!r} is not supported yet; accepted: {', '.join(LLAMA_LIKE)}")
    for key in MOE_KEYS:
        if cfg.get(key):
            raise CatalogError(file, None, key, "mixture-of-experts models are not modelled yet")
    hidden = _number(cfg, "hidden_size", file)
    heads = _number(cfg, "num_attention_heads", file)
    head_dim = cfg.get("head_dim")
    if head_dim is None and isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        head_dim = hidden // heads
    name = model_id or re.sub(r"[^a-z0-9.\-]+", "-", str(cfg.get("_name_or_path") or Path(file).parent.name or "custom").lower()).strip("-")[:64] or "custom"
    if not name or not name[0].isalnum():
        name = "custom-" + name
    record = {
        "id": name,
        "name": str(cfg.get("_name_or_path") or name)[:120],
        "family": f"custom-{model_type}",
        "hidden_size": hidden,
        "intermediate_size": _number(cfg, "intermediate_size", file),
        "num_layers": _number(cfg, "num_hidden_layers", file),
        "num_heads": heads,
        "num_kv_heads": _number(cfg, "num_key_value_heads", file, default=heads),
        "head_dim": head_dim,
        "vocab_size": _number(cfg, "vocab_size", file),
        "max_context": _number(cfg, "max_position_embeddings", file),
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "release_date": "2000-01-01",
        "source": f"config.json ({Path(file).name})",
    }
    try:
        record["params"] = total_params(record["hidden_size"], record["intermediate_size"], record["num_layers"],
                                        record["num_heads"], record["num_kv_heads"], record["head_dim"],
                                        record["vocab_size"], record["tied_embeddings"])
    except TypeError:
        record["params"] = 0
    clean = validate_entries([record], MODEL_FIELDS, file, "model")[0]
    check_model(clean, file)
    return clean


def model_from_config_file(path: Path, model_id: str | None = None) -> dict:
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise CatalogError(str(path), None, None, f"cannot be read: {exc.strerror}") from None
    if size > MAX_CONFIG_BYTES:
        raise CatalogError(str(path), None, None, f"is {size:,} bytes; a config.json is at most {MAX_CONFIG_BYTES:,}")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise CatalogError(str(path), None, None, "is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise CatalogError(str(path), None, None, f"is not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") from None
    return model_from_config(cfg, str(path), model_id)
