"""Serving use cases over engine/serving.py: one configuration (the `serve` command), the
concurrency x context curve per card, and the cheapest configuration for a target.

Thin: the physics and every engine default live in engine/serving.py; this module builds the
request frames (whole grids at once, one vectorized `serve` call) and picks rows.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

import engine.constants as C
from engine.serving import (
    CONTEXT_FROM_MODEL_ENGINES,
    CONTEXT_REQUIRED_ENGINES,
    DEFAULT_BACKEND,
    EXL_ENGINES,
    EXL_FILES,
    EXL3_DEFAULT_CACHE_TOKENS,
    FIT_MARGIN_BYTES,
    LLAMA_FIT_CTX_ALIGN,
    LLAMA_FIT_MIN_CTX,
    OTHER_MAX_NUM_SEQS,
    ENGINES,
    GGUF_ENGINES,
    HF_FUSED_EXPERTS_16BIT,
    MLX_BITS,
    MLX_ENGINES,
    MLX_QUANTIZED,
    MOE_EXPERT_EFFICIENCY,
    SGLANG_MAMBA_FULL_MEMORY_RATIO,
    TP_SHARD_ENGINES,
    TORCH_DTYPE,
    TP_SPLIT_ENGINES,
    VLLM_BNB_WEIGHTS,
    VLLM_CUDAGRAPH_LOGGED_GIB,
    VLLM_CUDAGRAPH_PROFILE_FROM,
    devices_refused,
    apple_gpu_share,
    formats_refused,
    kv_refused,
    ollama_default_context,
    serve,
    tensor_parallel_accepted,
    vllm_has_bitsandbytes,
    vllm_version,
)

# llama.cpp's backends whose expert kernels have a fitted share of the dense bandwidth (a family's own backend)
MOE_SHARE_BY_BACKEND = {DEFAULT_BACKEND[family]: v for (kind, family), v in MOE_EXPERT_EFFICIENCY.items() if kind == "gguf"}

CUDAGRAPH_NOTE = (f"; from {VLLM_CUDAGRAPH_PROFILE_FROM[0]}.{VLLM_CUDAGRAPH_PROFILE_FROM[1]} on, vLLM also takes its CUDA "
                   f"graphs' estimated memory out of the KV budget ({VLLM_CUDAGRAPH_LOGGED_GIB[0]:g} to "
                   f"{VLLM_CUDAGRAPH_LOGGED_GIB[1]:g} GiB in published start-up logs, not modelled): the KV cache "
                   "can be that much smaller (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 turns it off)")


def takes_cudagraphs(engine_version) -> bool:
    """Does this vLLM version take its CUDA graphs' estimated memory out of the KV budget (the current
    defaults do: engine/serving.py VLLM_CUDAGRAPH_PROFILE_FROM)."""
    text = "" if engine_version is None or engine_version == "current" else str(engine_version)
    major, minor = vllm_version([text])
    if np.isnan(major[0]):
        return True  # the current defaults
    return (major[0], minor[0]) >= VLLM_CUDAGRAPH_PROFILE_FROM

# `serve --json` keys: a contract (add, never rename); tests/test_serving.py checks them.
SERVE_JSON_KEYS = (
    "model", "gpu", "gpus", "engine", "precision", "kv_precision", "max_model_len", "gpu_memory_utilization",
    "max_num_seqs", "usable_bytes", "budget_bytes", "weights_bytes", "weights_gpu_bytes", "activation_peak_bytes",
    "non_torch_bytes", "compute_buffer_bytes", "kv_bytes_per_token", "kv_cache_bytes_available", "num_gpu_blocks",
    "max_concurrency", "gpu_layers", "total_layers", "gpu_memory_used_bytes", "host_ram_bytes", "fits",
    "concurrency", "prompt_tokens", "output_tokens", "decode_tokens_per_s", "time_per_output_token_ms",
    "prefill_tokens_per_s", "ttft_s", "aggregate_tokens_per_s", "usd_per_million_tokens", "cloud_usd_per_hour",
    "price_source", "price_date", "command", "kv_policy",
    # issue 15: MoE (total vs active parameters, llama.cpp's routed experts in host RAM)
    "params", "active_params", "moe_layers", "expert_bytes", "cpu_moe_layers", "expert_host_bytes",
    "host_bandwidth_gbps",
    # issue 27: vLLM by version (the profile run's tokens: V0 without chunked prefill profiles a
    # whole max_model_len prompt) and a draft model for speculative decoding (issue 25)
    "engine_version", "engine_generation", "profile_tokens", "chunked_prefill",
    "draft_model", "draft_weights_bytes", "draft_kv_bytes_per_token", "draft_kv_cache_bytes",
    "draft_tensor_parallel_size", "draft_context",
    # issue 27: what the speed figures rest on (fitted on published runs, or an assumption)
    "speed_basis", "backend",
    # vLLM's hybrid KV cache manager (0.10 on): the tokens a request holds in each sliding-window layer
    # (its window - 1 + max_num_batched_tokens, at most max_model_len); null where every layer holds the context
    "kv_window_tokens",
    # SGLang from 0.5.3: the MiB its mem_fraction_static default keeps outside the fraction (activations, CUDA
    # graphs), in bytes; null where the fraction was given or the version reads it from the tensor-parallel size
    "engine_reserved_bytes",
    # memory other processes hold on each GPU (serve --gpu-memory-in-use, bytes), and whether vLLM / MLC-LLM then
    # refuse to start (they ask for their share of the card's total, more than is free)
    "gpu_memory_in_use_bytes", "refused_at_start",
    # vLLM's --kv-cache-memory-bytes as asked (null when vLLM sizes the KV cache itself)
    "kv_cache_memory_bytes",
    # hybrid linear-attention models (Qwen3-Next, Qwen3.5): vLLM's attention block in tokens, raised so that an
    # attention page holds a Gated DeltaNet layer's state (null elsewhere: 16); the layers with a state per sequence
    "kv_block_tokens", "linear_attention_layers",
    # Mamba2 hybrids (Granite 4.0-H, Nemotron-H, Bamba, Falcon-H1): the Mamba2 layers, which keep a state per sequence as
    # well, and the layers with attention, which keep K/V (Falcon-H1: every layer, beside its Mamba2 mixer)
    "mamba_layers", "attention_layers",
    # the KV cache the engine sets aside itself, per GPU (kv_cache_bytes_available is what is left for it, the same for
    # every engine): vLLM / SGLang / MLC-LLM their whole budget, llama.cpp / Ollama -c tokens on the GPU layers,
    # ExLlamaV2 its cache of max_num_seqs x max_model_len, ExLlamaV3 its pool of that many tokens in 256-token pages; null for transformers (its cache grows with each sequence)
    "kv_cache_bytes_allocated",
    # the cloud price's source and date (as price_source / price_date here) under estimate's and budget's names for them
    "cloud_source", "cloud_date",
    # serve without --max-model-len (the engine's own context): whether the engine's default was taken, and what it
    # is ("--max-model-len" where it was given); added by the CLI
    "max_model_len_default", "max_model_len_source",
    # what a --model-file / Hub checkpoint's headers hold beside the engine's weights (docs/models.md), null for a catalog
    # model or --model-config: one key set for every model; added by the CLI
    "checkpoint",
    # a vLLM / SGLang plan that holds no request: [{gpus, precision, max_concurrency, max_model_len}] per weight format,
    # the fewest GPUs that hold one, then the longest max_model_len on the GPUs asked (fits_with; [] where it fits as
    # asked or the engine splits layers); added by the CLI
    "fits_with",
    # the memory in use over all the GPUs (gpu_memory_used_bytes is per GPU, the most loaded one's: llama.cpp places whole
    # layers, so its GPUs hold unequal shares)
    "gpu_memory_used_total_bytes",
    # llama.cpp: each GPU's -ngl slots where --fit's layout is not the default one of those slots (the command's -ts,
    # "a,b,..."); null elsewhere
    "tensor_split",
)
CURVE_CONTEXTS = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
TP_CHOICES = (1, 2, 4, 8)


def files_named(info: dict | None, precision: str, engine: str, draft: tuple[str, dict] | None = None) -> dict:
    """The user's own files a command or an export names, from what `--model-file` read (catalog/checkpoints.py):
    'model_file' and 'mmproj_file' (a GGUF under llama.cpp or Ollama at its own precision; another --precision is a
    re-quantized file, which keeps the download's name), 'model_folder' (a safetensors checkpoint under vLLM or SGLang),
    'draft_file' (the --draft-model's GGUF, which llama-server's -md loads as it is). A config.json and a Hub model name
    none: there are no weights on disk to name. Paths as read, unquoted."""
    from pathlib import Path
    out: dict = {}
    if draft and (draft[1] or {}).get("format") == "gguf" and engine == "llama.cpp":
        out["draft_file"] = [f for f in draft[1]["files"] if f not in (draft[1].get("projector_files") or [])][0]
    files = (info or {}).get("files") or []
    fmt = (info or {}).get("format")
    if fmt == "gguf" and engine in ("llama.cpp", "ollama") and precision == info.get("precision") and files:
        mmproj = info.get("projector_files") or []
        out["model_file"] = [f for f in files if f not in mmproj][0]  # the first split part (llama.cpp loads the rest)
        if mmproj:
            out["mmproj_file"] = mmproj[0]
    elif fmt == "safetensors" and engine in ("vllm", "sglang") and files:
        out["model_folder"] = str(Path(files[0]).parent)
    if fmt == "gguf" and engine in ("llama.cpp", "ollama") and int((info or {}).get("gguf_extra_blocks") or 0) > 0:
        # blocks llama.cpp counts but never runs (GLM-4.5's nextn layer, catalog/checkpoints.py): -ngl / num_gpu name them
        # too, or they take GPU slots from the planned layers (-ngl 47 for GLM-4.5-Air left its first layer on the CPU)
        out["extra_blocks"] = int(info["gguf_extra_blocks"])
    return out


def gpu_layers_flag(layers: int, extra_blocks: int) -> int:
    """llama.cpp's -ngl (Ollama's num_gpu) for `layers` planned slots (the output layer and the top layers) of a GGUF
    holding `extra_blocks` blocks it does not run (files_named): those sit above the repeating layers, so they are added
    wherever anything is on the GPU."""
    return int(layers) + int(extra_blocks) if int(layers) > 0 else 0


def ollama_from(path: str) -> str | None:
    """A Modelfile's FROM path for a file of the user's (absolute, or relative from ./), or None where the path holds a
    quote or a line break (the Modelfile is written by echo '...'; the download's name stays)."""
    from pathlib import Path
    if any(c in path for c in "'\"\n"):
        return None
    return path if Path(path).is_absolute() else f"./{path}"


def command_with_files(command: str, info: dict | None, model_id: str, precision: str, engine: str,
                       draft: tuple[str, dict] | None = None) -> str:
    """The command line with the files the model was read from (`--model-file`; files_named) in place of the names
    engine/serving.py gives a catalog model's download (MODEL-PRECISION.gguf, mmproj-MODEL-f16.gguf, the model id as
    vLLM's and SGLang's model path)."""
    return command_naming(command, files_named(info, precision, engine, draft), model_id, precision, engine,
                          draft[0] if draft else None)


def command_naming(command: str, named: dict, model_id: str, precision: str, engine: str,
                   draft_id: str | None = None) -> str:
    """command_with_files for files_named's answer already at hand (`serve` names the same files in its export)."""
    import shlex
    if "draft_file" in named:
        command = command.replace(f" -md {draft_id}-{precision.upper()}.gguf", f" -md {shlex.quote(named['draft_file'])}")
    if named.get("extra_blocks"):
        import re
        add = named["extra_blocks"]
        command = re.sub(r"(?<= -ngl )(\d+)\b", lambda m: str(gpu_layers_flag(int(m.group(1)), add)), command, count=1)
        command = re.sub(r'(?<="num_gpu": )(\d+)\b', lambda m: str(gpu_layers_flag(int(m.group(1)), add)), command, count=1)
    placeholder = f"{model_id}-{precision.upper()}.gguf"
    if "model_file" in named and engine == "ollama":  # a Modelfile's FROM line inside echo '...'
        path = ollama_from(named["model_file"])
        return command.replace(f"./{placeholder}", path) if path else command
    if "model_file" in named:
        command = command.replace(placeholder, shlex.quote(named["model_file"]))
    if "mmproj_file" in named:
        command = command.replace(f"mmproj-{model_id}-f16.gguf", shlex.quote(named["mmproj_file"]))
    if "model_folder" in named:
        folder = shlex.quote(named["model_folder"])
        command = command.replace(f"vllm serve {model_id} ", f"vllm serve {folder} ", 1).replace(
            f"--model-path {model_id} ", f"--model-path {folder} ", 1)
    return command


def serve_one(request: dict, models: pd.DataFrame, gpus: pd.DataFrame) -> pd.Series:
    """One serving configuration: the row of engine.serving.serve."""
    return serve(pd.DataFrame([request]), models, gpus).iloc[0]


def capacity_curve(model: str, gpu_ids, engine: str, precision: str, models: pd.DataFrame, gpus: pd.DataFrame,
                   contexts=CURVE_CONTEXTS, gpu_count: int = 1, **settings) -> pd.DataFrame:
    """Max concurrent requests against context length for each card (one vectorized call),
    `gpu_count` GPUs per replica. Contexts beyond the model's own are kept: the curve shows what
    memory allows."""
    grid = pd.MultiIndex.from_product([list(gpu_ids), list(contexts)], names=["gpu", "max_model_len"]).to_frame(index=False)
    grid = grid.assign(model=model, engine=engine, precision=precision, gpus=int(gpu_count), **settings)
    out = serve(grid, models, gpus)
    return out[["gpu", "max_model_len", "max_concurrency", "kv_cache_bytes_available", "gpu_layers", "fits",
                "decode_tokens_per_s", "cpu_moe_layers", "expert_host_bytes", "host_ram_bytes", "refused_at_start"]]


def check_model_len(model_id, max_model_len: int, models: pd.DataFrame, allow_long_context: bool = False) -> None:
    """A max-model-len beyond the model's context (the catalog's max_context): refused as estimate refuses such a
    seq (engine/scenarios.py), and as vLLM and SGLang refuse to start (engine/serving.py LONG_CONTEXT_ENV), unless
    allowed (--allow-long-context; on the dashboard the sidebar's switch). ValueError names the length and the
    model's context. `serve` and the Serving page's target search both ask it."""
    context = pd.to_numeric(models.set_index("id").at[model_id, "max_context"], errors="coerce")
    if allow_long_context or pd.isna(context) or context <= 0 or max_model_len <= context:
        return
    raise ValueError(f"max-model-len {max_model_len:,} is longer than {model_id}'s context of {int(context):,} tokens; "
                     f"accepted: 1 to {int(context):,} (or allow it explicitly with --allow-long-context)")


ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "exllamav2": "ExLlamaV2", "mlc-llm": "MLC-LLM"}
# each engine's flag for the context, as its command names it (engine/serving.py _engine_command_lines): left out of the
# command where the engine reads the model's context itself (CONTEXT_FROM_MODEL_ENGINES)
CONTEXT_FLAGS = {"vllm": " --max-model-len {n}", "sglang": " --context-length {n}", "exllamav2": " -l {n}",
                 "mlc-llm": ";context_window_size={n}"}


