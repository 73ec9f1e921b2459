"""Checkpoints on disk (issue 25): a model record read from the files a model is stored in.

`--model-file PATH` takes

- a GGUF file (llama.cpp): the architecture from its metadata (`{arch}.block_count`,
  `{arch}.embedding_length`, `{arch}.attention.head_count`, ...), the exact parameters and bytes
  from its tensor table (each tensor's GGML type: gguf.GGML_QUANT_SIZES). Split files
  (`NAME-00001-of-0000N.gguf`) are read together, every part's tensors summed. A projector file
  (`general.architecture` "clip", llama.cpp's `--mmproj`) given as a second `--model-file` is
  counted as the vision projector (`vision_weights_bytes`). The header is parsed here
  (GGUFHeader: the format's own layout, gguf's GGML type table), not by gguf.GGUFReader, which
  makes a numpy array of every tokenizer string (11.6 s for a Llama 3 vocabulary).
- a safetensors file, or a folder of them (every `*.safetensors`, or the shards that
  `model.safetensors.index.json`'s weight_map names): the dtype, shape and data_offsets of every
  tensor from each file's header; the architecture from the config.json beside it. A shard
  (`NAME-00001-of-0000N.safetensors`, the names transformers and huggingface_hub write) is read
  with the other N - 1, as GGUF split parts are; a shard missing from its set, whether the index
  lists it or the names number it, is refused by name (SHARD_RE).
- a config.json (as `--model-config`, which stays).

Only headers are read, with bounded reads: a safetensors header is its first 8 bytes (the JSON
header's length, little-endian) and that JSON (at most 100 MB, safetensors' own limit); a GGUF
file is memory-mapped read-only and only its metadata and tensor table are parsed, the tensor data
never touched (a 42 GB file with a 128,256-token vocabulary is sized in 0.17 s).

The model record is the catalog's (catalog/schema.py MODEL_FIELDS, built by
catalog/user.py model_from_config, so it validates like models.yaml); what the files say beyond
it is in the second value returned, `info` (planner/cli.py prints it as --json's `checkpoint`):

- `params_stored`, `weights_bytes_stored`, `dtypes` ({type: {tensors, params, bytes}}) of the
  language model's tensors; `vision_params` / `vision_weights_bytes` of the vision tower or
  projector (tensors named vision_*, multi_modal_projector, mm.*, v.*, or an mmproj file);
- `params_config`: the config arithmetic (engine/params.py architecture_counts) of the record;
- `weights_source`: "header" when the stored tensors give the parameters (they agree with the
  architecture, so the record's `params` are the header's), "config" when no header was read or
  the header cannot be counted as parameters (packed quantized tensors) or disagrees (`notes`
  says by how much, and the record keeps the config's count, which the engine can model);
- `precision`: the precision the stored weights correspond to (GGUF file type, or the dominant
  safetensors dtype), offered as the default when --precision is not given for inference.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path

from catalog.quant import quant_precision as quant_precision_of
from catalog.schema import CatalogError, regular_file_stat, show
from catalog.user import HEAD_DIM_DEFAULT, model_from_config, model_from_config_file, parse_config

ACCEPTED = ("a GGUF file (.gguf, split parts -00001-of-0000N, an mmproj file beside it), a safetensors file or "
            "folder with its config.json, or a config.json")
MAX_SAFETENSORS_HEADER = 100_000_000  # safetensors' own limit on the JSON header
MAX_FILES = 4096  # shards of one checkpoint
MAX_CONFIG = 1_000_000

# safetensors dtype -> bits per element (safetensors' Dtype::bitsize)
SAFETENSORS_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16,
    "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "F4": 4, "F6_E2M3": 6,
    "F6_E3M2": 6, "C64": 64,
}
# dtypes a checkpoint uses for packed quantized weights (GPTQ/AWQ qweight in I32, bitsandbytes
# 4-bit in U8): their element counts are not parameters
PACKED = ("I32", "U32", "U8", "I8", "I16", "U16", "I64", "U64")
# the dominant float dtype -> the planner's precision
DTYPE_PRECISION = {"BF16": "bf16", "F16": "fp16", "F32": "fp32"}
# a GGUF's general.file_type (llama.cpp's LlamaFileType) -> the planner's GGUF precision
GGUF_FILE_TYPE = {1: "fp16", 0: "fp32", 32: "bf16", 2: "q4_0", 7: "q8_0", 10: "q2_k", 12: "q3_k_m", 15: "q4_k_m",
                  17: "q5_k_m", 18: "q6_k", 38: "mxfp4_moe", 39: "nvfp4_gguf"}  # 38: LLAMA_FTYPE_MOSTLY_MXFP4_MOE (gpt-oss's GGUFs); 39: LLAMA_FTYPE_MOSTLY_NVFP4
# GGUF general.architecture -> the config.json model_type catalog/user.py reads
GGUF_ARCH = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3", "gemma": "gemma",
             "gemma2": "gemma2", "gemma3": "gemma3_text", "qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe",
             # llama.cpp's phi3 (Phi-3, Phi-4: attn_qkv and a gate+up ffn_up fused, the same weights) and smollm3
             "phi3": "phi3", "smollm3": "smollm3",
             # llama.cpp's gpt-oss (ggml-org/gpt-oss-20b-GGUF, -120b): experts of feed_forward_length each
             "gpt-oss": "gpt_oss",
             # Qwen3-VL's language model (Qwen/Qwen3-VL-8B-Instruct-GGUF, its mmproj a second file): Qwen3's layout and
             # tensors (llama.cpp src/models/qwen3vl.cpp: q/k norms, a dense SwiGLU; its extra keys rope.dimension_sections
             # and n_deepstack_layers add no weights: the deepstack mergers are in the mmproj); qwen3vlmoe Qwen3-MoE's
             "qwen3vl": "qwen3", "qwen3vlmoe": "qwen3_moe",
             # DeepSeek-V3 / V3.1 / R1 and Kimi K2 (unsloth's and bartowski's GGUFs): MLA and DeepSeek-V3's experts
             "deepseek2": "deepseek_v3",
             # GLM-4.5 / 4.5-Air / 4.6 (convert_hf_to_gguf.py Glm4MoeModel): block_count counts the multi-token-prediction
             # layer too (num_hidden_layers + nextn_predict_layers, its blk.N.nextn.* tensors), which is named, not counted
             "glm4moe": "glm4_moe",
             # Llama 4 Scout / Maverick's language model (its vision tower an mmproj file): llama.cpp's llama4 has no
             # chunk-size key; it sets chunked attention over 8,192 tokens on 3 of every 4 layers unless
             # attention.sliding_window is 0 (src/llama-model.cpp LLM_ARCH_LLAMA4: n_swa = 8192, set_swa_pattern(4))
             "llama4": "llama4_text",
             # OLMo 2 and Olmo 3 (convert_hf_to_gguf.py Olmo2Model writes both as olmo2; Olmo 3's sliding_window and a
             # per-layer sliding_window_pattern of bools, which src/models/olmo2.cpp reads, or a period, default 4)
             "olmo2": "olmo2",
             # Seed-OSS (SeedOssModel: the config's layout, its q/k/v biases as attn_q/k/v.bias tensors)
             "seed_oss": "seed_oss",
             # MiniMax-M2 (MiniMaxM2Model: expert_feed_forward_length = intermediate_size; src/models/minimax-m2.cpp)
             "minimax-m2": "minimax_m2",
             # ERNIE-4.5 and its MoE (Ernie4_5MoeModel: expert_count, expert_used_count, leading_dense_block_count =
             # moe_layer_start_index, interleave_moe_layer_step = moe_layer_interval, expert_shared_count)
             "ernie4_5": "ernie4_5", "ernie4_5-moe": "ernie4_5_moe",
             # Granite 3.x, and Granite 4.0's attention-only models (convert_hf_to_gguf.py GraniteHybridModel writes a
             # GraniteMoeHybrid checkpoint without Mamba layers or experts as granite): the Llama layout's tensors
             "granite": "granite",
             # Granite 4.0-H and Bamba (convert_hf_to_gguf.py GraniteHybridModel), Nemotron-H / Nemotron Nano 2
             # (NemotronHModel): Mamba2 layers beside attention ones, read by _gguf_mamba2
             "granitehybrid": "granitemoehybrid", "nemotron_h": "nemotron_h",
             # Nemotron 3 Nano (convert_hf_to_gguf.py NemotronHModel: MODEL_ARCH.NEMOTRON_H_MOE where the config has
             # num_experts_per_tok): its E blocks' experts, read by _gguf_mamba2 as its config.json's
             "nemotron_h_moe": "nemotron_h"}
# GGUF architectures llama.cpp runs whose layers the engine does not count: refused saying what is missing
GGUF_NOT_MODELLED = {
    **dict.fromkeys(("falcon-h1", "jamba", "mamba", "mamba2", "plamo2"),
                    "has Mamba / Mamba2 layers (their weights, and a convolution and SSM state per sequence)"),
    "qwen3next": "(Qwen3-Next) has Gated DeltaNet layers, read from its config.json (--model-config or --model "
                 "Qwen/Qwen3-Next-80B-A3B-Instruct) but not from a GGUF's metadata yet",
    "lfm2": "has short-convolution layers (a state per sequence)", "lfm2moe": "has short-convolution layers (a state "
                                                                               "per sequence)",
    "gemma3n": "(Gemma 3n) has per-layer embeddings, AltUp and LAuReL blocks and layers sharing a KV cache",
    "gemma4": "(Gemma 4) has full-attention layers of their own head width and KV heads (global_head_dim), per-layer embeddings (E2B, E4B) and a MoE block beside the MLP (26B-A4B)",
}
LLAMA4_GGUF_CHUNK = 8192
# deepseek2's metadata -> DeepseekV3Config's fields (gguf-py constants.py Keys; convert_hf_to_gguf.py DeepseekV2Model
# set_gguf_parameters). A file converted since llama.cpp's MLA change (PR #12801, 2025-04) stores kv_b_proj split into
# attn_k_b and attn_v_b (the same weights), head_count_kv 1 and key/value_length the latent's (576 / 512), with the heads'
# own widths in key_length_mla / value_length_mla; an older one head_count_kv = head_count and key/value_length the heads'.
# (glm4moe's experts take the same keys; its MLA ones are absent, its rope.dimension_count the partial rotary's)
MOE_KEYS_GGUF = {"kv_lora_rank": "attention.kv_lora_rank", "q_lora_rank": "attention.q_lora_rank",
                 "qk_rope_head_dim": "rope.dimension_count", "n_routed_experts": "expert_count",
                 "n_shared_experts": "expert_shared_count", "first_k_dense_replace": "leading_dense_block_count",
                 "moe_intermediate_size": "expert_feed_forward_length", "num_experts_per_tok": "expert_used_count"}
BUFFER_RE = re.compile(r"(^|\.)(rope_freqs\.weight|rotary_emb\.inv_freq)$")
# A quantized checkpoint's scales beside its weights: FP8 block scales (DeepSeek-V3's and Kimi K2's
# `weight_scale_inv`, transformers' FineGrainedFP8 / vLLM's Fp8LinearMethod), per-tensor or per-row ones (fbgemm_fp8's and
# compressed-tensors' `weight_scale`, `input_scale`), ModelOpt NVFP4's `weight_scale_2`: loaded, so in the bytes, but not
# parameters (transformers registers them as such only to load them; the config's count has none)
SCALE_RE = re.compile(r"\.(weight_scale_inv|weight_scale|weight_scale_2|input_scale|input_scale_inv)$")
SPLIT_RE = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
# A sharded safetensors checkpoint's file names: huggingface_hub serialization/_base.py
# split_state_dict_into_shards_factory formats "model{suffix}.safetensors" with suffix "-{i:05d}-of-{n:05d}"
# (transformers' save_pretrained and `hf download` keep them). Each shard holds only its share of the
# tensors, so a folder with some of them (an interrupted download, `--include` of a few files, an index left
# behind) was read as a model of that share: 1 of 2 shards gave half the parameters as the stored bytes,
# and the inference estimate took those bytes for the weights (weights_bytes_source "header") without a
# word. A missing shard is refused by name instead; the config.json alone still sizes the model.
SHARD_RE = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.safetensors$", re.IGNORECASE)
SHOWN_SHARDS = 4  # missing shards named in the one-line error (then "and N more")
VISION_RE = re.compile(r"(^|\.)(vision_tower|vision_model|visual|multi_modal_projector|mm_projector|vision_encoder)\.|^(v|mm)\.")
# A checkpoint's multi-token-prediction layer: Qwen3-Next's and Qwen3.5's `mtp.*`, and DeepSeek-V3's (V3.1's, R1's)
# `model.layers.61.*`, the layer numbered num_hidden_layers (num_nextn_predict_layers of them). transformers drops these
# tensors on load (`_keys_to_ignore_on_load_unexpected`: r"^mtp.*" in modeling_qwen3_next.py, r"model\.layers\.61.*" in
# modeling_deepseek_v3.py), vLLM and SGLang load them only as a speculative draft (vLLM models/deepseek_v2.py
# load_weights skips `get_spec_layer_idx_from_weight_name`: a layer from num_hidden_layers on)
MTP_RE = re.compile(r"^(model\.)?(language_model\.)?mtp\.")
GGUF_LAYER_RE = re.compile(r"^blk\.(?P<layer>\d+)\.")
LAYER_RE = re.compile(r"^(model\.)?(language_model\.)?(model\.)?layers\.(?P<layer>\d+)\.")


def _fail(path, problem: str) -> CatalogError:
    return CatalogError(str(path), None, None, problem)


def _file_size(path: Path, what: str) -> int:
    try:
        return regular_file_stat(path, ACCEPTED).st_size
    except FileNotFoundError:
        raise _fail(path, f"does not exist; accepted: {ACCEPTED}") from None


def _read_at_most(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(1 << 20, n - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


# ---- safetensors ---------------------------------------------------------------------------

def safetensors_header(path: str | Path) -> dict:
    """{tensor name: (dtype, shape, nbytes)} and `__metadata__` of one safetensors file, read from
    its first 8 + N bytes only. Every entry is checked (dtype known, shape of whole numbers, data
    offsets inside the file and matching the shape)."""
    path = Path(path)
    size = _file_size(path, "a safetensors file")
    if size < 8:
        raise _fail(path, f"is {size} bytes, too short for a safetensors file (8-byte header length, then the header)")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _fail(path, f"is not a regular file; accepted: {ACCEPTED}")
        n = int.from_bytes(_read_at_most(fd, 8), "little")
        if n <= 1 or n > MAX_SAFETENSORS_HEADER or n > size - 8:
            raise _fail(path, f"is not a safetensors file: its first 8 bytes give a header of {n:,} bytes (the file has "
                              f"{size:,}; at most {MAX_SAFETENSORS_HEADER:,}); accepted: {ACCEPTED}")
        raw = _read_at_most(fd, n)
    finally:
        os.close(fd)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _fail(path, "is not a safetensors file: its header is not JSON") from None
    if not isinstance(header, dict):
        raise _fail(path, "is not a safetensors file: its header is not a JSON object")
    data_size = size - 8 - n
    meta = header.pop("__metadata__", None) or {}
    tensors = {}
    for name, entry in header.items():
        if not isinstance(entry, dict):
            raise _fail(path, f"tensor {show(name)}: header entry is not an object")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if dtype not in SAFETENSORS_BITS:
            raise _fail(path, f"tensor {show(name)}: dtype {show(dtype)} is not known; accepted: {', '.join(SAFETENSORS_BITS)}")
        if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
            raise _fail(path, f"tensor {show(name)}: shape {show(shape)} is not a list of whole numbers >= 0")
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
                and 0 <= offsets[0] <= offsets[1] <= data_size):
            raise _fail(path, f"tensor {show(name)}: data_offsets {show(offsets)} are not [begin, end] inside the file's "
                              f"{data_size:,} data bytes (a truncated download?)")
        elements = math.prod(shape)
        nbytes = offsets[1] - offsets[0]
        if nbytes * 8 != elements * SAFETENSORS_BITS[dtype] and dtype not in ("F4", "F6_E2M3", "F6_E3M2"):
            raise _fail(path, f"tensor {show(name)}: {nbytes:,} bytes do not hold shape {shape} of {dtype}")
        tensors[name] = (dtype, shape, nbytes)
    return {"tensors": tensors, "metadata": meta if isinstance(meta, dict) else {}}


def _missing_shards(folder: Path, missing: list[str], total: int, listed_by: str) -> CatalogError:
    """One line naming the shards a checkpoint lacks (SHARD_RE) and what sizes the model instead."""
    shown = ", ".join(missing[:SHOWN_SHARDS]) + (f" and {len(missing) - SHOWN_SHARDS:,} more"
                                                 if len(missing) > SHOWN_SHARDS else "")
    return _fail(folder, f"{len(missing):,} of the {total:,} shards {listed_by} {'is' if len(missing) == 1 else 'are'} "
                         f"missing: {shown}; a model is not sized from some of its shards: download every one, or "
                         "give the folder's config.json alone (--model-file PATH/config.json) to size the model from its fields")


def _shard_set(path: Path) -> list[Path]:
    """A file named as a shard (SHARD_RE, N > 1) -> the N shards of its set, in order; any other file: itself.
    A shard of the set that is not beside it is refused by name."""
    m = SHARD_RE.match(path.name)
    if not m or int(m.group("count")) == 1:
        return [path]
    count = int(m.group("count"))
    if count > MAX_FILES:
        raise _fail(path, f"names {count:,} shards; accepted: 1 to {MAX_FILES:,}")
    parts = [path.with_name(f"{m.group('stem')}-{i:05d}-of-{m.group('count')}.safetensors") for i in range(1, count + 1)]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise _missing_shards(path.parent, missing, count, f"named {m.group('stem')}-NNNNN-of-{m.group('count')}.safetensors")
    return parts


def _safetensors_files(path: Path) -> list[Path]:
    """The safetensors files of a folder: the index's weight_map shards, else every *.safetensors (each
    set of shards named NAME-0000i-of-0000N whole, SHARD_RE). A shard missing from the folder is refused."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        from catalog.schema import read_regular_file
        try:
            weight_map = json.loads(read_regular_file(index, 50_000_000, "an index", ACCEPTED)).get("weight_map")
        except (ValueError, AttributeError):
            raise _fail(index, "is not a safetensors index (a JSON object with a weight_map)") from None
        if not isinstance(weight_map, dict) or not weight_map:
            raise _fail(index, "has no weight_map (tensor name -> shard file)")
        names = sorted({str(v) for v in weight_map.values()})
        for name in names:
            if "/" in name or "\\" in name or name.startswith("."):
                raise _fail(index, f"weight_map names {show(name)}; accepted: a shard file in the same folder")
        # every missing shard named at once (the index's metadata.total_size is not taken instead: it is the
        # bytes, not the parameters or dtypes, and a user who has some of the shards wants to be told)
        missing = [name for name in names if not (path / name).is_file()]
        if missing:
            raise _missing_shards(path, missing, len(names), f"that {index.name} lists")
        return [path / name for name in names]
    files = sorted(p for p in path.glob("*.safetensors") if p.is_file())
    seen: set[Path] = set()
    for f in files:  # no index: the shards' own names number their set
        if f not in seen:
            seen.update(_shard_set(f))
    return files