def default_model_len(request: dict, models: pd.DataFrame, gpus: pd.DataFrame) -> tuple[int, str]:
    """The max-model-len an engine takes when its context flag is left out (engine/serving.py's block "Each engine's own
    context"), for `serve` without --max-model-len: (tokens, why, in words). ValueError for transformers / mlx-lm (no
    cache of their own: the length is the user's to give) and where the model's context is not known."""
    engine = request["engine"]
    if engine in CONTEXT_REQUIRED_ENGINES:
        raise ValueError(f"--max-model-len is required with --engine {engine}: {CONTEXT_REQUIRED_ENGINES[engine]}, so "
                         "there is no engine default to plan with; accepted: --max-model-len N (tokens per request)")
    seqs = request.get("max_num_seqs")
    seqs = int(seqs) if seqs is not None and pd.notna(seqs) else OTHER_MAX_NUM_SEQS
    if engine == "exllamav3":  # its -cs pool, shared by the sequences: each one's whole pages of it
        per_seq = EXL3_DEFAULT_CACHE_TOKENS // max(seqs, 1) // LLAMA_FIT_CTX_ALIGN * LLAMA_FIT_CTX_ALIGN
        if per_seq < 1:
            raise ValueError(f"max-num-seqs {seqs} leaves less than a 256-token page of ExLlamaV3's default -cs "
                             f"{EXL3_DEFAULT_CACHE_TOKENS:,} per sequence; accepted: --max-model-len N, or --max-num-seqs "
                             f"up to {EXL3_DEFAULT_CACHE_TOKENS // 256}")
        share = f" / --max-num-seqs {seqs}, in whole 256-token pages" if seqs > 1 else ""
        return per_seq, (f"ExLlamaV3's default: examples/chat.py's -cs {EXL3_DEFAULT_CACHE_TOKENS:,}-token cache pool"
                         f"{share}, whatever the model's context")
    context = pd.to_numeric(models.set_index("id").at[request["model"], "max_context"], errors="coerce")
    if pd.isna(context) or context <= 0:
        raise ValueError(f"the context of {request['model']} is not known (no max_position_embeddings), and --engine "
                         f"{engine} takes it from the model when --max-model-len is left out; accepted: --max-model-len N")
    context = int(context)
    if engine in CONTEXT_FROM_MODEL_ENGINES:
        return context, (f"{ENGINE_NAMES[engine]}'s default, the model's context (config.json max_position_embeddings); "
                         "the command leaves the flag out, as the engine derives it itself")
    row = gpus.set_index("id").loc[request["gpu"]]
    unified = bool(row.get("unified_memory")) if pd.notna(row.get("unified_memory")) else False
    card = (float(row["memory_gb"]) * C.GIB * float(apple_gpu_share(row["memory_gb"])) if unified
            else float(row["usable_memory_bytes"]))
    if engine == "ollama":
        return ollama_default_context(card * int(request.get("gpus", 1) or 1), context)
    return _llama_fit_context(request, models, gpus, context)