def _tally(tensors) -> dict:
    """{'params', 'bytes', 'tensors', 'dtypes': {type: {tensors, params, bytes}}, 'buffer_bytes', 'scale_bytes'} of
    (name, type, elements, bytes) rows. Buffers that are not parameters (llama.cpp's rope_freqs,
    an old checkpoint's rotary inv_freq) and quantization scales (SCALE_RE) count in the bytes, not in the parameters."""
    out = {"params": 0, "bytes": 0, "tensors": 0, "dtypes": {}, "buffer_bytes": 0, "scale_bytes": 0}
    for name, dtype, elements, nbytes in tensors:
        out["bytes"] += int(nbytes)
        out["tensors"] += 1
        if BUFFER_RE.search(name):
            out["buffer_bytes"] += int(nbytes)
            continue
        if SCALE_RE.search(name):
            out["scale_bytes"] += int(nbytes)
            continue
        d = out["dtypes"].setdefault(dtype, {"tensors": 0, "params": 0, "bytes": 0})
        d["tensors"] += 1
        d["params"] += int(elements)
        d["bytes"] += int(nbytes)
        out["params"] += int(elements)
    return out


def _split_vision(rows, layers: int | None = None):
    """(the language model's rows, the vision tower's, a multi-token-prediction layer's: MTP_RE, or given the model's
    num_hidden_layers, a layer numbered from it on)."""
    text, vision, mtp = [], [], []
    for r in rows:
        layer = LAYER_RE.match(r[0]) if layers is not None else None
        beyond = layer is not None and int(layer["layer"]) >= layers
        (vision if VISION_RE.search(r[0]) else mtp if beyond or MTP_RE.search(r[0]) else text).append(r)
    return text, vision, mtp


def _read_config_beside(folder: Path, stored: dict, what: str):
    config = folder / "config.json"
    if not config.is_file():
        mix = ", ".join(f"{k} {v['params']:,}" for k, v in stored["dtypes"].items())
        raise _fail(folder, f"has no config.json beside {what}: its headers give {stored['params']:,} parameters in "
                            f"{stored['tensors']:,} tensors ({mix}, {stored['bytes']:,} bytes), but the layers, heads, "
                            "context and vocabulary the estimate needs are in the model's config.json; put it in the "
                            "folder, or give --model-file PATH/config.json")
    from catalog.schema import read_regular_file
    raw = read_regular_file(config, MAX_CONFIG, "a config.json", ACCEPTED)
    return parse_config(raw, str(config)), str(config)


def _from_safetensors(path: Path, model_id):
    if path.is_dir():
        files = _safetensors_files(path)
        if not files:
            raise _fail(path, f"is a folder without *.safetensors files or a model.safetensors.index.json; accepted: {ACCEPTED}")
        folder = path
    else:
        files, folder = _shard_set(path), path.parent  # one shard: its whole set, as a GGUF split part
    if len(files) > MAX_FILES:
        raise _fail(path, f"has {len(files):,} safetensors files; at most {MAX_FILES:,} are read")
    rows = []
    for f in files:
        for name, (dtype, shape, nbytes) in safetensors_header(f)["tensors"].items():
            rows.append((name, dtype, math.prod(shape), nbytes))
    text_rows, _vision, _mtp = _split_vision(rows)
    cfg, cfg_file = _read_config_beside(folder, _tally(text_rows), "the safetensors files" if path.is_dir() else path.name)
    record, info = _record_from_rows(cfg, cfg_file, rows, [str(f) for f in files], model_id)
    # the files it came from, as a GGUF's (sweep's model_source column): the config's own "config.json (config.json)"
    # named neither the folder nor the shards
    record["source"] = f"safetensors ({path.name}{f', {len(files)} files' if len(files) > 1 else ''})"
    return record, info


def _record_from_rows(cfg, cfg_file: str, rows, files, model_id, fmt="safetensors"):
    """A config.json's record, and what the safetensors tensors (name, dtype, elements, bytes) say."""
    record = model_from_config(cfg, cfg_file, model_id)
    text_rows, vision_rows, mtp_rows = _split_vision(rows, record["num_layers"])
    stored = _tally(text_rows)
    info = _info(fmt, files, record, stored, _tally(vision_rows))
    mtp = _tally(mtp_rows)
    if mtp["tensors"]:
        where = "mtp.*" if any(MTP_RE.search(r[0]) for r in mtp_rows) else f"layers from {record['num_layers']} on"
        info["notes"].append(f"multi-token-prediction layer ({where}): {mtp['params']:,} parameters, {mtp['bytes']:,} bytes, "
                             "not counted (transformers does not load it; vLLM and SGLang only as a speculative draft)")
    packed = {k for k in stored["dtypes"] if k in PACKED}
    quant = cfg.get("quantization_config") if isinstance(cfg, dict) else None
    floats = {k: v["params"] for k, v in stored["dtypes"].items() if k in DTYPE_PRECISION}
    if floats and not packed and not quant:
        info["precision"] = DTYPE_PRECISION[max(floats, key=floats.get)]
    quant_precision = quant_precision_of(quant)
    if quant_precision:
        info["precision"] = quant_precision
    if packed or (quant and stored["params"] != record["params"]):  # (FP8's e4m3 weights, scales apart, are parameters)
        info["weights_source"] = "config"
        info["notes"] = [n for n in info["notes"] if not n.startswith("the tensors hold")]
        info["notes"].append(f"packed quantized tensors ({', '.join(sorted(packed)) or 'quantization_config'}): element "
                             "counts are not parameters, so the parameters are the config's; the stored bytes are exact")
    return with_stored_weights(record, info), info


# ---- GGUF ----------------------------------------------------------------------------------

# GGUF value types (gguf.GGUFValueType): struct format of the scalars; 8 string, 9 array
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
MAX_GGUF_TENSORS = 1_000_000
MAX_GGUF_KEYS = 100_000
KEEP_ARRAY = 4096  # numeric arrays up to this long keep their values (per-layer head counts); longer: the count


class GGUFArray(list):
    """A metadata array: its values when short and numeric, always its length as `count`."""
    count = 0


class GGUFTensor:
    __slots__ = ("name", "type_name", "dims", "n_elements", "n_bytes", "offset")

    def __init__(self, name, type_name, dims, n_elements, n_bytes, offset):
        self.name, self.type_name, self.dims = name, type_name, dims
        self.n_elements, self.n_bytes, self.offset = n_elements, n_bytes, offset