def _llama_fit_context(request: dict, models: pd.DataFrame, gpus: pd.DataFrame, trained: int) -> tuple[int, str]:
    """llama.cpp's context without -c (engine/serving.py LLAMA_FIT_MIN_CTX's note): the trained context where the model
    fits with --fit's margin free, else the longest multiple of 256 tokens from fit_params_min_ctx up that does (its
    step 2), else the minimum, where --fit then lowers the GPU layers (step 3). "Fits": every layer asked on the GPUs
    (all of them under --gpu-layers auto) and FIT_MARGIN_BYTES free beside them on each GPU, counted over all the GPUs as
    --fit's step 2 does (`global_surplus`, the free memory less the use less every device's margin); on several GPUs the
    shorter context it picks also keeps back (GPUs + 1) x half a layer's weights (a sixth for MoE) for whole layers'
    waste (`sum_used_target -= (nd + 1) * model_per_layer / (hp_nex == 0 ? 2 : 6)`), and does not stop there: its step
    3 then places the layers GPU by GPU (engine/serving.py _llama_split_fit)."""
    if trained <= LLAMA_FIT_MIN_CTX:
        return trained, (f"llama.cpp's default (-c 0): the model's trained context ({trained:,}), at or below --fit's "
                         f"minimum of {LLAMA_FIT_MIN_CTX:,}, which it keeps")
    step = LLAMA_FIT_CTX_ALIGN * max(1, -(-trained // (LLAMA_FIT_CTX_ALIGN * MODEL_LEN_CANDIDATES)))
    lengths = np.unique(np.r_[np.arange(LLAMA_FIT_MIN_CTX, trained, step), trained]).astype(int)
    layers = request.get("gpu_layers", -1)
    all_layers = layers is None or int(layers) < 0

    model = models.set_index("id").loc[request["model"]]
    moe = pd.notna(model.get("num_experts")) and float(model.get("num_experts") or 0) > 0
    n_layer = float(model["num_layers"])

    def fitting(lengths: np.ndarray, reduced: bool = True) -> np.ndarray:
        rows = pd.DataFrame([{**request, "max_model_len": int(n), **({"gpu_layers": 10**6} if all_layers else {})}
                             for n in lengths])
        out = serve(rows, models, gpus)
        nd = out["gpus"]
        free = (out["usable_bytes"] - out["gpu_memory_in_use_bytes"]) * nd
        need = out["gpu_memory_used_total_bytes"] + FIT_MARGIN_BYTES * nd  # step 2 sums the devices' use
        if reduced:  # step 2's target on several GPUs (the docstring): the model's GPU bytes per layer, (nd + 1) / 2 (/ 6)
            per_layer = out["weights_gpu_bytes"] * nd / (n_layer if all_layers else max(min(int(layers), n_layer), 1))
            need = need + np.where(nd > 1, (nd + 1) * per_layer / (6 if moe else 2), 0.0)
        return (need <= free).to_numpy().copy()
    ok = fitting(lengths)
    if int(request.get("gpus", 1) or 1) > 1:  # the trained context: no reduction, so no waste kept back
        ok[-1] = fitting(lengths[-1:], reduced=False)[0]
    if step > LLAMA_FIT_CTX_ALIGN and ok.any() and not ok[-1]:  # a context of millions: the last coarse step in 256s
        last = int(lengths[np.flatnonzero(ok)[-1]])
        finer = np.arange(last + LLAMA_FIT_CTX_ALIGN, min(last + step, trained), LLAMA_FIT_CTX_ALIGN)
        if len(finer):
            lengths, ok = np.r_[lengths, finer], np.r_[ok, fitting(finer)]
            order = np.argsort(lengths)
            lengths, ok = lengths[order], ok[order]
    which = "every layer" if all_layers else f"-ngl {int(layers)}"
    n_gpus = int(request.get("gpus", 1) or 1)
    each = f" on each of the {n_gpus} GPUs" if n_gpus > 1 else ""
    if ok[-1]:
        return trained, (f"llama.cpp's default (-c 0): the model's trained context, which fits with {which} on the "
                         f"GPU{'s' if n_gpus > 1 else ''} and --fit's {FIT_MARGIN_BYTES / C.GIB:g} GiB margin free{each}")
    if ok.any():
        best = int(lengths[np.flatnonzero(ok)[-1]])
        return best, (f"llama.cpp's --fit (-c 0): the trained {trained:,} does not fit, so it lowers the context to the "
                      f"longest that keeps {which} on the GPU{'s' if n_gpus > 1 else ''} and "
                      f"{FIT_MARGIN_BYTES / C.GIB:g} GiB free{each} (multiples of "
                      f"{LLAMA_FIT_CTX_ALIGN}, at least {LLAMA_FIT_MIN_CTX:,}"
                      + (f"; and (GPUs + 1) x {'a sixth' if moe else 'half'} of a layer's weights kept back for whole "
                         "layers per GPU" if n_gpus > 1 else "") + ")"
                      + (" before it lowers any layer" if all_layers and n_gpus == 1 else "")
                      + (", then places the layers GPU by GPU" if n_gpus > 1 else ""))
    return LLAMA_FIT_MIN_CTX, (f"llama.cpp's --fit (-c 0): the trained {trained:,} does not fit even at its minimum, "
                               f"so the context is fit_params_min_ctx {LLAMA_FIT_MIN_CTX:,}"
                               + (" and --fit lowers the GPU layers (-ngl)" if all_layers
                                  else "; with -ngl given, --fit stops there (n_gpu_layers set by the user)"))


def command_without_context(command: str, engine: str, length: int) -> str:
    """The launch command without the context flag, for an engine that reads the model's context itself
    (CONTEXT_FROM_MODEL_ENGINES): `serve` without --max-model-len runs it as the user would, flag left out."""
    flag = CONTEXT_FLAGS.get(engine)
    return command.replace(flag.format(n=int(length)), "", 1) if flag else command


def cheapest(model: str, users: int, context: int, tokens_per_s_per_user: float, ttft_s: float,
             models: pd.DataFrame, gpus: pd.DataFrame, engines=("vllm",), precisions=("bf16",),
             gpu_ids=None, tp_choices=TP_CHOICES, **settings) -> pd.DataFrame:
    """Every card x GPU count x engine x precision that serves `users` concurrent requests of
    `context` tokens at >= tokens/s per user and <= TTFT, cheapest first ($/hour to rent).
    Cards without a cloud price are ranked after the priced ones."""
    gpu_ids = list(gpus["id"]) if gpu_ids is None else list(gpu_ids)
    grid = pd.MultiIndex.from_product([gpu_ids, list(tp_choices), list(engines), list(precisions)],
                                      names=["gpu", "gpus", "engine", "precision"]).to_frame(index=False)
    gguf = grid["precision"].isin(tuple(C.GGUF_BITS))
    grid = grid[gguf == grid["engine"].isin(GGUF_ENGINES)].reset_index(drop=True)  # GGUF <-> llama.cpp/Ollama
    # each ExLlama engine runs its own formats only (engine/serving.py EXL_FILES: exl2-B and GPTQ int4 for ExLlamaV2,
    # exl3-B for ExLlamaV3), and exl2-B / exl3-B run nowhere else
    for engine, (_prefix, bits_of, _range, others, _takes, _example) in EXL_FILES.items():
        own = grid["engine"] == engine
        own_format = ~np.isnan(bits_of(grid["precision"])) | (grid["precision"].isin(others) & own)
        grid = grid[own == own_format].reset_index(drop=True)
    # mlx-lm runs its own formats only (engine/serving.py MLX_BITS: mlx-4bit ..., bf16, fp16), and those run nowhere else
    mlx = grid["engine"].isin(MLX_ENGINES)
    grid = grid[np.where(mlx, grid["precision"].isin(tuple(MLX_BITS)), ~grid["precision"].isin(MLX_QUANTIZED))]
    grid = grid.reset_index(drop=True)
    # vLLM / SGLang start only where tensor parallelism splits the heads evenly (engine/serving.py)
    arch = models.set_index("id").loc[model]
    tp_split = grid["engine"].isin(TP_SPLIT_ENGINES + TP_SHARD_ENGINES)
    grid = grid[~tp_split | tensor_parallel_accepted(arch["num_heads"], arch["num_kv_heads"], grid["gpus"], grid["engine"])]
    # fp8 / mxfp4 / nvfp4 only on the engines and cards that run them: a card the format does not run on is left
    # out of the search, not a reason to refuse it (serve() refuses such a request asked alone)
    grid = grid.reset_index(drop=True)
    grid = grid[~formats_refused(grid, gpus)]
    # likewise an engine the card does not run (ExLlamaV2 off CUDA / ROCm, ExLlamaV3 off NVIDIA Ampere+) and several of a card that is one device
    # (an Apple Mac): left out of the search (serve() refuses them asked alone)
    grid = grid.reset_index(drop=True)
    grid = grid[~devices_refused(grid, gpus)]
    grid = grid.reset_index(drop=True).assign(model=model, max_model_len=int(context), concurrency=float(users),
                       max_num_seqs=np.where(grid["engine"].isin(GGUF_ENGINES), float(users), np.nan), **settings)
    # a KV cache type an engine does not have (vLLM / SGLang: no int8 or int4 cache) leaves that engine out, as a
    # format does: the other engines of the search still answer (serve() refuses such a request asked alone)
    if "kv_precision" in grid:
        grid = grid[~kv_refused(grid)].reset_index(drop=True)
    if grid.empty:
        return grid
    out = serve(grid, models, gpus)
    ok = ((out["max_concurrency"] >= users) & (out["decode_tokens_per_s"] >= tokens_per_s_per_user)
          & (out["ttft_s"] <= ttft_s) & out["fits"].astype(bool))
    if out["engine"].isin(GGUF_ENGINES).any():  # llama.cpp: every layer on the GPUs
        ok &= ~out["engine"].isin(GGUF_ENGINES) | (out["gpu_layers"] > out["total_layers"])
    out = out[ok].assign(usd_per_hour=lambda f: f["cloud_usd_per_hour"] * f["gpus"])
    return out.sort_values(["usd_per_hour", "gpus"], na_position="last").reset_index(drop=True)


# The weight formats a "does not fit" line tries for vLLM / SGLang, smallest last: 8-bit FP8 and 4-bit
# AWQ / GPTQ checkpoints, each where it is smaller than the format asked and the engine and card take it.
SMALLER_FORMATS = ("fp8", "int4")

def default_precision(models: pd.DataFrame, model_id, engine: str, gpus: pd.DataFrame | None = None,
                      gpu: str | None = None, gpu_count: int = 1) -> str:
    """serve's weights when none is asked: the format the model's published checkpoint stores (catalog
    stored_precision: gpt-oss's MXFP4, DeepSeek V3's FP8; an MXFP4 checkpoint's GGUF under llama.cpp / Ollama is
    ggml-org's MXFP4 MoE type, mxfp4_moe, the one llama.cpp's gpt-oss guide and Ollama's gpt-oss load) where the
    engine, and the card when given, take it, as `vllm serve openai/gpt-oss-120b` loads it; else the engine's own
    (q4_k_m for llama.cpp / Ollama, exl2-4.0, exl3-4.0, q4f16_1, mlx-4bit (mlx_lm.convert -q's default), bf16: fp16 on a card without bf16, what vLLM's dtype 'auto'
    picks there, engine/serving.py NO_BF16_ARCHITECTURES). The command line's and the Serving page's default."""
    from engine.serving import GGUF_PRECISION_ALIASES, NO_BF16_ARCHITECTURES, engine_takes_precision
    default = "q4_k_m" if engine in GGUF_ENGINES else {"exllamav2": "exl2-4.0", "exllamav3": "exl3-4.0", "mlc-llm": "q4f16_1",
                                                                "mlx-lm": "mlx-4bit"}.get(engine, "bf16")
    arch = ""
    if gpus is not None and gpu is not None and "architecture" in gpus and gpu in set(gpus["id"]):
        arch = str(gpus.set_index("id")["architecture"].get(gpu, "")).lower()
    if default == "bf16" and arch in NO_BF16_ARCHITECTURES:
        default = "fp16"
    stored = stored_precision(models, model_id)
    if stored is None:
        return default
    if engine in GGUF_ENGINES:
        if stored in C.GGUF_16BIT:
            return default  # a 16-bit checkpoint is not the GGUF llama.cpp loads (a 16-bit GGUF file names its own type)
        stored = GGUF_PRECISION_ALIASES.get(stored, stored)  # (an MXFP4 checkpoint: the MXFP4_MOE file type)
    if not engine_takes_precision(engine, stored):
        return default
    if gpus is not None and gpu is not None and formats_refused(
            pd.DataFrame([{"engine": engine, "precision": stored, "gpu": gpu, "gpus": gpu_count}]), gpus)[0]:
        return default
    return stored


# the longest --max-model-len `fits_with` offers: a multiple of this many tokens (vLLM's own estimate on failure,
# kv_cache_utils.py estimate_max_model_len, searches single tokens; a round figure is what users pass)
MODEL_LEN_STEP = 256
MODEL_LEN_CANDIDATES = 4096  # at most this many lengths tried in one serve() call (the step grows past it)


def longest_model_len(request: dict, models: pd.DataFrame, gpus: pd.DataFrame) -> tuple[int, float] | None:
    """The longest max-model-len (a multiple of MODEL_LEN_STEP, below the one asked) at which one request fits with
    the request's GPUs, format and other settings, and its max_concurrency there; None where none does."""
    asked = int(request["max_model_len"])
    step = MODEL_LEN_STEP * max(1, -(-asked // (MODEL_LEN_STEP * MODEL_LEN_CANDIDATES)))
    lengths = np.arange(step, asked, step)
    if not len(lengths):
        return None
    try:
        out = serve(pd.DataFrame([{**request, "max_model_len": int(n)} for n in lengths]), models, gpus)
    except ValueError:
        return None
    ok = (out["fits"].astype(bool) & (out["max_concurrency"] >= 1)).to_numpy()
    if not ok.any():
        return None
    last = int(np.flatnonzero(ok)[-1])
    return int(lengths[last]), float(out["max_concurrency"].iloc[last])


def largest_utilization(usable_bytes: float, in_use_bytes: float) -> float:
    """The largest --gpu-memory-utilization (in hundredths) vLLM / MLC-LLM start with where other processes hold
    `in_use_bytes` of a card of `usable_bytes`: what they ask (that share of the total) must be free."""
    return float(np.floor(max(usable_bytes - in_use_bytes, 0.0) / usable_bytes * 100) / 100)


def fits_with(request: dict, models: pd.DataFrame, gpus: pd.DataFrame, tp_choices=TP_CHOICES,
              asked: pd.Series | None = None) -> pd.DataFrame:
    """For a vLLM / SGLang request: per weight format (the one asked, then SMALLER_FORMATS), the fewest GPUs
    (tensor-parallel sizes the engine takes for the model) on which one request of its max-model-len fits, with
    the request's other settings; then, on the GPUs and format asked, the longest max-model-len that holds one
    request (longest_model_len). Columns: precision, gpus, max_model_len, max_concurrency (empty where none fits
    or the engine splits layers instead). A format or count the engine or card refuses is skipped, never raised.
    asked: the request's own row (serve_one) where the caller has it; served here where it is needed and not given."""
    empty = pd.DataFrame(columns=["precision", "gpus", "max_model_len", "max_concurrency", "gpu_memory_utilization"])
    if request.get("engine") not in TP_SPLIT_ENGINES or request.get("model") not in set(models["id"]):
        return empty
    found = []
    if float(request.get("gpu_memory_in_use_gib") or 0) > 0:  # vLLM may refuse to start: the largest share it takes
        if asked is None:
            try:
                asked = serve_one(request, models, gpus)
            except ValueError:
                asked = None
        if asked is not None and bool(asked["refused_at_start"]):
            share = largest_utilization(asked["usable_bytes"], asked["gpu_memory_in_use_bytes"])
            lower = serve(pd.DataFrame([{**request, "gpu_memory_utilization": share}]), models, gpus).iloc[0] if share > 0 else None
            if lower is not None and bool(lower["fits"]) and lower["max_concurrency"] >= 1:
                found.append({"precision": request["precision"], "gpus": int(request.get("gpus", 1)),
                              "max_model_len": int(request["max_model_len"]), "max_concurrency": float(lower["max_concurrency"]),
                              "gpu_memory_utilization": share})
    bits = C.LINEAR_BITS.get(str(request.get("precision")), np.inf)
    formats = [request["precision"]] + [f for f in SMALLER_FORMATS if C.LINEAR_BITS[f] < bits]
    # the format the model's published checkpoint stores (catalog stored_precision: gpt-oss's MXFP4), where smaller
    stored = stored_precision(models, request["model"])
    if stored is not None and stored not in formats and C.LINEAR_BITS.get(stored, np.inf) < bits:
        formats.insert(1, stored)
    arch = models.set_index("id").loc[request["model"]]
    counts = [k for k in tp_choices if bool(tensor_parallel_accepted(arch["num_heads"], arch["num_kv_heads"], k))]
    for fmt in formats:
        rows = pd.DataFrame([{**request, "precision": fmt, "gpus": k} for k in counts])
        rows = rows[~devices_refused(rows, gpus)]  # (one Apple device: its other counts are refused, not the format)
        if rows.empty:
            continue
        try:
            out = serve(rows, models, gpus)
        except ValueError:  # a format this engine or card does not take
            continue
        ok = out["fits"].astype(bool) & (out["max_concurrency"] >= 1)
        if ok.any():
            first = out[ok].sort_values("gpus").iloc[0]
            found.append({"precision": fmt, "gpus": int(first["gpus"]), "max_model_len": int(request["max_model_len"]),
                          "max_concurrency": float(first["max_concurrency"])})
    shorter = longest_model_len(request, models, gpus)
    if shorter is not None:
        found.append({"precision": request["precision"], "gpus": int(request.get("gpus", 1)), "max_model_len": shorter[0],
                      "max_concurrency": shorter[1]})
    return pd.DataFrame(found, columns=empty.columns)


def format_fits_with(options: pd.DataFrame, asked: str, asked_len: int | None = None, asked_gpus: int | None = None) -> str:
    """`fits_with`'s rows as the flags that change: '--gpus 8 (12.9 requests); --gpus 4 --precision fp8 (5.6);
    --max-model-len 5120 (1.0)'."""
    parts = []
    for _, r in options.iterrows():
        share = r.get("gpu_memory_utilization")
        if share is not None and pd.notna(share):  # the same plan at the largest share vLLM starts with
            parts.append(f"--gpu-memory-utilization {share:g} ({r['max_concurrency']:,.1f} requests at once)")
            continue
        shorter = asked_len is not None and int(r["max_model_len"]) < asked_len
        flags = ([] if shorter and asked_gpus is not None and int(r["gpus"]) == asked_gpus else [f"--gpus {int(r['gpus'])}"])
        flags += [f"--precision {r['precision']}"] if r["precision"] != asked else []
        flags += [f"--max-model-len {int(r['max_model_len'])}"] if shorter else []
        parts.append(" ".join(flags) + f" ({r['max_concurrency']:,.1f} requests at once)")
    return "; ".join(parts)


def _own_kv_cache(row: pd.Series) -> str:
    """', of which llama.cpp's -c takes ...': the KV cache llama.cpp / Ollama / ExLlamaV2 / V3 allocate themselves, beside what
    is left for it (vLLM, SGLang and MLC-LLM allocate all of it; transformers' cache grows)."""
    own = row.get("kv_cache_bytes_allocated")
    if own is None or pd.isna(own) or row["engine"] not in (*GGUF_ENGINES, *EXL_ENGINES):
        return ""
    if row["engine"] == "exllamav3":
        return (f" (ExLlamaV3's -cs pool of {int(row['max_num_seqs'])} x {int(row['max_model_len']):,} tokens in 256-token "
                f"pages: {own / 2**30:.2f} GiB)")
    if row["engine"] == "exllamav2":
        return (f" (ExLlamaV2's cache of {int(row['max_num_seqs'])} x {int(row['max_model_len']):,} tokens: "
                f"{own / 2**30:.2f} GiB)")
    return (f" ({row['engine']}'s -c {int(row['max_num_seqs'] * row['max_model_len']):,} tokens on the GPU layers: "
            f"{own / 2**30:.2f} GiB)")


def _kv_needed(row: pd.Series) -> float:
    """The KV cache a plan needs per GPU: one request of max_model_len (engine/serving.py kv_request_bytes), ExLlamaV2's
    whole cache of max_num_seqs of them (it allocates them all at load; ExLlamaV3 its pool likewise)."""
    one = row.get("kv_request_bytes")
    one = float(row["kv_bytes_per_token"] * row["max_model_len"]) if one is None or pd.isna(one) else float(one)
    return float(row["kv_cache_bytes_allocated"]) if row["engine"] in EXL_ENGINES else one


def _kv_is_what_does_not_fit(row: pd.Series) -> bool:
    """A plan that does not fit because its KV cache is larger than the room left for it (room there is: the weights
    and the activation peak alone fit), not because nothing is left."""
    room = float(row.get("kv_cache_bytes_available", 0.0) or 0.0)
    return (row["engine"] not in GGUF_ENGINES and room > 0 and not bool(row.get("refused_at_start", False))
            and _kv_needed(row) > room)


# the checkpoint formats of each weight precision vLLM and SGLang read from a checkpoint's quantization_config
CHECKPOINT_FORMATS = {"int4": "AWQ, GPTQ or compressed-tensors W4A16", "int8": "GPTQ 8-bit or compressed-tensors W8A8 / W8A16",
                      "nf4": "a bitsandbytes 4-bit checkpoint", "mxfp4": "MXFP4", "nvfp4": "compressed-tensors or ModelOpt NVFP4"}


def quantized_checkpoint_needed(row, stored) -> bool:
    """Whether a vLLM / SGLang plan's weights come from a checkpoint quantized to its precision, which the command's
    repository (the model's own) is not: a format read from the checkpoint's config (engine/serving.py TORCH_DTYPE's
    note), neither a dtype, nor fp8 or vLLM's in-flight bitsandbytes (quantized at load), nor the format the model
    is stored in (catalog stored_precision: gpt-oss's MXFP4, DeepSeek-V3's FP8)."""
    p = str(row["precision"])
    if row["engine"] not in ("vllm", "sglang") or p in TORCH_DTYPE or p == "fp8" or p == str(stored or ""):
        return False
    in_flight = (row["engine"] == "vllm" and p in VLLM_BNB_WEIGHTS
                 and bool(vllm_has_bitsandbytes([str(row.get("engine_version", "") or "")])[0]))
    return not in_flight


def stored_precision(models: pd.DataFrame, model_id) -> str | None:
    """The format the model's checkpoint is stored in (the catalog's stored_precision: gpt-oss's MXFP4, DeepSeek-V3's
    FP8; a file's or a config's), or None (16-bit, or not said)."""
    if "stored_precision" not in models or model_id not in set(models["id"]):
        return None
    stored = models.set_index("id")["stored_precision"].get(model_id)
    return stored if isinstance(stored, str) and stored else None


def checkpoint_advice(precision: str, stored, engine_words: str) -> str:
    """What to put in place of the command's repository where quantized_checkpoint_needed (the text report's line and
    the Serving page's caption say it alike)."""
    return (f"stored {'in ' + str(stored) if stored else 'in 16 bits'}; put a checkpoint of it quantized to {precision} "
            f"({CHECKPOINT_FORMATS.get(str(precision), 'its format')}) in its place, whose config {engine_words} reads "
            "the method from")


def format_serve(row: pd.Series, options: pd.DataFrame | None = None, repo: str | None = None,
                 stored: str | None | bool = False) -> str:
    """The serve command's text report; options: `fits_with`'s rows, said under a plan that holds no request; repo: the
    model's Hugging Face repository (the mlx-lm conversion line names it); stored: the model's catalog stored_precision
    (None: 16-bit), for the line that says a quantized checkpoint must replace the command's repository, False (a model
    read from the user's own files, or not known) leaving that line out."""
    gib = 2**30
    lines = [
        f"{row['model']} on {int(row['gpus'])} x {row['gpu']} with {row['engine']} ({row['precision']}, "
        f"max-model-len {int(row['max_model_len']):,})",
        f"  memory per GPU (GiB): usable {row['usable_bytes'] / gib:.2f}, budget {row['budget_bytes'] / gib:.2f}, "
        f"weights {row['weights_gpu_bytes'] / gib:.2f}, activation peak {row['activation_peak_bytes'] / gib:.2f}, "
        f"non-torch {row['non_torch_bytes'] / gib:.2f}"
        + (f", in use by other processes {row['gpu_memory_in_use_bytes'] / gib:.2f}" if row.get("gpu_memory_in_use_bytes", 0) > 0 else ""),
        f"  KV cache available: {row['kv_cache_bytes_available'] / gib:.2f} GiB{_own_kv_cache(row)} -> max concurrency "
        f"{row['max_concurrency']:.2f} requests at {int(row['max_model_len']):,} tokens",
        (f"  GPU layers (-ngl): {int(row['gpu_layers'])} of {int(row['total_layers']) + 1} (the output layer counts first, "
         f"then {max(int(row['gpu_layers']) - 1, 0)} of {int(row['total_layers'])} repeating layers"
         + (f"; -ngl {gpu_layers_flag(int(row['gpu_layers']), int(row['extra_blocks']))} with the file's "
            f"{int(row['extra_blocks'])} block(s) llama.cpp counts but does not run"
            if int(row.get("extra_blocks", 0) or 0) > 0 else "") + "); "
         + (f"in use: {row['gpu_memory_used_bytes'] / gib:.2f} GiB on the most loaded GPU (whole layers each), "
            f"{row['gpu_memory_used_total_bytes'] / gib:.2f} GiB over the {int(row['gpus'])}; "
            if int(row["gpus"]) > 1 and "gpu_memory_used_total_bytes" in row else "")
         if row["engine"] in ("llama.cpp", "ollama") else "  ") + f"host RAM {row['host_ram_bytes'] / gib:.2f} GiB",
        f"  at concurrency {int(row['concurrency'])}: decode {row['decode_tokens_per_s']:.1f} tokens/s per user "
        f"({row['time_per_output_token_ms']:.1f} ms/token), prefill {row['prefill_tokens_per_s']:,.0f} tokens/s, "
        f"TTFT {row['ttft_s']:.2f} s, aggregate {row['aggregate_tokens_per_s']:,.0f} tokens/s",
    ]
    if row.get("moe_layers", 0) > 0:
        moe = (f"  mixture of experts: {row['params'] / 1e9:,.1f}B parameters in total, {row['active_params'] / 1e9:,.1f}B "
               f"active per token; routed experts {row['expert_bytes'] / gib:.2f} GiB")
        if row["engine"] == "llama.cpp":
            n_cpu = int(row["cpu_moe_layers"])
            moe += (f", {row['expert_host_bytes'] / gib:.2f} GiB of them in host RAM"
                    + (f" (--n-cpu-moe {n_cpu}: the experts of layers 0-{n_cpu - 1}" if n_cpu > 0 else " (")
                    + f"{', ' if n_cpu > 0 else ''}read at {row['host_bandwidth_gbps']:g} GB/s, --host-bandwidth-gbps)")
        if row["engine"] == "transformers" and str(row["precision"]) in HF_FUSED_EXPERTS_16BIT:
            moe += (" in 16 bits: transformers keeps them fused, and bitsandbytes quantizes nn.Linear layers only (vLLM, "
                    "SGLang and llama.cpp quantize them too)")
        share = MOE_SHARE_BY_BACKEND
        moe += "; a decode step reads only the experts its tokens are routed to" + (
            f", at {share[row['backend']]:.2f} of the dense bandwidth (llama.cpp's expert kernels, fitted on published "
            "runs, docs/serving.md)" if row["engine"] in GGUF_ENGINES and row.get("backend") in share
            else " (at the dense bandwidth: the expert kernels' speed is not fitted for this engine and backend)")
        lines.insert(1, moe)
    if row["engine"] == "vllm":
        version = "current defaults" if row["engine_version"] == "current" else f"version {row['engine_version']}"
        how = ("chunked prefill" if bool(row["chunked_prefill"])
               else "no chunked prefill: the profile forwards max(max-model-len, 2048) tokens at once")
        lines.insert(1, f"  vLLM {version} ({row['engine_generation']}): the activation peak is profiled over "
                        f"{int(row['profile_tokens']):,} tokens ({how}); --engine-version X.Y for another version"
                        + (CUDAGRAPH_NOTE if takes_cudagraphs(row["engine_version"]) else ""))
    if row["engine"] == "sglang":
        version = "current release" if row["engine_version"] == "current" else f"version {row['engine_version']}"
        why = {"given": "as given",
               "tp": "its default by the tensor-parallel size, before 0.5.3",
               "memory": f"its default: the card's {row['usable_bytes'] / 2**20:,.0f} MiB less "
                         f"{row['engine_reserved_bytes'] / 2**20:,.0f} MiB kept for activations and CUDA graphs"
                         + (": nothing is left for the weights and the KV pool, and SGLang stops at start (Not enough "
                            "memory)" if row["engine_reserved_bytes"] >= row["usable_bytes"] else "")}[row["fraction_basis"]]
        lines.insert(1, f"  SGLang, {version}: mem-fraction-static {row['gpu_memory_utilization']:.3f} ({why}); "
                        "--engine-version X.Y.Z for another version")
    window = row.get("kv_window_tokens")
    if window is not None and np.isfinite(window):
        layers, full = int(row["kv_window_layers"]), int(row["total_layers"] - row["kv_window_layers"])
        lines.insert(1, f"  vLLM's hybrid KV cache manager: each of the {layers} sliding-window layers holds {int(window):,} tokens "
                        f"of a request (its window - 1 + --max-num-batched-tokens {int(row['profile_tokens']):,})"
                        + (f", the {full} full-attention layers all {int(row['max_model_len']):,}" if full else "")
                        + "; max concurrency counts the blocks each takes (vLLM 0.10 on)")
    linear = (row.get("linear_attention_layers") or 0) + (row.get("mamba_layers") or 0)
    if linear > 0:
        block = row.get("kv_block_tokens")
        how = {"vllm": (f"vLLM pages each state beside the attention pages, its attention block raised to "
                        f"{int(block)} tokens (vLLM 0.10.2 on)" if block is not None and np.isfinite(block) else ""),
               "sglang": (f"SGLang gives {SGLANG_MAMBA_FULL_MEMORY_RATIO:g} / {1 + SGLANG_MAMBA_FULL_MEMORY_RATIO:g} of its budget "
                          "to a Mamba pool of these states, the rest to the tokens")}
        kind = "hybrid Mamba2" if (row.get("mamba_layers") or 0) > 0 else "hybrid linear attention"
        attention = row.get("attention_layers")
        beside = attention is not None and attention >= row["total_layers"]  # (Falcon-H1: both on every layer)
        lines.insert(1, f"  {kind}: {int(linear)} of {int(row['total_layers'])} layers keep a fixed state per request "
                        + ("beside their KV cache" if beside else "instead of a KV cache")
                        + (f"; {how[row['engine']]}" if how.get(row["engine"]) else ""))
    if isinstance(row.get("draft_model"), str):
        where = (f", its own f16 context of {int(row['draft_context']):,} tokens per slot (-cd)" if row["engine"] == "llama.cpp"
                 else f", tensor parallel {int(row['draft_tensor_parallel_size'])}")
        lines.insert(1, f"  draft model {row['draft_model']}: weights {row['draft_weights_bytes'] / gib:.2f} GiB per GPU beside the "
                        f"target's, KV {row['draft_kv_bytes_per_token'] / 1024:.1f} KiB per token "
                        f"({row['draft_kv_cache_bytes'] / gib:.2f} GiB){where}; decode speed is the target's alone "
                        f"(the speed-up depends on the acceptance rate, not modelled)")
    if not bool(row["fits"]):
        weights, act = row["weights_gpu_bytes"], row.get("activation_peak_bytes", 0.0)
        # the weights alone fit: what fills the rest is the activation peak (the prefill's working set)
        by_act = (row["engine"] not in ("llama.cpp", "ollama") and pd.notna(act) and act > 0
                  and weights + row.get("non_torch_bytes", 0.0) < row["budget_bytes"])
        if row["engine"] == "vllm" and row.get("sampler_peak") is True:  # engine/serving.py SAMPLER_BYTES_PER_LOGIT
            cause = (f"vLLM's sampler warm-up over --max-num-seqs {int(row['max_num_seqs']):,} sequences x the vocabulary; "
                     "a smaller --max-num-seqs lowers it")
        elif row["engine"] == "vllm":
            cause = f"vLLM's profile forward over {int(row['profile_tokens']):,} batched tokens"
        else:
            cause = "the prefill of one --max-model-len request"
        what = (f"the weights ({weights / gib:.2f} GiB per GPU) and the activation peak ({act / gib:.2f} GiB: {cause})"
                if by_act else f"the weights ({weights / gib:.2f} GiB per GPU)")
        pinned = row.get("kv_cache_memory_bytes")
        free = row["usable_bytes"] - row.get("gpu_memory_in_use_bytes", 0.0)
        rest = row["weights_gpu_bytes"] + row.get("activation_peak_bytes", 0.0) + row.get("non_torch_bytes", 0.0)
        if bool(row.get("refused_at_start", False)) and pinned is not None and pd.notna(pinned) and rest + pinned > free:
            lines.insert(1, f"  DOES NOT FIT: --kv-cache-memory-bytes {int(pinned):,} ({pinned / gib:.2f} GiB) beside the "
                            f"weights, activation peak and non-torch memory ({rest / gib:.2f} GiB) is more than the "
                            f"{free / gib:.2f} GiB free: at most {max(int(free - rest), 0):,} bytes")
        elif pinned is not None and pd.notna(pinned) and not bool(row.get("refused_at_start", False)):
            share = float(row["max_concurrency"])
            need = (f"; about {int(np.ceil(pinned / share)):,} bytes hold one" if share > 0 else "")
            lines.insert(1, f"  DOES NOT FIT: --kv-cache-memory-bytes {int(pinned):,} holds {share:.2f} of one "
                            f"{int(row['max_model_len']):,}-token request{need}")
        elif row["engine"] == "transformers" and 1 <= float(row["max_concurrency"]) < float(row["concurrency"]):
            # some batch fits, not the one asked: each sequence's prefill grows with it as its K/V does
            batch, most = int(row["concurrency"]), int(row["max_concurrency"])
            lines.insert(1, f"  DOES NOT FIT: a batch of {batch} requests of {int(row['max_model_len']):,} tokens (each its "
                            f"prefill's {act / batch / gib:.2f} GiB and K/V {_kv_needed(row) / gib:.2f} GiB) beside the weights "
                            f"({weights / gib:.2f} GiB per GPU); transformers holds {most} at once: --concurrency {most} "
                            "(--max-num-seqs), more GPUs (--gpus) or smaller weights (--precision)")
        elif bool(row.get("refused_at_start", False)):
            name = "vLLM" if row["engine"] == "vllm" else "MLC-LLM"
            lines.insert(1, f"  DOES NOT FIT: {name} will not start: --gpu-memory-utilization "
                            f"{row['gpu_memory_utilization']:g} asks {row['budget_bytes'] / gib:.2f} GiB of the card's "
                            f"{row['usable_bytes'] / gib:.2f}, and with {row['gpu_memory_in_use_bytes'] / gib:.2f} GiB held "
                            f"by other processes {free / gib:.2f} GiB are free; ask at most "
                            f"{largest_utilization(row['usable_bytes'], row['gpu_memory_in_use_bytes']):g}")
        elif _kv_is_what_does_not_fit(row):
            # room is left after the weights and the activation peak, but less than the KV cache needs: name it
            room, need = row["kv_cache_bytes_available"], _kv_needed(row)
            exl_seqs = row["engine"] in EXL_ENGINES and int(row["max_num_seqs"]) > 1
            kv = (f"{'ExLlamaV2' if row['engine'] == 'exllamav2' else 'ExLlamaV3'}'s cache of --max-num-seqs {int(row['max_num_seqs'])} sequences of "
                  f"{int(row['max_model_len']):,} tokens ({need / gib:.2f} GiB per GPU)" if exl_seqs else
                  f"one {int(row['max_model_len']):,}-token request's KV cache ({need / gib:.2f} GiB per GPU)")
            lines.insert(1, f"  DOES NOT FIT: {kv} is more than the {room / gib:.2f} GiB left for it after the weights "
                            f"({weights / gib:.2f} GiB per GPU) and the activation peak ({act / gib:.2f} GiB); use a "
                            "shorter --max-model-len, a smaller KV cache (--kv-precision), more GPUs (--gpus) or smaller "
                            "weights (--precision)")
        else:
            lines.insert(1, f"  DOES NOT FIT: {what} leave no room for one "
                            f"request's KV cache in the budget; use more GPUs (--gpus), smaller weights (--precision) or "
                            f"a shorter --max-model-len")
        if options is not None and len(options):
            lines.insert(2, f"  fits with: {format_fits_with(options, str(row['precision']), int(row['max_model_len']), int(row['gpus']))}")
    if bool(row.get("max_model_len_default", False)):  # serve without --max-model-len: the engine's own, and why
        stops = (" (vLLM stops at start where one request of it does not fit: \"To serve at least one request with the "
                 "models's max seq len ... decreasing max_model_len\")" if row["engine"] == "vllm" and not bool(row["fits"])
                 else "")
        lines.insert(1, f"  max-model-len {int(row['max_model_len']):,}: {row['max_model_len_source']}{stops}; "
                        "--max-model-len N to plan another")
    if pd.notna(row["usd_per_million_tokens"]):
        lines.append(f"  ${row['usd_per_million_tokens']:.3f} per million output tokens at ${row['cloud_usd_per_hour']:.2f}"
                     f"/GPU-hour ({row['price_source']}, {row['price_date']})")
    lines.append(f"  speed model: engine/serving.py, {row['speed_basis']} (docs/serving.md)")
    lines.append(f"  run it: {row['command']}")
    if stored is not False and quantized_checkpoint_needed(row, stored):
        p = str(row["precision"])
        held = float(row["params"]) * C.WEIGHT_BYTES.get(str(stored), 2.0) / max(int(row["gpus"]), 1)
        lines.append(f"  weights {p}: the command names the model's own repository, "
                     f"{checkpoint_advice(p, stored, ENGINE_NAMES.get(row['engine'], row['engine']))}: as written it "
                     f"loads about {held / gib:.1f} GiB of weights a GPU, not the "
                     f"{float(row['weights_gpu_bytes']) / gib:.1f} planned")
    community = re.search(r"--model mlx-community/(\S+)-(\d)bit\b", str(row["command"]))
    if row["engine"] == "mlx-lm" and community:  # (named by the convention, not looked up: the Hub is not read here)
        name, bits = community.groups()
        lines.append(f"  mlx-community/{name}-{bits}bit is named as mlx-community names its conversions (the source "
                     f"repository's name); where it has none, convert it yourself: mlx_lm.convert --hf-path "
                     f"{repo or '<the model repository>'} -q --q-bits {bits} "
                     f"--mlx-path {name}-{bits}bit, then --model {name}-{bits}bit")
    return "\n".join(lines)


__all__ = ["ENGINES", "SERVE_JSON_KEYS", "serve_one", "capacity_curve", "cheapest", "format_serve"]