class GGUFHeader:
    """The metadata and tensor table of a GGUF file (versions 2 and 3, little-endian), parsed from a
    read-only memory map: only the header's pages are touched, never the tensor data.

    gguf.GGUFReader reads the same (and tests/test_checkpoints.py checks both agree), but builds a
    numpy array for every string of the tokenizer: 11.6 s for Llama 3's 128,256 tokens and 280,147
    merges. Here a string array is walked (its lengths) and kept as a count: under a second."""

    def __init__(self, path: Path):
        import mmap
        import struct
        size = _file_size(path, "a GGUF file")
        if size < 24:
            raise _fail(path, f"is {size} bytes, too short for a GGUF file; accepted: {ACCEPTED}")
        with open(path, "rb") as fh:
            if fh.read(4) != b"GGUF":
                raise _fail(path, f"is not a GGUF file (it does not start with the GGUF magic); accepted: {ACCEPTED}")
            self._m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self.path, self.size, self._unpack, self.fields, self.tensors = path, size, struct.unpack_from, {}, []
        try:
            self._parse()
        except (IndexError, ValueError, UnicodeDecodeError, OverflowError, struct.error) as exc:
            raise _fail(path, f"is not a readable GGUF file ({str(exc)[:120] or type(exc).__name__}; truncated?)") from None
        finally:
            self._m.close()

    def _take(self, fmt: str, size: int):
        if self._pos + size > self.size:
            raise ValueError(f"the header runs past the end of the file at byte {self._pos:,}")
        value = self._unpack("<" + fmt, self._m, self._pos)[0]
        self._pos += size
        return value

    def _str(self) -> str:
        n = self._take("Q", 8)
        if n > self.size - self._pos:
            raise ValueError(f"a string of {n:,} bytes at byte {self._pos:,}")
        raw = self._m[self._pos:self._pos + n]
        self._pos += n
        return raw.decode("utf-8")

    def _value(self, vtype: int):
        import struct
        if vtype in _SCALAR:
            fmt = _SCALAR[vtype]
            return self._take(fmt, struct.calcsize("<" + fmt))
        if vtype == 8:
            return self._str()
        if vtype == 9:
            sub, count = self._take("I", 4), self._take("Q", 8)
            out = GGUFArray()
            out.count = count
            if sub in _SCALAR:
                width = struct.calcsize("<" + _SCALAR[sub])
                if count * width > self.size - self._pos:
                    raise ValueError(f"an array of {count:,} values at byte {self._pos:,}")
                if count <= KEEP_ARRAY:
                    out.extend(self._value(sub) for _ in range(count))
                else:
                    self._pos += count * width
            elif sub == 8:
                for _ in range(count):  # walk the lengths; keep none of the strings
                    n = self._take("Q", 8)
                    if n > self.size - self._pos:
                        raise ValueError(f"a string of {n:,} bytes at byte {self._pos:,}")
                    self._pos += n
            else:
                raise ValueError(f"array of type {sub} is not a GGUF array type")
            return out
        raise ValueError(f"value type {vtype} is not a GGUF value type")

    def _parse(self) -> None:
        import gguf
        self._pos = 4
        version = self._take("I", 4)
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version}; accepted: 2, 3 (little-endian)")
        n_tensors, n_keys = self._take("Q", 8), self._take("Q", 8)
        if n_tensors > MAX_GGUF_TENSORS or n_keys > MAX_GGUF_KEYS:
            raise ValueError(f"{n_tensors:,} tensors and {n_keys:,} keys")
        for _ in range(n_keys):
            key = self._str()
            self.fields[key] = self._value(self._take("I", 4))
        for _ in range(n_tensors):
            name = self._str()
            n_dims = self._take("I", 4)
            if n_dims > 8:
                raise ValueError(f"tensor {name!r} has {n_dims} dimensions")
            dims = [self._take("Q", 8) for _ in range(n_dims)]
            raw_type, offset = self._take("I", 4), self._take("Q", 8)
            try:
                qtype = gguf.GGMLQuantizationType(raw_type)
                block, type_size = gguf.GGML_QUANT_SIZES[qtype]
            except (ValueError, KeyError):
                raise ValueError(f"tensor {name!r} has GGML type {raw_type}, which the gguf package does not know") from None
            elements = math.prod(dims)
            if elements % block or (dims and dims[0] % block):
                raise ValueError(f"tensor {name!r} of {qtype.name}: {dims} is not whole blocks of {block}")
            self.tensors.append(GGUFTensor(name, qtype.name, dims, elements, elements // block * type_size, offset))
        alignment = self.fields.get("general.alignment", 32)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"general.alignment {alignment!r} is not a power of two")
        self.data_offset = self._pos + (-self._pos % alignment)
        end = max((t.offset + t.n_bytes for t in self.tensors), default=0)
        if self.data_offset + end > self.size:
            raise ValueError(f"its tensors end at byte {self.data_offset + end:,} but the file has {self.size:,} "
                             "(an interrupted download)")


def _gguf_reader(path: Path) -> GGUFHeader:
    try:
        import gguf  # noqa: F401 - the GGML type table
    except ImportError:  # pragma: no cover - gguf is in requirements.txt
        raise _fail(path, "needs the gguf package to be read: pip install gguf") from None
    return GGUFHeader(path)


def _field(reader, key, default=None):
    value = reader.fields.get(key)
    return default if value is None else value


def _gguf_rows(reader):
    return [(t.name, t.type_name, t.n_elements, t.n_bytes) for t in reader.tensors]


def _split_parts(path: Path) -> list[Path]:
    m = SPLIT_RE.match(path.name)
    if not m:
        return [path]
    count = int(m.group("count"))
    if count < 1 or count > MAX_FILES:
        raise _fail(path, f"names {count} split parts; accepted: 1 to {MAX_FILES}")
    parts = []
    for i in range(1, count + 1):
        part = path.with_name(f"{m.group('stem')}-{i:05d}-of-{m.group('count')}.gguf")
        if not part.is_file():
            raise _fail(part, f"is missing: {path.name} is part of {count}; download every part into {path.parent}")
        parts.append(part)
    return parts


def _whole_field(reader, key: str, file: str):
    """A whole-number metadata value, or None when absent; per-layer arrays must be one value."""
    value = reader.fields.get(key)
    if isinstance(value, GGUFArray):
        if not value or len(set(value)) != 1:
            raise _fail(file, f"{key} has per-layer values that differ ({show(list(value)[:8])}); accepted: one value "
                              "for every layer (the engine models uniform layers)")
        value = value[0]
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _fail(file, f"{key} is {show(value)}; accepted: a whole number")
    return value


def gguf_config(reader, file: str, tensors=None) -> dict:
    """A GGUF's architecture metadata as the config.json fields catalog/user.py reads. `tensors`: every split
    part's tensor table (default: this file's). The metadata is the first part's (llama.cpp tools/gguf-split/
    gguf-split.cpp split_strategy copies the KV pairs into the first split only), but a tensor can be in any part:
    gguf-split cuts the tensor list in order (--split-max-tensors, default 128; --no-tensor-first-split leaves the
    first part none), so output.weight sits in a later part, and a first part without it read as tied embeddings
    (a Llama 3.1 8B F16 in two parts: 7,504,924,672 parameters, one 128,256 x 4,096 matrix short)."""
    tensors = reader.tensors if tensors is None else tensors
    arch = _field(reader, "general.architecture")
    if arch == "clip":
        raise _fail(file, "is a vision projector (mmproj, general.architecture clip); give the language model's GGUF "
                          "first: --model-file MODEL.gguf --model-file MMPROJ.gguf")
    model_type = GGUF_ARCH.get(arch)
    if arch in GGUF_NOT_MODELLED:
        raise _fail(file, f"general.architecture {show(arch)} {GGUF_NOT_MODELLED[arch]}, which the engine does not count "
                          f"yet; accepted: {', '.join(GGUF_ARCH)}")
    if model_type is None:
        raise _fail(file, f"general.architecture {show(arch)} is not read; accepted: {', '.join(GGUF_ARCH)}")
    need = {"num_hidden_layers": "block_count", "hidden_size": "embedding_length",
            "num_attention_heads": "attention.head_count"}
    cfg = {"model_type": model_type}
    for key, suffix in need.items():
        value = _whole_field(reader, f"{arch}.{suffix}", file)
        if value is None:
            raise _fail(file, f"has no {arch}.{suffix} in its metadata (needed for {key})")
        cfg[key] = value
    optional = {"num_key_value_heads": "attention.head_count_kv", "intermediate_size": "feed_forward_length",
                "max_position_embeddings": "context_length", "head_dim": "attention.key_length",
                "vocab_size": "vocab_size", "sliding_window": "attention.sliding_window",
                "num_experts": "expert_count", "num_experts_per_tok": "expert_used_count",
                "moe_intermediate_size": "expert_feed_forward_length",
                "shared_expert_intermediate_size": "expert_shared_feed_forward_length"}
    for key, suffix in optional.items():
        if model_type in MAMBA2_GGUF and suffix in ("attention.head_count_kv", "feed_forward_length"):
            continue  # per-layer arrays there (0 where a layer has no attention / MLP): _gguf_mamba2
        value = _whole_field(reader, f"{arch}.{suffix}", file)
        if value is not None:
            cfg[key] = value
    if "vocab_size" not in cfg:
        tokens = reader.fields.get("tokenizer.ggml.tokens")
        if isinstance(tokens, GGUFArray):
            cfg["vocab_size"] = tokens.count  # the count, without decoding every token
    names = {t.name for t in tensors}
    if "vocab_size" not in cfg and "token_embd.weight" in names:
        cfg["vocab_size"] = int([t for t in tensors if t.name == "token_embd.weight"][0].dims[-1])
    cfg["tie_word_embeddings"] = "output.weight" not in names
    if "attn_q.bias" in " ".join(sorted(n for n in names if n.startswith("blk.0."))) and model_type in ("llama", "mistral"):
        cfg["attention_bias"] = True  # refused by name (the engine does not count it)
    if model_type in ("deepseek_v3", "glm4_moe"):
        for key, suffix in MOE_KEYS_GGUF.items():
            value = _whole_field(reader, f"{arch}.{suffix}", file)
            if value is not None:
                cfg[key] = value
    if model_type == "glm4_moe":
        nextn = _whole_field(reader, f"{arch}.nextn_predict_layers", file) or 0
        if nextn >= cfg["num_hidden_layers"]:
            raise _fail(file, f"{arch}.nextn_predict_layers is {nextn}; accepted: fewer than block_count "
                              f"({cfg['num_hidden_layers']})")
        cfg["num_hidden_layers"] -= nextn
        layer0 = {t.name for t in tensors if t.name.startswith("blk.0.")}
        cfg["attention_bias"] = "blk.0.attn_q.bias" in layer0  # Glm4MoeAttention: q/k/v biases where attention_bias
        cfg["use_qk_norm"] = "blk.0.attn_q_norm.weight" in layer0
        for key in ("num_experts", "rope.dimension_count", "qk_rope_head_dim", "kv_lora_rank", "q_lora_rank"):
            cfg.pop(key, None)
    elif model_type == "llama4_text":  # Llama4TextConfig: experts of intermediate_size, dense layers intermediate_size_mlp
        if cfg.get("num_experts"):
            cfg["num_local_experts"] = cfg.pop("num_experts")
            cfg["intermediate_size_mlp"] = cfg.get("intermediate_size")
            cfg["intermediate_size"] = cfg.pop("moe_intermediate_size", cfg.get("intermediate_size"))
        step = _whole_field(reader, f"{arch}.interleave_moe_layer_step", file)
        if step is not None:
            cfg["interleave_moe_layer_step"] = step
        window = cfg.pop("sliding_window", None)
        if window != 0:
            cfg["attention_chunk_size"] = LLAMA4_GGUF_CHUNK
    elif model_type == "olmo2":  # Olmo 3 where the file has a window (src/models/olmo2.cpp load_arch_hparams)
        window = cfg.pop("sliding_window", None)
        if window:
            layers = cfg["num_hidden_layers"]
            pattern = reader.fields.get(f"{arch}.attention.sliding_window_pattern")
            if isinstance(pattern, GGUFArray) and len(pattern) == layers and all(isinstance(v, bool) for v in pattern):
                sliding = list(pattern)  # convert_hf_to_gguf.py: [t == "sliding_attention" for t in layer_types]
            else:  # a period (llama_hparams::set_swa_pattern: layer il slides where il % period < period - 1)
                period = _whole_field(reader, f"{arch}.attention.sliding_window_pattern", file)
                period = 4 if period is None else period
                sliding = [period == 0 or i % period < period - 1 for i in range(layers)]
            cfg.update(model_type="olmo3", sliding_window=window,
                       layer_types=["sliding_attention" if s else "full_attention" for s in sliding])
    elif model_type == "seed_oss":  # SeedOssAttention's biases, as the tensors say
        layer0 = {t.name for t in tensors if t.name.startswith("blk.0.")}
        cfg["attention_bias"] = "blk.0.attn_q.bias" in layer0
        cfg["attention_out_bias"] = "blk.0.attn_output.bias" in layer0
    elif model_type == "minimax_m2":  # MiniMaxM2Config: num_local_experts of intermediate_size each
        cfg["num_local_experts"] = cfg.pop("num_experts", None)
        cfg["intermediate_size"] = cfg.pop("moe_intermediate_size", cfg.get("intermediate_size"))
    elif model_type in ("ernie4_5", "ernie4_5_moe"):
        layer0 = {t.name for t in tensors if t.name.startswith("blk.0.")}
        cfg["use_bias"] = "blk.0.attn_q.bias" in layer0  # refused by name (the engine does not count it)
        if model_type == "ernie4_5_moe":  # Ernie4_5_MoeConfig's names
            cfg["moe_num_experts"], cfg["moe_k"] = cfg.pop("num_experts", None), cfg.pop("num_experts_per_tok", None)
            for key, suffix in (("moe_layer_start_index", "leading_dense_block_count"),
                                ("moe_layer_interval", "interleave_moe_layer_step"),
                                ("moe_num_shared_experts", "expert_shared_count")):
                value = _whole_field(reader, f"{arch}.{suffix}", file)
                if value is not None:
                    cfg[key] = value
        else:
            cfg.pop("num_experts", None)
            cfg.pop("num_experts_per_tok", None)
    elif model_type in MAMBA2_GGUF:
        cfg = _gguf_mamba2(reader, arch, file, tensors, cfg)
    elif model_type == "deepseek_v3":
        key_len = _whole_field(reader, f"{arch}.attention.key_length_mla", file) or cfg.pop("head_dim", None)
        value_len = _whole_field(reader, f"{arch}.attention.value_length_mla", file) or \
            _whole_field(reader, f"{arch}.attention.value_length", file)
        if key_len is None or value_len is None or "qk_rope_head_dim" not in cfg or key_len <= cfg["qk_rope_head_dim"]:
            raise _fail(file, f"has no {arch}.attention.key_length(_mla), value_length(_mla) and rope.dimension_count "
                              "giving the MLA heads' widths")
        cfg.update(qk_nope_head_dim=key_len - cfg["qk_rope_head_dim"], v_head_dim=value_len)
        cfg["num_key_value_heads"] = cfg["num_attention_heads"]  # (MLA: the config's, whatever the file's cache layout)
        cfg.pop("head_dim", None)
        cfg.pop("num_experts", None)
        # DeepSeek-V2 (V2-Lite, V2.5, Coder-V2) is llama.cpp's deepseek2 too: its routers have no correction bias, so the
        # file has no exp_probs_b tensor (LLM_TENSOR_FFN_EXP_PROBS_B, V3's e_score_correction_bias); read as
        # catalog/user.py's deepseek_v2, q_lora_rank absent meaning one q_proj (llama.cpp writes the key only for a
        # low-rank query; DeepseekV2Config's 1536 default is not the file's)
        if cfg.get("n_routed_experts") and not any(".exp_probs_b" in n for n in names):
            cfg["model_type"] = "deepseek_v2"
            cfg.setdefault("q_lora_rank", None)
    elif cfg.get("num_experts"):
        if model_type == "llama":
            cfg["model_type"] = "mixtral"
            cfg["num_local_experts"] = cfg.pop("num_experts")
            cfg.pop("moe_intermediate_size", None)
        elif model_type == "gpt_oss":  # GptOssConfig: num_local_experts of intermediate_size each
            cfg["num_local_experts"] = cfg.pop("num_experts")
            cfg["intermediate_size"] = cfg.pop("moe_intermediate_size", cfg.get("intermediate_size"))
        elif model_type not in ("qwen2_moe", "qwen3_moe"):
            raise _fail(file, f"{arch}.expert_count is {cfg['num_experts']}: {arch} is read as a dense model")
    else:
        cfg.pop("num_experts", None)
        cfg.pop("num_experts_per_tok", None)
    name = _field(reader, "general.name")
    if isinstance(name, str) and name.strip():
        cfg["_name_or_path"] = name.strip()[:120]
    for key, suffix in (("intermediate_size", "feed_forward_length"), ("max_position_embeddings", "context_length"),
                        ("vocab_size", "vocab_size")):
        if key not in cfg:
            raise _fail(file, f"has no {arch}.{suffix} in its metadata (needed for {key})")
    # (a head width equal to hidden / heads is the config class's own unless the class defaults another: Gemma's 256,
    # Qwen3's 128, gpt-oss's 64, ... catalog/user.py HEAD_DIM_DEFAULT)
    if "head_dim" in cfg and cfg["head_dim"] * cfg["num_attention_heads"] == cfg["hidden_size"] and \
            cfg["model_type"] not in HEAD_DIM_DEFAULT:
        cfg.pop("head_dim")
    return cfg



MAMBA2_GGUF = ("granitemoehybrid", "nemotron_h")


def _per_layer(reader, key: str, layers: int, file: str) -> list[int] | None:
    """A per-layer whole-number metadata array (or one value for every layer), None when absent."""
    value = reader.fields.get(key)
    if value is None:
        return None
    values = list(value) if isinstance(value, GGUFArray) else [value] * layers
    if len(values) != layers or any(not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in values):
        raise _fail(file, f"{key} is {show(values[:8])}; accepted: {layers} whole numbers (one a layer, block_count)")
    return values


def _gguf_mamba2(reader, arch: str, file: str, tensors, cfg: dict) -> dict:
    """A Mamba2 hybrid's GGUF metadata as its config.json (catalog/user.py _mamba2_layout). convert_hf_to_gguf.py
    GraniteHybridModel.set_gguf_parameters writes attention.head_count_kv per layer (the KV heads on attention layers,
    0 on Mamba2 ones), ssm.conv_kernel, ssm.state_size, ssm.group_count, ssm.inner_size (the Mamba2 intermediate) and
    ssm.time_step_rank (the Mamba2 heads); GraniteMoeModel's expert_count / expert_used_count, feed_forward_length
    (the experts' width with experts, else the MLP's) and expert_shared_feed_forward_length (shared_intermediate_size).
    NemotronHModel adds feed_forward_length per layer (intermediate_size on its MLP blocks, 0 elsewhere) and
    key_length (head_dim); a block with neither KV heads nor an MLP is Mamba2. Its nemotron_h_moe (Nemotron 3 Nano,
    NemotronHModel.set_gguf_parameters' is_moe branch): feed_forward_length moe_intermediate_size on the E blocks (0
    elsewhere, so a block with a width is an E one), expert_count, expert_used_count, expert_feed_forward_length,
    expert_shared_feed_forward_length and moe_latent_size where the config has one. Biases from the tensors:
    ssm_conv1d.bias (conv bias), ssm_in.bias (projection bias)."""
    layers = cfg["num_hidden_layers"]
    kv = _per_layer(reader, f"{arch}.attention.head_count_kv", layers, file) or [cfg["num_attention_heads"]] * layers
    heads_kv = sorted({k for k in kv if k > 0})
    if len(heads_kv) != 1:
        raise _fail(file, f"{arch}.attention.head_count_kv is {show(kv[:8])}; accepted: one KV head count on the "
                          "attention layers, 0 on the Mamba2 ones (at least one attention layer)")
    cfg["num_key_value_heads"] = heads_kv[0]
    ssm = {}
    for key, suffix in (("inner", "ssm.inner_size"), ("heads", "ssm.time_step_rank"), ("state", "ssm.state_size"),
                        ("groups", "ssm.group_count"), ("kernel", "ssm.conv_kernel")):
        ssm[key] = _whole_field(reader, f"{arch}.{suffix}", file)
        if not ssm[key]:
            raise _fail(file, f"has no {arch}.{suffix} in its metadata (needed for its Mamba2 layers)")
    if ssm["inner"] % ssm["heads"]:
        raise _fail(file, f"{arch}.ssm.inner_size ({ssm['inner']}) is not a multiple of {arch}.ssm.time_step_rank "
                          f"({ssm['heads']}, the Mamba2 heads)")
    names = {t.name for t in tensors}
    conv_bias = any(n.endswith(".ssm_conv1d.bias") for n in names)
    proj_bias = any(n.endswith(".ssm_in.bias") for n in names)
    head_dim = ssm["inner"] // ssm["heads"]
    for key in ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size"):
        cfg.pop(key, None)
    if arch in ("nemotron_h", "nemotron_h_moe"):
        ff = _per_layer(reader, f"{arch}.feed_forward_length", layers, file) or [0] * layers
        block = "E" if arch == "nemotron_h_moe" else "-"
        cfg["hybrid_override_pattern"] = "".join("*" if k > 0 else block if f > 0 else "M" for k, f in zip(kv, ff))
        if arch == "nemotron_h_moe":
            for key, suffix in (("n_routed_experts", "expert_count"), ("num_experts_per_tok", "expert_used_count"),
                                ("moe_intermediate_size", "expert_feed_forward_length"),
                                ("moe_shared_expert_intermediate_size", "expert_shared_feed_forward_length"),
                                ("moe_latent_size", "moe_latent_size")):
                value = _whole_field(reader, f"{arch}.{suffix}", file)
                if value is not None:
                    cfg[key] = value
            if not cfg.get("n_routed_experts"):
                raise _fail(file, f"has no {arch}.expert_count in its metadata (needed for its E blocks' experts)")
            cfg["intermediate_size"] = 1  # (no - block in a nemotron_h_moe file: the dense width counts nowhere)
        elif any(f > 0 for f in ff):
            widths = {f for f in ff if f > 0}
            if len(widths) != 1:
                raise _fail(file, f"{arch}.feed_forward_length is {show(ff[:8])}; accepted: one width on the MLP blocks")
            cfg["intermediate_size"] = widths.pop()
        else:
            cfg["intermediate_size"] = 1  # (no MLP block: the width counts nowhere)
        cfg.update(mamba_num_heads=ssm["heads"], mamba_head_dim=head_dim, ssm_state_size=ssm["state"],
                   n_groups=ssm["groups"], conv_kernel=ssm["kernel"], use_conv_bias=conv_bias, use_bias=proj_bias)
        return cfg
    ff = _whole_field(reader, f"{arch}.feed_forward_length", file)
    shared = _whole_field(reader, f"{arch}.expert_shared_feed_forward_length", file)
    experts = _whole_field(reader, f"{arch}.expert_count", file) or 0
    if experts:
        cfg.update(num_local_experts=experts,
                   num_experts_per_tok=_whole_field(reader, f"{arch}.expert_used_count", file),
                   intermediate_size=_whole_field(reader, f"{arch}.expert_feed_forward_length", file) or ff,
                   shared_intermediate_size=shared)
    else:
        cfg.update(num_local_experts=0, intermediate_size=ff, shared_intermediate_size=shared or ff)
    cfg.update(layer_types=["attention" if k > 0 else "mamba" for k in kv], mamba_n_heads=ssm["heads"],
               mamba_d_head=head_dim, mamba_d_state=ssm["state"], mamba_n_groups=ssm["groups"],
               mamba_d_conv=ssm["kernel"], mamba_conv_bias=conv_bias, mamba_proj_bias=proj_bias,
               mamba_expand=ssm["inner"] / cfg["hidden_size"])
    return cfg

def _from_gguf(paths: list[Path], model_id):
    main, projectors = None, []
    for p in paths:
        parts = _split_parts(p)
        readers = [_gguf_reader(part) for part in parts]
        if _field(readers[0], "general.architecture") == "clip":
            projectors.append((parts, readers))
        elif main is None:
            main = (parts, readers)
        else:
            raise _fail(p, "is a second language model; give one model (and optionally its mmproj file)")
    if main is None:
        gguf_config(projectors[0][1][0], str(projectors[0][0][0]))  # raises the clip message
    parts, readers = main
    cfg = gguf_config(readers[0], str(parts[0]), [t for reader in readers for t in reader.tensors])
    record = model_from_config(cfg, str(parts[0]), model_id)
    record["source"] = f"GGUF ({parts[0].name}{f', {len(parts)} parts' if len(parts) > 1 else ''})"
    record["notes"] = record["notes"].replace("From a Hugging Face config.json", "From a GGUF file's metadata").replace(
        "Release date unknown (a config.json has none).", "Release date unknown.")
    rows = [r for reader in readers for r in _gguf_rows(reader)]
    mtp_rows = [r for r in rows if (m := GGUF_LAYER_RE.match(r[0])) and int(m["layer"]) >= record["num_layers"]]
    rows = [r for r in rows if r not in mtp_rows] if mtp_rows else rows
    vision_rows = [r for _p, rs in projectors for reader in rs for r in _gguf_rows(reader)]
    info = _info("gguf", [str(p) for p in parts] + [str(p) for ps, _r in projectors for p in ps], record, _tally(rows),
                 _tally(vision_rows))
    if mtp_rows:  # GLM-4.5's nextn layer (llama.cpp keeps it in the file, for speculative decoding)
        mtp = _tally(mtp_rows)
        # llama.cpp counts these blocks in n_layer (block_count) and builds the graph over n_layer - nextn_predict_layers
        # (src/models/glm4-moe.cpp: "Final layer tensors are loaded but not processed"), while -ngl / num_gpu put the
        # last n_gpu_layers - 1 of n_layer blocks on the GPU (llama-model.cpp load_tensors, i_gpu_start = n_layer + 1 -
        # n_gpu_layers): a command names them on top of the planned layers (planner/serving.py files_named)
        info["gguf_extra_blocks"] = len({int(GGUF_LAYER_RE.match(r[0])["layer"]) for r in mtp_rows})
        info["notes"].append(f"multi-token-prediction layer (blk.{record['num_layers']} on): {mtp['params']:,} parameters, "
                             f"{mtp['bytes']:,} bytes, not counted (llama.cpp does not run it; vLLM and SGLang only as a "
                             "speculative draft)")
    if projectors:  # the mmproj file(s), apart from the model's parts (serve's llama-server --mmproj names them)
        info["projector_files"] = [str(p) for ps, _r in projectors for p in ps]
    file_type = _field(readers[0], "general.file_type")
    if isinstance(file_type, int):
        info["file_type"] = file_type
        try:
            import gguf
            info["file_type_name"] = gguf.LlamaFileType(file_type).name
        except ValueError:
            pass
        if file_type in GGUF_FILE_TYPE:
            info["precision"] = GGUF_FILE_TYPE[file_type]
        else:
            info["notes"].append(f"file type {info.get('file_type_name', file_type)} is none of the engine's precisions "
                                 f"({', '.join(GGUF_FILE_TYPE.values())}): give --precision; the stored "
                                 f"{info['weights_bytes_stored']:,} bytes are the weights' real size")
    return with_stored_weights(record, info), info


# ---- the record and what the files say ----------------------------------------------------

def with_stored_weights(record: dict, info: dict) -> dict:
    """The record with what the files say beside the architecture (issue 25): the vision tower's
    parameters (a VL checkpoint's vision tensors, a GGUF mmproj), and the language model's stored
    bytes with the precision they are stored in, which the estimate takes for an inference row at that
    precision (engine/components.py weight_bytes)."""
    out = dict(record)
    if info.get("vision_params"):
        out["vision_params"] = int(info["vision_params"])
    precision = info.get("precision")
    if precision and info.get("weights_bytes_stored"):
        from engine.scenarios import INFER_PRECISIONS  # the scenario schema (the layer rule allows catalog -> engine)
        if precision in INFER_PRECISIONS:
            out["stored_weights_bytes"] = int(info["weights_bytes_stored"])
            out["stored_precision"] = precision
            info["weights_bytes_source"] = "header"
    info.setdefault("weights_bytes_source", "config")
    return out


def _info(fmt, files, record, stored, vision) -> dict:
    info = {
        "format": fmt,
        "files": files,
        "params_config": int(record["params"]),
        "params_stored": stored["params"],
        "weights_bytes_stored": stored["bytes"],
        "tensors": stored["tensors"],
        "dtypes": stored["dtypes"],
        "buffer_bytes": stored["buffer_bytes"],
        "scale_bytes": stored["scale_bytes"],
        "vision_params": vision["params"],
        "vision_weights_bytes": vision["bytes"],
        "weights_source": "header",
        "notes": [],
    }
    if stored["params"] != record["params"]:
        info["weights_source"] = "config"
        diff = stored["params"] - int(record["params"])
        info["notes"].append(f"the tensors hold {stored['params']:,} parameters, the architecture gives "
                             f"{int(record['params']):,} ({diff:+,}): the estimate uses the architecture's count")
    if vision["params"]:
        info["notes"].append(f"vision tower/projector: {vision['params']:,} parameters, {vision['bytes']:,} bytes: counted "
                             "as vision_params beside params (loaded in 16-bit with the model; llama.cpp --mmproj)")
    return info


def model_from_files(paths, model_id: str | None = None) -> tuple[dict, dict]:
    """--model-file PATH [--model-file MMPROJ]: (validated model record, info about the stored weights)."""
    paths = [Path(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
    if not paths:
        raise _fail("--model-file", f"needs a path; accepted: {ACCEPTED}")
    for p in paths:
        if str(p).strip() in ("", "."):
            raise _fail(f"model file {show(str(p))}", f"is not a file; accepted: {ACCEPTED}")
        if not p.exists():
            raise _fail(p, f"does not exist; accepted: {ACCEPTED}")
    ggufs = [p for p in paths if p.is_file() and p.suffix.lower() == ".gguf"]
    if ggufs:
        if len(ggufs) != len(paths):
            raise _fail(paths[0], "mixes GGUF and other files; give one GGUF model (and optionally its mmproj .gguf)")
        return _from_gguf(ggufs, model_id)
    if len(paths) > 1:
        raise _fail(paths[1], "is a second --model-file: only a GGUF model takes two (the model and its mmproj file)")
    path = paths[0]
    if path.is_dir() or path.suffix.lower() == ".safetensors":
        return _from_safetensors(path, model_id)
    if path.suffix.lower() == ".json" or path.name == "config.json":
        record = model_from_config_file(path, model_id)
        return record, {"format": "config", "files": [str(path)], "params_config": int(record["params"]),
                        "weights_source": "config", "notes": []}
    if path.is_file():
        with open(path, "rb") as fh:
            head = fh.read(8)
        if head[:4] == b"GGUF":
            return _from_gguf([path], model_id)
        if len(head) == 8 and 1 < int.from_bytes(head, "little") <= MAX_SAFETENSORS_HEADER:
            return _from_safetensors(path, model_id)
    raise _fail(path, f"is not a model file; accepted: {ACCEPTED}")


def stored_vs_engine(info: dict, weights_bytes_engine, precision) -> dict:
    """The stored bytes beside the engine's weights_bytes for the scenario's precision."""
    out = dict(info)
    if weights_bytes_engine is not None and info.get("weights_bytes_stored"):
        engine_bytes = int(round(float(weights_bytes_engine)))
        out["weights_bytes_engine"] = engine_bytes
        out["weights_bytes_difference"] = int(info["weights_bytes_stored"]) - engine_bytes
        out["engine_precision"] = precision
    return out


def default_precision(args, info: dict, engine_takes=None) -> None:
    """--precision left out: the stored weights' precision, for inference (estimate/check/sweep
    --task infer, serve), when the engine takes it (a GGUF type only under llama.cpp/ollama).
    engine_takes(engine, precision): serve's own rule (engine/serving.py engine_takes_precision, passed by the
    command line: catalog reads only engine.params and engine.scenarios, tests/test_hardening_catalog.py)."""
    precision = info.get("precision")
    if not precision or getattr(args, "precision", "given") is not None:
        return
    task, engine = getattr(args, "task", None), getattr(args, "engine", None)
    if engine is None and task != "infer":
        return
    from engine.scenarios import GGUF_BITS, GGUF_FILE_PRECISIONS, INFER_PRECISIONS  # the scenario schema (the layer rule: tests/test_hardening_catalog.py)
    # (serve's engine: only what it runs, engine/serving.py engine_takes_precision. A BF16 safetensors checkpoint under
    # llama.cpp, Ollama, ExLlamaV2 or MLC-LLM was given bf16, which those engines refuse: `serve --engine llama.cpp
    # --model-file FOLDER` failed on a precision the user never typed, where a catalog model gets the engine's default)
    gguf_engine = engine in ("llama.cpp", "ollama")
    if info.get("format") == "gguf" and gguf_engine and precision not in GGUF_FILE_PRECISIONS:
        # the file is what the engine loads: its engine's default (q4_k_m) would size an F16 file at a third
        raise _fail(info["files"][0], f"stores {precision} weights (general.file_type "
                                      f"{info.get('file_type_name', info.get('file_type'))}), which serve does not model "
                                      f"under {engine}; accepted: --precision {', '.join(GGUF_FILE_PRECISIONS)} (the file "
                                      "re-quantized to that type), or estimate --task infer for these weights")
    # (a 16-bit safetensors checkpoint under llama.cpp / Ollama is not the GGUF those engines load: their default type,
    # as for a catalog model; a 16-bit GGUF file is served as stored)
    converted = gguf_engine and info.get("format") != "gguf" and precision not in GGUF_BITS
    if converted or precision not in INFER_PRECISIONS or (precision in GGUF_BITS and engine not in (None, "llama.cpp", "ollama")) or \
            (engine is not None and engine_takes is not None and not engine_takes(engine, precision)):
        info["notes"].append(f"the stored weights are {precision}, which {engine or 'the estimate'} does not take: "
                             "the engine's default precision is used (see weights_bytes_engine beside the stored bytes)")
        return
    args.precision = precision
    info["notes"].append(f"precision {precision}: the stored weights' (--precision overrides it)")


# ---- Hugging Face Hub ids (issue 25 item 1) -----------------------------------------------

HUB_ID_RE = re.compile(r"^(?P<repo>[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.\-]{0,95})"
                       r"(?:@(?P<revision>[A-Za-z0-9][A-Za-z0-9_.\-/]{0,199}))?$")
ACCEPTED_HUB = "ORG/NAME or ORG/NAME@REVISION (a Hugging Face Hub model id; a branch, tag or commit)"


def is_hub_id(text) -> bool:
    """An id with one slash (ORG/NAME[@REVISION]) names a Hub model; catalog ids have none."""
    return isinstance(text, str) and text.split("@", 1)[0].count("/") == 1


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _hub_unresolvable(endpoint: str | None) -> str | None:
    """Why the Hub's host cannot be reached at all ("huggingface.co: name not resolved"), or None.
    huggingface_hub retries a failed HEAD five times with backoff when the file is not cached
    (file_download.py: `_get_metadata_or_catch_error(..., retry_on_errors=True)`, utils/_http.py
    http_backoff max_retries=5: 1+2+4+8+8 s): 24 s measured on a machine with no DNS before the
    message. A name that does not resolve will not resolve in 24 s either, so it is asked once here
    (a resolver answer, milliseconds) and the cache is read as if offline."""
    import socket
    from urllib.parse import urlparse
    host = urlparse(endpoint or "https://huggingface.co").hostname
    if not host:
        return None
    try:
        socket.getaddrinfo(host, 443, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        return f"{host}: name not resolved ({exc.strerror or exc})" if isinstance(exc, socket.gaierror) else f"{host}: {exc}"
    return None


def hub_cache_dir() -> Path:
    """The Hub cache as huggingface_hub finds it, read now (not at import): HF_HUB_CACHE, else
    HF_HOME/hub, else ~/.cache/huggingface/hub (XDG_CACHE_HOME honoured)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def _hub_errors():
    try:
        from huggingface_hub import errors as E
    except ImportError:  # huggingface_hub before 0.24 keeps them in utils
        from huggingface_hub import utils as E
    none = type("NoSuchError", (Exception,), {})
    return {name: getattr(E, name, none) for name in (
        "GatedRepoError", "RepositoryNotFoundError", "RevisionNotFoundError", "EntryNotFoundError",
        "LocalEntryNotFoundError", "OfflineModeIsEnabled", "HfHubHTTPError", "NotASafetensorsRepoError",
        "SafetensorsParsingError", "HFValidationError")}


def _commit_of(path: str) -> str | None:
    """The commit a cached file belongs to: .../snapshots/<commit>/<file>."""
    parts = Path(path).parts
    return parts[parts.index("snapshots") + 1] if "snapshots" in parts[:-1] else None


def _hub_fail(hub_id: str, problem: str) -> CatalogError:
    return CatalogError(f"model {hub_id}", None, None, problem)


def model_from_hub(hub_id: str, model_id: str | None = None) -> tuple[dict, dict]:
    """--model ORG/NAME[@REVISION]: config.json, the safetensors headers (HTTP range reads, never the
    weights) and quantization_config through huggingface_hub; offline (HF_HUB_OFFLINE) from the cache.
    HF_HOME / HF_HUB_CACHE, HF_TOKEN and HF_ENDPOINT are read at the call."""
    m = HUB_ID_RE.match(hub_id or "")
    if not m:
        raise CatalogError(f"model {show(hub_id)}", None, None, f"is not a Hub model id; accepted: {ACCEPTED_HUB}")
    repo, revision = m.group("repo"), m.group("revision")
    try:
        import huggingface_hub as hub
    except ImportError:  # pragma: no cover - huggingface_hub is in requirements.txt
        raise _hub_fail(hub_id, "needs the huggingface_hub package: pip install huggingface_hub") from None
    E = _hub_errors()
    cache = hub_cache_dir()
    token = os.environ.get("HF_TOKEN") or None
    endpoint = os.environ.get("HF_ENDPOINT") or None
    offline = _offline()
    unreachable = None if offline else _hub_unresolvable(endpoint)
    offline = offline or unreachable is not None
    where = f"revision {revision}" if revision else "its main branch"
    try:
        if offline:
            cfg_path = hub.try_to_load_from_cache(repo, "config.json", cache_dir=str(cache), revision=revision)
            if not isinstance(cfg_path, str) and unreachable:
                raise _hub_fail(hub_id, f"could not be fetched ({unreachable}) and has no config.json for {where} in the "
                                        f"local cache ({cache}): check the network or HF_ENDPOINT, or point HF_HOME at a "
                                        "cache that has it")
            if not isinstance(cfg_path, str):
                raise _hub_fail(hub_id, f"has no config.json for {where} in the local cache ({cache}) and HF_HUB_OFFLINE is "
                                        f"set: download it once online (hf download {repo} config.json{f' --revision {revision}' if revision else ''}), point HF_HOME at "
                                        "the cache that has it, or unset HF_HUB_OFFLINE")
        else:
            cfg_path = hub.hf_hub_download(repo, "config.json", revision=revision, cache_dir=str(cache), token=token,
                                           endpoint=endpoint)
        commit = _commit_of(cfg_path)
        from catalog.schema import read_regular_file
        cfg = parse_config(read_regular_file(cfg_path, MAX_CONFIG, "a config.json", ACCEPTED), f"{repo}/config.json")
        rows, notes, files = [], [], []
        if offline:
            snapshot = Path(cfg_path).parent
            try:
                shards = _safetensors_files(snapshot)
            except CatalogError as exc:  # the index is cached but a shard is not
                shards, notes = [], [f"offline: {exc.problem.split(';')[0]}"]
            for f in shards:
                files.append(str(f))
                rows += [(n, d, math.prod(s), b) for n, (d, s, b) in safetensors_header(f)["tensors"].items()]
            if not shards and not notes:
                notes.append("offline: no safetensors file of this revision is in the cache; parameters from config.json")
            if unreachable:  # not asked offline: say why the cache was read
                notes.insert(0, f"the Hub could not be reached ({unreachable}): read from the local cache")
        else:
            api = hub.HfApi(endpoint=endpoint, token=token)
            if not hasattr(api, "get_safetensors_metadata"):
                notes.append(f"huggingface_hub {hub.__version__} cannot read safetensors headers (0.23 or later does); "
                             "parameters from config.json")
            else:
                try:
                    meta = api.get_safetensors_metadata(repo, revision=commit or revision)
                except (E["NotASafetensorsRepoError"], E["SafetensorsParsingError"]) as exc:
                    notes.append(f"no safetensors headers ({str(exc).splitlines()[0][:120]}); parameters from config.json")
                else:
                    for fname, fmeta in sorted(meta.files_metadata.items()):
                        files.append(fname)
                        rows += [(n, t.dtype, math.prod(t.shape), t.data_offsets[1] - t.data_offsets[0])
                                 for n, t in fmeta.tensors.items()]
    except CatalogError:
        raise
    except E["GatedRepoError"]:
        raise _hub_fail(hub_id, f"is gated on the Hugging Face Hub: accept its terms at {endpoint or 'https://huggingface.co'}"
                                f"/{repo} with your account, then set HF_TOKEN to a token of that account") from None
    except E["RevisionNotFoundError"]:
        raise _hub_fail(hub_id, f"has no revision {show(revision)}; accepted: a branch, tag or commit of {repo}") from None
    except E["RepositoryNotFoundError"]:
        raise _hub_fail(hub_id, "was not found on the Hugging Face Hub (a private repo looks the same): check the id, "
                                "or set HF_TOKEN to a token that can read it") from None
    except E["LocalEntryNotFoundError"]:
        raise _hub_fail(hub_id, f"could not be fetched and is not in the cache ({cache}): check the network or HF_ENDPOINT, "
                                "or set HF_HUB_OFFLINE=1 to use a cache that has it") from None
    except E["EntryNotFoundError"]:
        raise _hub_fail(hub_id, f"has no config.json at {where}: the planner reads transformers models; give a GGUF or "
                                "safetensors checkpoint with --model-file") from None
    except (E["OfflineModeIsEnabled"], E["HfHubHTTPError"], E["HFValidationError"], OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise _hub_fail(hub_id, f"could not be read from the Hugging Face Hub ({first}): check the network or HF_ENDPOINT, "
                                "or set HF_HUB_OFFLINE=1 to use the local cache") from None
    if model_id is None:
        model_id = re.sub(r"[^a-z0-9.\-]+", "-", repo.lower()).strip("-.")[:64].strip("-.")
    if rows:
        record, info = _record_from_rows(cfg, f"{repo}/config.json", rows, files, model_id, fmt="hub")
    else:
        record = model_from_config(cfg, f"{repo}/config.json", model_id)
        info = {"format": "hub", "files": files, "params_config": int(record["params"]), "weights_source": "config",
                "notes": []}
    record["source"] = f"Hugging Face Hub {repo}@{commit or revision or 'main'}"
    info.update(hub_id=repo, revision=revision, commit=commit, offline=offline)
    info["notes"] = notes + info["notes"]
    return record, info


def hub_models(model_ids: list[str], models):
    """sweep --models with ORG/NAME[@REV] ids among catalog ids: each Hub id resolved (model_from_hub)
    and added to the models table. -> (ids as the table has them, the table, {id: source})."""
    import pandas as pd
    ids, records = [], []
    for item in model_ids:
        if is_hub_id(item):
            record, _info = model_from_hub(item)
            records.append(record)
            ids.append(record["id"])
        else:
            ids.append(item)
    if not records:
        return model_ids, models, {}
    new = pd.DataFrame(records)
    models = pd.concat([models[~models["id"].isin(new["id"])], new], ignore_index=True)
    return list(dict.fromkeys(ids)), models, {r["id"]: r["source"] for r in records}


def hub_workloads(text: str | None, models):
    """budget --workloads with ORG/NAME[@REV]:workload items: the Hub models resolved and added,
    their items renamed to the records' ids. -> (workloads text, models table)."""
    if text is None or "/" not in str(text):
        return text, models
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    hub_ids = [item.partition(":")[0] for item in items if is_hub_id(item.partition(":")[0])]
    ids, models, _sources = hub_models(hub_ids, models)
    renamed = dict(zip(hub_ids, ids))
    out = [renamed.get(item.partition(":")[0], item.partition(":")[0]) + "".join(item.partition(":")[1:]) for item in items]
    return ",".join(out), models
