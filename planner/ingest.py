"""Real runs come back (issue 26, item 4): a run's own log beside our estimate.

`llm-planner ingest FILE --gpu ID [--json] [--save]` reads one of five things (docs/ingest.md):

- the JSON line of the snippet we publish for training scripts (marker `llm_planner_run`):
  torch.cuda.max_memory_allocated / max_memory_reserved and the scenario's settings;
- a vLLM start-up log: the engine-config line (model=, dtype=, max_seq_len=, tensor_parallel_size=,
  quantization=), "Model loading took", "Available KV cache memory", "GPU KV cache size",
  "Maximum concurrency for";
- a llama.cpp load log: the GGUF path and general.name, file type, n_ctx / n_seq_max, "offloaded
  N/M layers to GPU", and the model / KV / compute buffer sizes per device;
- an SGLang start-up log: server_args (model_path, dtype, quantization, tp_size, mem_fraction_static), "Load weight
  end ... mem usage", "KV Cache is allocated. #tokens: N, K size, V size", max_total_num_tokens / context_len;
- a torchtune recipe's log: its resolved config (the scenario) and the metric logger's peak_memory_alloc /
  peak_memory_reserved step counters (torch.cuda's two counters, as the snippet's).

The parsers are pure functions over text. The run is matched to a scenario (model id, task,
precision, sequence length, GPUs) and estimated: training runs (the snippet, torchtune) with engine.estimate (the
counters as planner/evidence.py compares them), vLLM, SGLang and llama.cpp logs with engine.serving (the engine's
own start-up arithmetic). Each measured figure is printed beside our figure with the error.
`--save` keeps the run in the user's runs file (beside the user catalog, `user_runs_path`); the
Evidence page and `evidence --json` list the saved runs, re-estimated, with source_kind "user".
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from engine import columns
from engine.scenarios import LIMITS, did_you_mean

GIB = 2**30
MIB = 2**20
MARKER = "llm_planner_run"
MAX_LOG_BYTES = 64 * 2**20  # a start-up log is kilobytes; a bigger file is not read whole
VLLM_BLOCK_SIZE = 16  # vLLM's CacheConfig default on CUDA (engine/serving.py VLLM_BLOCK_SIZE)
FORMATS = ("training", "vllm", "llama.cpp", "sglang", "torchtune")
TRAINING_FORMATS = ("training", "torchtune")  # estimated with engine.estimate, compared by the torch.cuda counters
# `ingest --json`'s keys (a contract: keys are added, never renamed); one object per figure in "figures"
INGEST_JSON_KEYS = ("format", "file", "model", "model_read", "gpu", "scenario", "figures", "notes")
FIGURE_KEYS = ("figure", "metric", "measured", "estimate", "unit", "error_pct", "source_line", "counter",
               # issue 28: a training run's memory peak as the verdicts decide on it (ours + the band's high side)
               "safe_estimate")
RUNS_FILE_ENV = "LLM_PLANNER_USER_RUNS"


class IngestError(ValueError):
    """Bad input (unreadable file, no format recognized, a model not matched): one line, exit 2."""


# ---- reading the file ----------------------------------------------------------------------------

def read_text(path: str | Path) -> str:
    """The file as text (UTF-8, undecodable bytes replaced); refused in one line when it is not a
    readable regular file. "-": standard input (`vllm serve ... 2>&1 | llm-planner ingest - --gpu ID`; it was
    looked up as a file named "-"), read up to the same bound."""
    if str(path) == "-":
        import sys
        stream = sys.stdin.buffer if sys.stdin is not None and hasattr(sys.stdin, "buffer") else None
        if stream is None:
            raise IngestError("standard input is closed; accepted: a log on standard input, or its file name")
        return _text_of(stream.read(MAX_LOG_BYTES + 1), "standard input")
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise IngestError(f"run file {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    if not p.is_file():
        raise IngestError(f"run file {str(path)!r} is not a regular file; accepted: a log or a file holding the "
                          f"{MARKER} JSON line")
    if st.st_size > MAX_LOG_BYTES:
        raise IngestError(f"run file {str(path)!r} is {st.st_size:,} bytes; at most {MAX_LOG_BYTES:,} are read")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise IngestError(f"run file {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    return _text_of(data, f"run file {str(path)!r}")


def _text_of(data: bytes, what: str) -> str:
    """Bytes as text, refused in one line when they are binary (a NUL byte in the first 64 KiB: no log
    or JSON line holds one) or beyond the bound."""
    if len(data) > MAX_LOG_BYTES:
        raise IngestError(f"{what} is {len(data):,} bytes; at most {MAX_LOG_BYTES:,} are read")
    if b"\x00" in data[:65536]:
        raise IngestError(f"{what} holds binary data; accepted: a vLLM or SGLang start-up log, a llama.cpp load log or "
                          f"the {MARKER} JSON line (llm-planner ingest --snippet prints the lines that write it; docs/ingest.md)")
    return data.decode("utf-8", errors="replace")


def _num(text: str) -> float:
    return float(text.replace(",", ""))


# The whole numbers a log prints that become the scenario's settings (max_model_len, GPUs, max_num_seqs,
# gpu_layers) are bounded here, where the line they came from can be named. Unbounded, a nonsense value was
# either estimated as if real (vLLM max_seq_len=0 or llama.cpp n_ctx = 0: a request of 0 tokens, a KV cache of
# 0 bytes printed as -100% beside the log's; "offloaded 40/33 layers to GPU": 40 layers of a 33-layer model
# compared with ours) or wrapped on its way into the engine's int64 columns (max_seq_len=123456789012345678901
# came back as "seq -9223372036854775808 is not accepted", a setting and a value the log never printed). The
# bounds are the planner's own for the same settings: engine/scenarios.py LIMITS (seq, tp, pp, gpus), serve's
# --max-num-seqs (llama.cpp itself refuses n_seq_max above LLAMA_MAX_SEQ, 256 in src/llama-cparams.h, a build
# option) and --gpu-layers. The measured figures are not bounded: they are what is compared, not what is run.
MAX_NUM_SEQS = 65_536  # planner/cli.py serve --max-num-seqs
MAX_GPU_LAYERS = 100_000  # planner/cli.py serve --gpu-layers
SETTING_RANGES = {  # setting -> (lowest, highest, what is accepted)
    "max_model_len": (1, LIMITS["seq"], f"a whole number of tokens from 1 to {LIMITS['seq']:,}"),
    "gpus": (1, LIMITS["gpus"], f"a whole number of GPUs from 1 to {LIMITS['gpus']:,}"),
    "max_num_seqs": (1, MAX_NUM_SEQS, f"a whole number of sequences from 1 to {MAX_NUM_SEQS:,}"),
    "gpu_layers": (0, MAX_GPU_LAYERS, f"a whole number of layers from 0 to {MAX_GPU_LAYERS:,}"),
}


def _whole_read(text: str, what: str, low: int, high: int, accepted: str) -> int:
    """A whole number as a log printed it (digits, thousands commas), refused in one line naming it as
    printed and what is accepted when it is outside [low, high]."""
    value = int(text.replace(",", ""))
    if not low <= value <= high:
        raise IngestError(f"{what} is {text}; accepted: {accepted}")
    return value


def check_settings(run: dict) -> None:
    """A vLLM or llama.cpp run's settings within SETTING_RANGES, else IngestError naming the setting, its
    value and what is accepted: the parsers bound what they read, and a saved run (the runs file is YAML
    a user may edit) is bounded again before it is estimated. A training run's settings are the engine's
    scenario columns, which engine.estimate checks itself (engine/scenarios.py INT_RANGES)."""
    if run.get("format") in TRAINING_FORMATS:
        return
    settings = run.get("settings") or {}
    for key, (low, high, accepted) in SETTING_RANGES.items():
        if key not in settings:
            continue
        value = settings[key]
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                or value != int(value) or not low <= value <= high):
            raise IngestError(f"the {run.get('format')} run's {key} is {value!r}; accepted: {accepted}")


# ---- (a) the training snippet's JSON line ----------------------------------------------------------

# The snippet users paste into a training script (docs/ingest.md shows the same text, tests/test_ingest.py checks it),
# printed by `llm-planner ingest --snippet` so that an installed copy, which has no docs/, gives it too.
SNIPPET = """import json, torch, transformers
print(json.dumps({
    "llm_planner_run": 1, "model": "llama-3.2-3b",  # a catalog id (llm-planner catalog models) or a Hub repo id
    "task": "train", "method": "lora", "precision": "bf16", "optimizer": "adamw",
    "batch": 4, "seq": 1024, "grad_checkpointing": False, "lora_rank": 16,
    "gpus": torch.cuda.device_count() if not torch.distributed.is_initialized() else torch.distributed.get_world_size(),
    "max_memory_allocated": torch.cuda.max_memory_allocated(),  # this process's GPU, bytes
    "max_memory_reserved": torch.cuda.max_memory_reserved(),
    "torch": torch.__version__, "transformers": transformers.__version__,
}))
"""


TRAINING_REQUIRED = ("model", "max_memory_allocated", "max_memory_reserved")
TRAINING_SETTINGS = ("task", "method", "precision", "batch", "seq", "grad_checkpointing", "lora_rank", "optimizer",
                     "gpus")
SCENARIO_NAMES = {c.name for c in columns.SCENARIO if c.cli and c.group not in ("overhead",)} - {"model"}
TRAINING_VERSIONS = ("torch", "transformers", "peft", "trl")
# The names a script has at hand for the same settings, read as ours: transformers' TrainingArguments
# (gradient_checkpointing, per_device_train_batch_size: a micro-batch per GPU, as `batch` is), TRL's SFTConfig
# (max_seq_length, renamed max_length) and PEFT's LoraConfig r, printed as lora_r. Only names whose value means
# what ours does: TrainingArguments' optim ("adamw_torch") and bf16 (a flag) are not ours and are refused by name.
# Before, any key the snippet does not print was dropped unseen: "gradient_checkpointing": true was estimated
# without checkpointing (25.3 GiB beside a run's 13.0 GiB, +94%).
TRAINING_ALIASES = {"gradient_checkpointing": "grad_checkpointing", "per_device_train_batch_size": "batch",
                    "max_seq_length": "seq", "max_length": "seq", "lora_r": "lora_rank",
                    # TrainingArguments' accumulation count: more than 1 keeps the step's gradients between
                    # micro-batches (engine/stacks.py accum_sync last), 1 is one micro-batch a step (every)
                    "gradient_accumulation_steps": "accum_sync"}
TRAINING_KEYS = (MARKER, *TRAINING_REQUIRED, *TRAINING_VERSIONS)


def _check_training_keys(data: dict, trainer: bool = False) -> None:
    """Every key of the snippet's object is read (the snippet's own, a scenario column, an alias), else
    IngestError naming each unknown key and its closest accepted key (difflib, as the CLI suggests an
    option), or what is accepted where none is close (in one line: the CLI keeps 400 characters)."""
    import difflib
    accepted = [*TRAINING_KEYS, *sorted(SCENARIO_NAMES), *TRAINING_ALIASES]
    # with the Trainer's metrics merged in (train_mem_gpu_alloc_delta), the dict's other keys (train_runtime, epoch,
    # total_flos, init_mem_cpu_alloc_delta, ...) are the Trainer's, read as nothing
    unknown = [k for k in data if k not in accepted and not (trainer and TRAINER_METRIC.match(str(k)))]
    if not unknown:
        return
    hints, close_all = [], True
    for key in unknown:
        close = difflib.get_close_matches(str(key).lower(), accepted, n=1, cutoff=0.7)
        hints.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
        close_all = close_all and bool(close)
    listed = ("the snippet's keys, a scenario column or an alias (docs/ingest.md)" if close_all else
              f"{', '.join(TRAINING_KEYS[1:])}, a scenario column ({', '.join(TRAINING_SETTINGS)}, ...: docs/ingest.md) "
              f"or an alias ({', '.join(TRAINING_ALIASES)})")
    keys, verb = ("key", "is") if len(unknown) == 1 else ("keys", "are")
    raise IngestError(f"the {MARKER} line's {keys} {', '.join(hints)} {verb} not read; accepted: {listed}")


# Two counters other tools already print, read beside the snippet's settings (neither prints the scenario):
# - transformers' Trainer with TrainingArguments(skip_memory_metrics=False): TrainerMemoryTracker
#   (src/transformers/trainer_utils.py) resets torch.cuda's peak at the start of train(), and its metrics (returned by
#   train(), logged to trainer_state.json's log_history) hold f"{stage}_mem_gpu_{t}_delta" for t in alloc, peaked:
#   alloc = memory_allocated() at the end less at the start, peaked = max(0, max_memory_allocated() - memory_allocated()
#   at the end), "in order to know how much memory the measured code consumed one needs to sum these two"; the first
#   stage also carries init's (Trainer.__init__) and before_init_mem_gpu, memory_allocated() when Trainer() began. The
#   peak is relative to the end of train(), so train()'s own max_memory_allocated is before_init_mem_gpu +
#   init_mem_gpu_alloc_delta + train_mem_gpu_alloc_delta + train_mem_gpu_peaked_delta: exact where nothing was
#   allocated or freed on the GPU between Trainer() and train() (the tracker does not report that gap). A metrics dict
#   without the two init keys (a later stage's, or eval's) has no baseline and is refused by name.
# - DeepSpeed's see_memory_usage (deepspeed/runtime/utils.py; the engine calls it around forward, backward and step
#   with "memory_breakdown": true): f"MA {round(memory_allocated() / (1024 * 1024 * 1024),2 )} GB Max_MA
#   {round(max_memory_allocated() / ..., 2)} GB CA {round(memory_reserved() / ..., 2)} GB Max_CA
#   {round(max_memory_reserved() / (1024 * 1024 * 1024))} GB " on rank 0, then reset_peak_memory_stats(): the largest
#   Max_MA is the run's max_memory_allocated (GiB to 2 places); Max_CA is rounded to a whole GiB, too coarse to compare
#   (not read).
TRAINER_MEM_KEYS = ("before_init_mem_gpu", "init_mem_gpu_alloc_delta", "train_mem_gpu_alloc_delta",
                    "train_mem_gpu_peaked_delta")
TRAINER_METRIC = re.compile(r"^(?:(?:init|train|eval|test|predict)_\w+|before_init_mem_(?:cpu|gpu)|total_flos|epoch|step)$")
DS_MEMORY = re.compile(r"\bMA (-?[0-9.]+) GB\s+Max_MA ([0-9.]+) GB\s+CA (-?[0-9.]+) GB\s+Max_CA ([0-9.]+) GB")
TRAINER_SUM = " + ".join(TRAINER_MEM_KEYS)


def _trainer_peak(data: dict) -> float:
    """train()'s max_memory_allocated from the Trainer's memory metrics merged into the line (TRAINER_SUM)."""
    missing = [k for k in TRAINER_MEM_KEYS if data.get(k) is None]
    if missing:
        raise IngestError(f"the {MARKER} line has the Trainer's train_mem_gpu_alloc_delta but no {', '.join(missing)}: "
                          "train_mem_gpu_peaked_delta is the peak above what train() left allocated, and without "
                          "before_init_mem_gpu and init_mem_gpu_alloc_delta (the first stage's metrics: train()'s) its "
                          "baseline is unknown; accepted: train()'s whole metrics dict merged into the line")
    for key in TRAINER_MEM_KEYS:
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise IngestError(f"the {MARKER} line's {key} is {value!r}; accepted: a number of bytes (the Trainer's "
                              "metrics on a CUDA device; MPS prints 'Not available')")
    total = float(sum(data[k] for k in TRAINER_MEM_KEYS))
    if total <= 0:
        raise IngestError(f"the {MARKER} line's Trainer memory metrics sum to {total:,.0f} bytes ({TRAINER_SUM}); "
                          "accepted: a run's metrics with GPU memory allocated")
    return total


def parse_training(text: str) -> dict | None:
    """The last line holding the snippet's JSON object (docs/ingest.md) -> a run, or None when no
    line has the marker. A marked line that is not the snippet's object raises IngestError."""
    line = None
    for candidate in text.splitlines():
        if f'"{MARKER}"' in candidate and "{" in candidate:
            line = candidate
    if line is None:
        return None
    start = line.index("{")
    if "}" not in line[start:]:  # the print was cut off (a killed job, a log truncated at a size)
        cut = line[start:].strip()
        raise IngestError(f"the {MARKER} line is not one JSON object: it ends without its closing '}}', cut off after "
                          f"{cut[-40:]!r}; accepted: the whole line the snippet prints (llm-planner ingest --snippet; docs/ingest.md)")
    try:
        data = json.loads(line[start:line.rindex("}") + 1])
    except ValueError as exc:
        raise IngestError(f"the {MARKER} line is not one JSON object: {exc}") from None
    if not isinstance(data, dict):
        raise IngestError(f"the {MARKER} line is not one JSON object")
    trainer = data.get("train_mem_gpu_alloc_delta") is not None and data.get("max_memory_allocated") is None
    deepspeed = [(m, m.group(0).strip()) for m in DS_MEMORY.finditer(text)] if data.get("max_memory_allocated") is None \
        else []
    required = ["model"] if trainer or deepspeed else list(TRAINING_REQUIRED)
    missing = [k for k in required if data.get(k) is None]
    if missing:
        raise IngestError(f"the {MARKER} line has no {', '.join(missing)}; the snippet prints them (llm-planner ingest "
                          "--snippet; docs/ingest.md)" + ("" if missing == ["model"] else
                                                          "; or merge the Trainer's memory metrics into the line, or "
                                                          "keep DeepSpeed's see_memory_usage lines in the same log"))
    measured, lines, notes = {}, {}, []
    for key, figure in (("max_memory_allocated", "allocated_peak"), ("max_memory_reserved", "reserved_peak")):
        if data.get(key) is None:
            continue
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise IngestError(f"the {MARKER} line's {key} is {value!r}; accepted: a number of bytes > 0")
        measured[figure], lines[figure] = float(value), key
    if trainer:
        measured = {"allocated_peak": _trainer_peak(data), **measured}
        lines["allocated_peak"] = TRAINER_SUM
        notes.append("allocated_peak is the Trainer's memory metrics summed (" + TRAINER_SUM + "): train()'s "
                     "max_memory_allocated where nothing was allocated on the GPU between Trainer() and train()")
    elif deepspeed:
        value, line = max(((_num(m.group(2)), line) for m, line in deepspeed), key=lambda p: p[0])
        if value <= 0:
            raise IngestError(f"this log's DeepSpeed Max_MA is at most {value} GB; accepted: a run's see_memory_usage "
                              "lines with GPU memory allocated")
        measured = {"allocated_peak": value * GIB, **measured}
        lines["allocated_peak"] = " ".join(line.split())
        notes.append("allocated_peak is the largest Max_MA of DeepSpeed's see_memory_usage lines (max_memory_allocated "
                     "since the previous line, GiB to 2 places); their Max_CA is rounded to a whole GiB and not compared")
    _check_training_keys(data, trainer=data.get("train_mem_gpu_alloc_delta") is not None)
    settings = {}
    for key, value in data.items():
        name = TRAINING_ALIASES.get(key, key)
        if name not in SCENARIO_NAMES or value is None:
            continue
        if key == "gradient_accumulation_steps":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise IngestError(f"the {MARKER} line's gradient_accumulation_steps {json.dumps(value)} is not read; "
                                  "accepted: a whole number >= 1 (more than 1: --accum-sync last)")
            value = "last" if value > 1 else "every"
        if name == "lora_targets" and isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            # PEFT's LoraConfig(target_modules=[...]) as json.dumps prints it: our comma list (the list reached the
            # engine as its str() and was refused as the target "['q_proj'")
            value = ",".join(value)
        if name in settings and settings[name] != value:
            given = [k for k in data if TRAINING_ALIASES.get(k, k) == name and data[k] is not None]
            raise IngestError(f"the {MARKER} line gives {name} twice: "
                              + ", ".join(f"{k} {json.dumps(data[k])}" for k in given) + "; accepted: one of them, or both alike")
        settings[name] = value
    settings.setdefault("task", "train")
    versions = {k: str(data[k]) for k in TRAINING_VERSIONS if data.get(k) is not None}
    out = {"format": "training", "model_read": str(data["model"]), "settings": settings, "measured": measured,
           "lines": lines, "versions": versions}
    if notes:
        out["notes"] = notes
    return out


# ---- (b) vLLM start-up logs --------------------------------------------------------------------------
# The format strings, in vllm-project/vllm:
#   vllm/config/vllm.py VllmConfig.__str__ (logged by vllm/v1/engine/core.py "Initializing a V1 LLM engine
#       (v%s) with config: %s"): "model=%r, speculative_config=%r, tokenizer=%r, ..., dtype=%s,
#       max_seq_len=%d, ..., tensor_parallel_size=%d, pipeline_parallel_size=%d, ..., quantization=%s, ..."
#   vllm/v1/worker/gpu_model_runner.py load_model: "Model loading took %.4f GiB and %.6f seconds"
#       (later versions: "Model loading took %.2f GiB memory and %.6f seconds")
#   vllm/v1/worker/gpu_worker.py determine_available_memory: "Available KV cache memory: %.2f GiB"
#   vllm/v1/core/kv_cache_utils.py: "GPU KV cache size: %s tokens" (f"{num_tokens:,}") and
#       "Maximum concurrency for %s tokens per request: %.2fx"
# and the V0 engine's (vLLM <= 0.10): vllm/worker/model_runner.py "Loading model weights took %.4f GB"
#   (model_memory_usage / float(2**30): GiB under the label GB), vllm/executor/executor_base.py
#   "# GPU blocks: %d, # CPU blocks: %d" (x the block size, 16 by default, = the KV cache's tokens)
# The engine's version heads the config line: vllm/engine/llm_engine.py "Initializing an LLM engine (v%s) with
#   config: ..." (V0 before), "Initializing a V0 LLM engine (v%s) with config: %s, ..." (V0 once V1 was the default),
#   vllm/v1/engine/core.py "Initializing a V1 LLM engine (v%s) with config: %s"; the OpenAI server also prints
#   "vLLM API server version %s" (vllm/entrypoints/openai/api_server.py). It becomes the run's engine_version
#   (engine/serving.py, `serve --engine-version`): the profile, the defaults and V0 / V1 follow it, and a log of
#   0.6 was compared with the current release before (a V0 log at max_seq_len=32768 on an RTX 4090: 24,000 KV
#   tokens beside 46,480, where the 0.6 model gives 17,856).

VLLM_CONFIG = re.compile(r"\bmodel='([^']*)'.*?\bdtype=([\w.]+).*?\bmax_seq_len=(\d+)")
VLLM_TP = re.compile(r"\btensor_parallel_size=(\d+)")
VLLM_PP = re.compile(r"\bpipeline_parallel_size=(\d+)")
VLLM_QUANT = re.compile(r"\bquantization=([\w.-]+)")
VLLM_KV_DTYPE = re.compile(r"\bkv_cache_dtype=([\w.-]+)")
VLLM_UTIL = re.compile(r"gpu_memory_utilization['\"]?\s*[=:]\s*([0-9.]+)")
VLLM_LOADING = re.compile(r"(?:Model loading took|Loading model weights took) ([0-9.]+) (GiB|GB)")
VLLM_V0_BLOCKS = re.compile(r"# GPU blocks: (\d+), # CPU blocks: \d+")
VLLM_KV_MEMORY = re.compile(r"Available KV cache memory: (-?[0-9.]+) GiB")
VLLM_KV_TOKENS = re.compile(r"GPU KV cache size: ([0-9,]+) tokens")
VLLM_CONCURRENCY = re.compile(r"Maximum concurrency for ([0-9,]+) tokens per request: ([0-9.]+)x")
VLLM_VERSION = re.compile(r"Initializing (?:an|a (V[01])) LLM engine \(v([^)\s]+)\) with config")
VLLM_SERVER_VERSION = re.compile(r"vLLM API server version (\S+)")
VLLM_DTYPES = {"torch.bfloat16": "bf16", "bfloat16": "bf16", "torch.float16": "fp16", "float16": "fp16",
               "half": "fp16", "torch.float32": "fp32", "float32": "fp32"}
# quantization=<method> -> our weight precision (None: the dtype's). The method names are vLLM's
# QuantizationConfig.get_name(): mxfp4 is gpt-oss's checkpoint (vllm/model_executor/layers/quantization/mxfp4.py:
# the experts in MXFP4, the rest in the dtype, our `mxfp4`), modelopt_fp4 NVIDIA ModelOpt's NVFP4 checkpoints
# (modelopt.py ModelOptNvFp4Config, our `nvfp4`), modelopt and fbgemm_fp8 FP8 checkpoints. Before, a gpt-oss log
# (`vllm serve openai/gpt-oss-20b` prints quantization=mxfp4) was refused though the engine models its weights.
VLLM_QUANT_PRECISION = {"fp8": "fp8", "awq": "int4", "awq_marlin": "int4", "gptq": "int4", "gptq_marlin": "int4",
                        "bitsandbytes": "nf4", "int8": "int8", "mxfp4": "mxfp4", "modelopt_fp4": "nvfp4",
                        "modelopt": "fp8", "fbgemm_fp8": "fp8", "compressed-tensors": "by name",
                        "None": None, "none": None}
# compressed-tensors (llm-compressor's checkpoints: RedHatAI/..., neuralmagic/...) prints no scheme in the config
# line; the scheme is in the model's name by the publishers' convention (-FP8, -FP8-dynamic, -quantized.w8a8,
# -quantized.w4a16, -W4A16, -INT8, -NVFP4). The first pattern found in the name decides; none found is refused.
CT_NAME_PRECISIONS = ((re.compile(r"(?i)nvfp4|(?<![a-z])fp4(?![a-z0-9])"), "nvfp4"),
                      (re.compile(r"(?i)fp8"), "fp8"),
                      (re.compile(r"(?i)w4a(4|8|16)|int4"), "int4"),
                      (re.compile(r"(?i)w8a(8|16)|int8"), "int8"))
CT_ACCEPTED = "FP8, NVFP4, W4A16 / INT4 or W8A8 / INT8 in the name (llm-compressor's naming)"


def _compressed_tensors_precision(model: str) -> str:
    """A compressed-tensors checkpoint's weight precision, from the scheme its name carries (CT_NAME_PRECISIONS)."""
    name = str(model).replace("\\", "/").rstrip("/").split("/")[-1]
    for pattern, precision in CT_NAME_PRECISIONS:
        if pattern.search(name):
            return precision
    raise IngestError(f"vLLM quantization 'compressed-tensors' of model {model!r}: the scheme is not printed and the "
                      f"name carries none; accepted: {CT_ACCEPTED}, or another quantization vLLM names")


def _vllm_version(text: str) -> tuple[str | None, str | None, list[str]]:
    """The vLLM version the log prints -> (the run's engine_version, the version as printed, notes). None
    with a note where the log prints none, or a version the engine does not read (a source build's "dev"):
    the current release is estimated, as before. A release older than the engine models raises IngestError."""
    from engine.serving import VLLM_OLDEST_MODELLED, VLLM_V1_FROM, vllm_version
    m = VLLM_VERSION.search(text)
    printed, generation = (m.group(2), m.group(1) or "V0") if m else (None, None)
    if m is None:
        m = VLLM_SERVER_VERSION.search(text)
        printed = m.group(1) if m else None
    if printed is None:
        return None, None, ["this vLLM log prints no version (no 'Initializing ... LLM engine (vX.Y.Z) with config' "
                            "line): compared with the current release (serve without --engine-version)"]
    major, minor = (float(a[0]) for a in vllm_version([printed]))
    oldest = ".".join(map(str, VLLM_OLDEST_MODELLED))
    if math.isnan(major) or ((major, minor) < VLLM_OLDEST_MODELLED and "dev" in printed):
        # "dev" (vllm/version.py without its version file), "0.1.dev1+g..." (setuptools-scm without tags)
        return None, printed, [f"this vLLM log's version {printed!r} ('{m.group(0)}') is not a release the "
                               "engine reads: compared with the current release (serve without --engine-version)"]
    if (major, minor) < VLLM_OLDEST_MODELLED:
        raise IngestError(f"this vLLM log's version is {printed} ('{m.group(0)}'); accepted: a log of vLLM {oldest} "
                          f"or later (older releases' defaults and profile are not modelled)")
    notes = []
    default = "V1" if (major, minor) >= VLLM_V1_FROM else "V0"
    if generation and generation != default:  # VLLM_USE_V1=1 before 0.8, VLLM_USE_V1=0 from 0.8
        notes.append(f"this log is of vLLM {printed}'s {generation} engine; the estimate follows {printed}'s default "
                     f"engine, {default} (its memory profile differs)")
    return printed, printed, notes


def parse_vllm(text: str) -> dict | None:
    """A vLLM start-up log -> a run, or None when it has none of vLLM's memory lines. Per-GPU
    figures (one line per worker with tensor parallelism) keep the largest."""
    loading = [(_num(m.group(1)), m.group(0)) for m in VLLM_LOADING.finditer(text)]
    kv_mem = [(_num(m.group(1)), m.group(0)) for m in VLLM_KV_MEMORY.finditer(text)]
    kv_tok = [(_num(m.group(1)), m.group(0)) for m in VLLM_KV_TOKENS.finditer(text)]
    kv_tok = kv_tok or [(_num(m.group(1)) * VLLM_BLOCK_SIZE, m.group(0)) for m in VLLM_V0_BLOCKS.finditer(text)]
    conc = [(m, m.group(0)) for m in VLLM_CONCURRENCY.finditer(text)]
    if not (loading or kv_mem or kv_tok or conc):
        return None
    config_line = next((line for line in text.splitlines() if VLLM_CONFIG.search(line)), None)
    if config_line is None:
        raise IngestError("this vLLM log has no engine-config line (model=..., dtype=..., max_seq_len=...); "
                          "ingest the whole start-up log")
    m = VLLM_CONFIG.search(config_line)
    model, dtype = m.group(1), m.group(2)
    max_len = _whole_read(m.group(3), "this vLLM log's max_seq_len", 1, LIMITS["seq"],
                          SETTING_RANGES["max_model_len"][2] + " (vLLM's max_model_len)")
    tp, pp = 1, 1
    if VLLM_TP.search(config_line):
        tp = _whole_read(VLLM_TP.search(config_line).group(1), "this vLLM log's tensor_parallel_size", 1, LIMITS["tp"],
                         f"a whole number of GPUs from 1 to {LIMITS['tp']:,}")
    if VLLM_PP.search(config_line):
        pp = _whole_read(VLLM_PP.search(config_line).group(1), "this vLLM log's pipeline_parallel_size", 1,
                         LIMITS["pp"], f"a whole number of stages from 1 to {LIMITS['pp']:,}")
    quant = VLLM_QUANT.search(config_line)
    quant = quant.group(1) if quant else "None"
    if dtype not in VLLM_DTYPES:
        raise IngestError(f"vLLM dtype {dtype!r} is not read; accepted: {', '.join(sorted(set(VLLM_DTYPES)))}")
    precision = VLLM_QUANT_PRECISION.get(quant, "unknown") if quant not in ("None", "none") else VLLM_DTYPES[dtype]
    if precision == "unknown":
        raise IngestError(f"vLLM quantization {quant!r} is not read; accepted: "
                          f"{', '.join(k for k in VLLM_QUANT_PRECISION if k not in ('None', 'none'))} or none")
    if precision == "by name":
        precision = _compressed_tensors_precision(model)
    precision = precision or VLLM_DTYPES[dtype]
    settings = {"task": "infer", "engine": "vllm", "precision": precision, "max_model_len": max_len,
                "gpus": tp * pp}
    kv_dtype = VLLM_KV_DTYPE.search(config_line)
    if kv_dtype and kv_dtype.group(1).startswith("fp8"):
        settings["kv_precision"] = "fp8"
    util = VLLM_UTIL.search(text)
    if util:
        settings["gpu_memory_utilization"] = float(util.group(1))
    version, printed, notes = _vllm_version(text)
    if version:
        settings["engine_version"] = version  # the saved run keeps it: evidence re-estimates it at its version
    measured, lines = {}, {}
    if loading:
        value, line = max(loading)
        measured["weights"], lines["weights"] = value * GIB, line  # GiB_bytes (old "GB" lines divided by 2**30 too)
    if kv_mem:
        value, line = min(kv_mem)  # the worker that limits the cache
        measured["kv_cache_memory"], lines["kv_cache_memory"] = value * GIB, line
    if kv_tok:
        value, line = kv_tok[-1]
        measured["kv_cache_tokens"], lines["kv_cache_tokens"] = value, line
    if conc:
        match, line = conc[-1]
        measured["max_concurrency"], lines["max_concurrency"] = float(match.group(2)), line
    return {"format": "vllm", "model_read": model, "settings": settings, "measured": measured, "lines": lines,
            "versions": {"vllm": printed} if printed else {}, "notes": notes}


# ---- (d) SGLang server start-up logs -----------------------------------------------------------------
# The format strings, in sgl-project/sglang (python/sglang/srt/...):
#   entrypoints/engine.py _launch_subprocesses: logger.info(f"{server_args=}") -> "server_args=ServerArgs(model_path='...',
#       ..., dtype='auto', kv_cache_dtype='auto', quantization=None, ..., context_length=None, ...,
#       mem_fraction_static=0.88, ..., tp_size=1, pp_size=1, ...)" (the dataclass repr, after __post_init__ resolved
#       the fraction's default)
#   model_executor/model_runner.py load_model: f"Load weight end. elapsed={...:.2f} s, type={type(self.model).__name__},
#       {quant_str + ', ' if quant_str else ''}avail mem={after_avail_memory:.2f} GB, mem usage={self.weight_load_mem_usage:.2f}
#       GB." (quant_str: ModelConfig.get_quantization_config_log_str, "quant=fp8, fmt=e4m3" / "quant=gptq, bits=4");
#       the 0.4 series: f"Load weight end. type={...}, dtype={self.dtype}, avail mem={...:.2f} GB, mem usage={...:.2f} GB."
#       weight_load_mem_usage = before_avail_memory - after_avail_memory, both utils.get_available_gpu_memory
#       (torch.cuda.mem_get_info's free bytes / (1 << 30)): what the card's free memory fell by while loading
#   mem_cache/memory_pool.py (GB = 1024 * 1024 * 1024): MHATokenToKVPool "KV Cache is allocated. #tokens: {size},
#       K size: {k_size / GB:.2f} GB, V size: {v_size / GB:.2f} GB" (KVCache._finalize_allocation_log later), MLA pools
#       "KV Cache is allocated. #tokens: {size}, KV size: {kv_size / GB:.2f} GB"; K + V is the whole pool
#   managers/scheduler.py: f"max_total_num_tokens={self.max_total_num_tokens}, chunked_prefill_size=..., max_prefill_tokens=...,
#       max_running_requests=..., context_len={self.model_config.context_len}" (the context the server runs at)
# A log prints no SGLang version; its server_args print the fraction it ran at, so the version's default (engine/serving.py
# sglang_mem_fraction) does not enter: the run is estimated with that fraction at the current release.

SGL_ARGS = re.compile(r"server_args=ServerArgs\((.*)\)")
SGL_MODEL = re.compile(r"\bmodel_path='([^']*)'")
SGL_DTYPE = re.compile(r"\bdtype='([^']*)'")
SGL_QUANT = re.compile(r"\bquantization=(?:None|'([^']*)')")
SGL_KV_DTYPE = re.compile(r"\bkv_cache_dtype='([^']*)'")
SGL_CONTEXT = re.compile(r"\bcontext_length=(None|\d+)")
SGL_FRACTION = re.compile(r"\bmem_fraction_static=(None|[0-9.]+)")
SGL_TP = re.compile(r"\btp_size=(\d+)")
SGL_PP = re.compile(r"\bpp_size=(\d+)")
SGL_LOAD = re.compile(r"Load weight end\. (.*?)mem usage=([0-9.]+) GB")
SGL_LOAD_DTYPE = re.compile(r"\bdtype=(torch\.\w+)")
SGL_LOAD_QUANT = re.compile(r"\bquant=([\w.-]+)(?:, bits=(\d+))?")
SGL_KV = re.compile(r"KV Cache is allocated\. (?:dtype: \S+, )?#tokens: (\d+), "
                    r"(?:K size: ([0-9.]+) GB, V size: ([0-9.]+) GB|KV size: ([0-9.]+) GB)")
SGL_TOTAL = re.compile(r"max_total_num_tokens=(\d+),.*?\bcontext_len=(\d+)")
# Hybrid pools print one "KV Cache is allocated" line per sub-pool: mem_cache/swa_memory_pool.py SWAKVPool (gpt-oss's
# sliding-window layers: a full and a window pool, then f"SWAKVPool mem usage: {self.mem_usage:.2f} GB, swa size:
# {self.size_swa}, full size: {self.size}"), and the linear-attention models' f"Mamba Cache is allocated.
# max_mamba_cache_size: ..., conv_state size: ...GB, ssm_state size: ...GB" beside their attention pool. Neither
# sub-pool line is the pool the engine sizes (kv_cache_bytes_allocated: the whole budget), so only the weights are
# compared for them, and a note says so.
SGL_HYBRID = re.compile(r"SWAKVPool mem usage: [0-9.]+ GB|Mamba Cache is allocated\.")
# speculative decoding (server_args speculative_algorithm='EAGLE', ...): the draft worker loads and allocates too
# (model_runner.py is_draft_worker), its own "Load weight end" and pool lines beside the target's; the target's
# weights are the largest, but which pool line is whose the log does not say: the pools are not compared
SGL_SPEC = re.compile(r"\bspeculative_algorithm='([^']*)'")
# SGLang's quantization names (server_args.py QUANTIZATION_CHOICES) beyond vLLM's: its own w8a8 kernels and ModelOpt's FP8
SGL_QUANT_PRECISION = {**VLLM_QUANT_PRECISION, "w8a8_int8": "int8", "w8a8_fp8": "fp8", "modelopt_fp8": "fp8",
                       "awq_marlin": "int4", "gptq_marlin": "int4"}
# A quantized checkpoint started without --quantization prints quantization=None in server_args (the checkpoint's
# config.json decides): the 0.4 series' "Load weight end" names no method either, so the scheme the name carries by the
# publishers' convention (-FP8, -AWQ, -GPTQ-Int4, -W4A16, ...) is read, and a note says so.
SGL_NAME_PRECISIONS = (*CT_NAME_PRECISIONS, (re.compile(r"(?i)(?<![a-z])(awq|gptq)(?![a-z])"), "int4"))


def _sglang_name_precision(model: str) -> str | None:
    name = str(model).replace("\\", "/").rstrip("/").split("/")[-1]
    return next((precision for pattern, precision in SGL_NAME_PRECISIONS if pattern.search(name)), None)


def _sglang_quant(method: str, bits: str | None, model: str, where: str) -> str:
    """A quantization method SGLang names -> our weight precision, else IngestError naming it."""
    precision = SGL_QUANT_PRECISION.get(method, "unknown")
    if precision == "unknown":
        raise IngestError(f"SGLang quantization {method!r} ({where}) is not read; accepted: "
                          f"{', '.join(k for k in SGL_QUANT_PRECISION if k not in ('None', 'none'))} or none")
    if precision == "by name":
        return _compressed_tensors_precision(model)
    if method.startswith(("gptq", "awq")) and bits == "8":
        return "int8"
    return precision


def parse_sglang(text: str) -> dict | None:
    """An SGLang server start-up log -> a run, or None when it has none of SGLang's memory lines. Per-GPU figures (one
    line per tensor-parallel rank) keep the largest weights and the smallest pool, as vLLM's do."""
    loads = [(m, m.group(0)) for m in SGL_LOAD.finditer(text)]
    pools = [(m, m.group(0)) for m in SGL_KV.finditer(text)]
    totals = [(m, m.group(0)) for m in SGL_TOTAL.finditer(text)]
    if not (loads or pools):
        return None
    args = SGL_ARGS.search(text)
    if args is None:
        raise IngestError("this SGLang log has no 'server_args=ServerArgs(...)' line (model_path, dtype, tp_size, "
                          "mem_fraction_static); ingest the whole start-up log")
    args = args.group(1)
    model = SGL_MODEL.search(args)
    if model is None:
        raise IngestError("this SGLang log's server_args print no model_path='...'; ingest the whole start-up log")
    model = model.group(1)
    tp = SGL_TP.search(args)
    tp = _whole_read(tp.group(1), "this SGLang log's tp_size", 1, LIMITS["tp"],
                     f"a whole number of GPUs from 1 to {LIMITS['tp']:,}") if tp else 1
    pp = SGL_PP.search(args)
    pp = _whole_read(pp.group(1), "this SGLang log's pp_size", 1, LIMITS["pp"],
                     f"a whole number of stages from 1 to {LIMITS['pp']:,}") if pp else 1
    if totals:
        max_len = _whole_read(totals[-1][0].group(2), "this SGLang log's context_len", 1, LIMITS["seq"],
                              SETTING_RANGES["max_model_len"][2] + " (SGLang's context_len)")
    else:
        given = SGL_CONTEXT.search(args)
        if given is None or given.group(1) == "None":
            raise IngestError("this SGLang log prints no context length (no 'max_total_num_tokens=..., context_len=N' "
                              "line, and server_args context_length=None); ingest the whole start-up log")
        max_len = _whole_read(given.group(1), "this SGLang log's context_length", 1, LIMITS["seq"],
                              SETTING_RANGES["max_model_len"][2] + " (SGLang's context_length)")
    notes: list[str] = []
    quant = SGL_QUANT.search(args)
    load_info = loads[0][0].group(1) if loads else ""
    load_quant = SGL_LOAD_QUANT.search(load_info)
    load_dtype = SGL_LOAD_DTYPE.search(load_info)
    dtype = SGL_DTYPE.search(args)
    dtype = dtype.group(1) if dtype else "auto"
    if quant and quant.group(1):
        precision = _sglang_quant(quant.group(1), None, model, f"server_args quantization='{quant.group(1)}'")
    elif load_quant:
        precision = _sglang_quant(load_quant.group(1), load_quant.group(2), model, f"'{load_quant.group(0)}'")
    elif _sglang_name_precision(model):
        precision = _sglang_name_precision(model)
        notes.append(f"this SGLang log prints quantization=None and names no method; the scheme in the model's name "
                     f"({model!r}) is read: {precision}")
    elif load_dtype:
        if load_dtype.group(1) not in VLLM_DTYPES:
            raise IngestError(f"SGLang dtype {load_dtype.group(1)!r} is not read; accepted: "
                              f"{', '.join(sorted(k for k in VLLM_DTYPES if k.startswith('torch.')))}")
        precision = VLLM_DTYPES[load_dtype.group(1)]
    elif dtype != "auto":
        if dtype not in VLLM_DTYPES:
            raise IngestError(f"SGLang dtype {dtype!r} is not read; accepted: auto, "
                              f"{', '.join(sorted(k for k in VLLM_DTYPES if not k.startswith('torch.')))}")
        precision = VLLM_DTYPES[dtype]
    else:
        # newer "Load weight end" lines print no dtype; bf16 and fp16 weigh the same (2 bytes a parameter)
        precision = "bf16"
        notes.append("this SGLang log prints dtype='auto' and no loaded dtype: estimated as bf16 (fp16 weighs the same)")
    settings = {"task": "infer", "engine": "sglang", "precision": precision, "max_model_len": max_len, "gpus": tp * pp}
    kv_dtype = SGL_KV_DTYPE.search(args)
    if kv_dtype and kv_dtype.group(1).startswith("fp8"):
        settings["kv_precision"] = "fp8"
    fraction = SGL_FRACTION.search(args)
    if fraction and fraction.group(1) != "None":
        value = float(fraction.group(1))
        if not 0 < value <= 1:
            raise IngestError(f"this SGLang log's mem_fraction_static is {fraction.group(1)}; accepted: a share of "
                              "the card above 0 and at most 1")
        settings["gpu_memory_utilization"] = value
    measured, lines = {}, {}
    if loads:
        value, line = max((_num(m.group(2)), line) for m, line in loads)
        measured["weights"], lines["weights"] = value * GIB, line  # get_available_gpu_memory: bytes / (1 << 30)
    spec, pooled = SGL_SPEC.search(args), SGL_HYBRID.search(text)
    hybrid = pooled.group(0) if pooled else spec.group(0) if spec else None
    if hybrid:
        if not loads:
            raise IngestError(f"this SGLang log's KV cache is a hybrid pool or a draft's beside the target's "
                              f"('{hybrid}'), which is not compared, and it has no 'Load weight end' line; ingest "
                              "the whole start-up log")
        pools, totals = [], []
        notes.append(f"this SGLang log's KV cache is a hybrid pool or a draft's beside the target's ('{hybrid}'): "
                     "its pool lines are not the single pool the engine sizes, so only the weights are compared")
    if pools:
        def pool_bytes(m) -> float:
            return (_num(m.group(2)) + _num(m.group(3)) if m.group(2) is not None else _num(m.group(4))) * GIB
        value, line, tokens = min((pool_bytes(m), line, int(m.group(1))) for m, line in pools)
        measured["kv_cache_memory"], lines["kv_cache_memory"] = value, line
        measured["kv_cache_tokens"], lines["kv_cache_tokens"] = float(tokens), line
    elif totals:
        measured["kv_cache_tokens"], lines["kv_cache_tokens"] = float(totals[-1][0].group(1)), totals[-1][1]
    return {"format": "sglang", "model_read": model, "settings": settings, "measured": measured, "lines": lines,
            "versions": {}, "notes": notes}


# ---- (e) torchtune recipe logs -----------------------------------------------------------------------
# The format strings, in pytorch/torchtune:
#   torchtune/config/_utils.py log_config: f"Running {recipe_name} with resolved config:\n\n{cfg_str}", cfg_str =
#       OmegaConf.to_yaml(cfg, resolve=True, sort_keys=True): the recipe's settings (the YAML with the command line's
#       overrides), printed by every recipe's recipe_main before training
#   torchtune/training/memory.py get_memory_stats: {"peak_memory_active": memory_stats()["active_bytes.all.peak"],
#       "peak_memory_alloc": max_memory_allocated(device), "peak_memory_reserved": max_memory_reserved(device)}, each
#       / _BYTES_IN_GIB (1024**3), then reset_peak_memory_stats(device) (reset_stats=True, the recipes' call)
#   torchtune/training/memory.py log_memory_stats: f"{message}\n" + "\n".join(f"\t{device_support.device_name}
#       {key.replace('_', ' ')}: {value:.2f} GiB" ...) ("Memory stats after model init:", "GPU peak memory alloc: X GiB";
#       before 2025-02, PR #2406: "GPU peak memory allocation: X GiB", "... reserved", "... active")
#   torchtune/training/metric_logging.py DiskLogger / StdoutLogger log_dict: f"Step {step} | " + f"{name}:{data} " per
#       key (txt), or one JSON object {"step": step, name: data, ...} a line (DiskLogger output_fmt "jsonl"); the LoRA and
#       full single-device recipes add get_memory_stats() to each logged step with log_peak_memory_stats: True
# The step's counters are torch.cuda's peaks since the previous logged step (each call resets them): their largest
# over the steps logged is the training step's peak, which the engine estimates. The model-init stats are the load's
# peak, not a step's: they are not compared.

TT_RUNNING = re.compile(r"Running (\w+) with resolved config:\s*$", re.M)
TT_YAML_LINE = re.compile(r"^(\s|- |[A-Za-z_][\w.]*:( |$))")  # an OmegaConf.to_yaml line (indented, a list item, a key)
TT_STEP_VALUE = {key: re.compile(r"""(?:^|[\s{,|])["']?%s["']?\s*:\s*([0-9.eE+-]+)""" % key)
                 for key in ("peak_memory_alloc", "peak_memory_reserved")}
TT_INIT_STATS = re.compile(r"^\s*(?:GPU|NPU|XPU|MPS) peak memory (?:alloc|allocation|reserved|active): [0-9.]+ GiB", re.M)
TT_RECIPES = {"LoRAFinetuneRecipeSingleDevice": "lora", "FullFinetuneRecipeSingleDevice": "full"}
# config optimizer._component_ -> our optimizer (engine/constants.py OPTIMIZERS); torch's AdamW(fused=True) is adamw_fused
TT_OPTIMIZERS = {"torch.optim.AdamW": "adamw", "torch.optim.Adam": "adamw", "torch.optim.SGD": "sgd",
                 "bitsandbytes.optim.PagedAdamW8bit": "paged_adamw_8bit", "bitsandbytes.optim.PagedAdamW":
                 "paged_adamw_32bit", "bitsandbytes.optim.AdamW8bit": "adamw_8bit",
                 "torchao.optim.AdamW8bit": "adamw_8bit_torchao", "torchao.prototype.low_bit_optim.AdamW8bit":
                 "adamw_8bit_torchao"}
# config loss._component_ -> our loss (docs/stacks.md `loss`)
TT_LOSSES = {"torchtune.modules.loss.LinearCrossEntropyLoss": "linear_chunked",
             "torchtune.modules.loss.CEWithChunkedOutputLoss": "chunked", "torch.nn.CrossEntropyLoss": "unfused"}
# torchtune's LoRA module names (lora_attn_modules; apply_lora_to_mlp adapts w1, w2, w3) -> ours
TT_LORA_MODULES = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}
TT_DTYPES = {"bf16": "bf16", "fp32": "fp32", "fp16": "fp16"}


def _tt_config(text: str) -> tuple[str, dict] | None:
    """The recipe's name and its resolved config (the YAML block log_config prints), or None where the log has none."""
    m = TT_RUNNING.search(text)
    if m is None:
        return None
    block = []
    for line in text[m.end():].lstrip("\n").splitlines():
        if line.strip() and not TT_YAML_LINE.match(line):
            break  # the next log line ("Model is initialized ...", "INFO:torchtune...", "Step 1 | ...")
        block.append(line)
    try:
        cfg = yaml.safe_load("\n".join(block)) or {}
    except yaml.YAMLError as exc:
        raise IngestError(f"this torchtune log's resolved config is not YAML: {' '.join(str(exc).split())[:160]}") from None
    if not isinstance(cfg, dict):
        raise IngestError("this torchtune log's resolved config is not a mapping; ingest the recipe's whole output")
    return m.group(1), cfg


def _tt_component(cfg: dict, key: str) -> str:
    node = cfg.get(key)
    return str(node.get("_component_", "")) if isinstance(node, dict) else ""


def _tt_model_names(cfg: dict) -> list[str]:
    """Names to match: the checkpoint folder's (a Hub repo's name as `tune download` writes it), then the model builder's
    (torchtune.models.llama3_2.lora_llama3_2_3b -> llama-3.2 3b)."""
    names = []
    ckpt = cfg.get("checkpointer") if isinstance(cfg.get("checkpointer"), dict) else {}
    if ckpt.get("checkpoint_dir"):
        names.append(str(ckpt["checkpoint_dir"]).rstrip("/"))
    builder = re.sub(r"^q?lora_", "", _tt_component(cfg, "model").split(".")[-1])
    if builder:
        dotted = re.sub(r"(\d)_(\d)", r"\1.\2", builder)
        names += [dotted, re.sub(r"^([a-z]+)(\d)", r"\1-\2", dotted)]
    return list(dict.fromkeys(names))


def _tt_switch(value) -> str:
    return "on" if value else "off"


def parse_torchtune(text: str) -> dict | None:
    """A torchtune recipe's log (its output, with the metric logger's step lines) -> a run, or None when it has neither
    torchtune's memory stats nor its step counters."""
    steps = {key: [(float(m.group(1)), line.strip()) for line in text.splitlines() for m in [pattern.search(line)] if m]
             for key, pattern in TT_STEP_VALUE.items()}
    init = TT_INIT_STATS.search(text)
    if not (steps["peak_memory_alloc"] or steps["peak_memory_reserved"] or init):
        return None
    found = _tt_config(text)
    if found is None:
        raise IngestError("this torchtune log has memory figures but not the recipe's settings; accepted: the recipe's "
                          "output from its 'Running <Recipe> with resolved config:' block on, with the metric logger's "
                          "'Step N | ... peak_memory_alloc:...' lines (DiskLogger writes them to <output_dir>/logs/"
                          "log_*.txt: give both, e.g. cat run.out logs/log_*.txt | llm-planner ingest - --gpu ID)")
    recipe, cfg = found
    if recipe not in TT_RECIPES:
        raise IngestError(f"this torchtune log is of recipe {recipe}; accepted: a log of "
                          f"{' or '.join(TT_RECIPES)} (the single-device fine-tuning recipes)")
    if not (steps["peak_memory_alloc"] and steps["peak_memory_reserved"]):
        if steps["peak_memory_alloc"]:  # get_memory_stats on MPS: the Metal driver's memory, no reserved counter
            raise IngestError("this torchtune log's step lines have peak_memory_alloc but no peak_memory_reserved (an MPS "
                              "run: its alloc is the Metal driver's memory); accepted: a CUDA run's step lines")
        raise IngestError("this torchtune log has only the model-init memory stats (the load's peak, not a training "
                          "step's); accepted: a run with log_peak_memory_stats: True whose metric logger's 'Step N | ... "
                          "peak_memory_alloc:...' lines are given too (DiskLogger: <output_dir>/logs/log_*.txt)")
    builder = _tt_component(cfg, "model").split(".")[-1]
    method = "qlora" if builder.startswith("qlora_") else "lora" if builder.startswith("lora_") else "full"
    if (method == "full") != (TT_RECIPES[recipe] == "full"):
        raise IngestError(f"this torchtune log's recipe {recipe} builds model {builder!r}; accepted: a LoRA builder "
                          "(lora_..., qlora_...) under the LoRA recipe, another under the full one")
    dtype = str(cfg.get("dtype", "bf16"))
    if dtype not in TT_DTYPES:
        raise IngestError(f"this torchtune log's dtype is {dtype!r}; accepted: {', '.join(TT_DTYPES)}")
    tokenizer = cfg.get("tokenizer") if isinstance(cfg.get("tokenizer"), dict) else {}
    seq = tokenizer.get("max_seq_len")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= LIMITS["seq"]:
        raise IngestError(f"this torchtune log's tokenizer.max_seq_len is {'null' if seq is None else repr(seq)}: the "
                          "batches' length is the dataset's, which the log does not print; accepted: a run with "
                          f"tokenizer.max_seq_len set (1 to {LIMITS['seq']:,}; dataset.packed: True fills every batch to it)")
    batch = cfg.get("batch_size")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise IngestError(f"this torchtune log's batch_size is {batch!r}; accepted: a whole number of sequences >= 1")
    optimizer = _tt_component(cfg, "optimizer")
    if optimizer not in TT_OPTIMIZERS:
        raise IngestError(f"this torchtune log's optimizer {optimizer!r} is not read; accepted: {', '.join(TT_OPTIMIZERS)}")
    ours = TT_OPTIMIZERS[optimizer]
    if ours == "adamw" and optimizer == "torch.optim.AdamW" and cfg["optimizer"].get("fused"):
        ours = "adamw_fused"
    settings = {"task": "train", "recipe": "torchtune", "method": method, "precision": TT_DTYPES[dtype],
                "optimizer": ours, "batch": batch, "seq": seq, "gpus": 1,
                "grad_checkpointing": bool(cfg.get("enable_activation_checkpointing", False)),
                "activation_offload": _tt_switch(cfg.get("enable_activation_offloading", False)),
                "optimizer_in_backward": _tt_switch(cfg.get("optimizer_in_bwd", False)),
                "compile": _tt_switch(cfg.get("compile", False))}
    datasets = cfg.get("dataset") if isinstance(cfg.get("dataset"), list) else [cfg.get("dataset")]
    settings["packing"] = _tt_switch(any(isinstance(d, dict) and d.get("packed") for d in datasets))
    loss = _tt_component(cfg, "loss")
    if loss:
        if loss not in TT_LOSSES:
            raise IngestError(f"this torchtune log's loss {loss!r} is not read; accepted: {', '.join(TT_LOSSES)}")
        settings["loss"] = TT_LOSSES[loss]
    notes = []
    if method != "full":
        model = cfg["model"]
        targets = [TT_LORA_MODULES.get(str(m), str(m)) for m in model.get("lora_attn_modules") or []]
        if model.get("apply_lora_to_mlp"):
            targets += ["gate_proj", "up_proj", "down_proj"]  # torchtune's w1, w3, w2
        if targets:
            settings["lora_targets"] = ",".join(targets)
        if model.get("lora_rank") is not None:
            settings["lora_rank"] = model["lora_rank"]
        if model.get("lora_dropout"):
            settings["lora_dropout"] = model["lora_dropout"]
        if model.get("apply_lora_to_output"):
            notes.append("this torchtune run adapts the output projection too (apply_lora_to_output); its adapter is "
                         "not in the estimate (our LoRA targets are the decoder layers' linears)")
    measured, lines = {}, {}
    for key, figure in (("peak_memory_alloc", "allocated_peak"), ("peak_memory_reserved", "reserved_peak")):
        value, line = max(steps[key], key=lambda p: p[0])  # the first step at the peak
        if not math.isfinite(value) or value <= 0:
            raise IngestError(f"this torchtune log's {key} is {value!r}; accepted: a number of GiB > 0")
        measured[figure], lines[figure] = value * GIB, line[:300]  # get_memory_stats: bytes / 1024**3
    return {"format": "torchtune", "model_read": (_tt_model_names(cfg) or [builder])[0], "names_read": _tt_model_names(cfg),
            "settings": settings, "measured": measured, "lines": lines, "versions": {}, "notes": notes}


# ---- (c) llama.cpp load logs -------------------------------------------------------------------------
# The format strings, in ggml-org/llama.cpp:
#   src/llama-model-loader.cpp: "%s: loaded meta data with %d key-value pairs and %d tensors from %s (version %s)",
#       the metadata dump "%s: - kv %3d: %42s %-16s = %s" (general.name), print_info: "%s: file type   = %s"
#   src/llama-model.cpp load_tensors: "%s: offloaded %d/%d layers to GPU",
#       "%s: %12s model buffer size = %8.2f MiB"
#   src/llama-context.cpp: "%s: n_seq_max     = %u", "%s: n_ctx         = %u",
#       "%s: %10s compute buffer size = %8.2f MiB"
#   src/llama-kv-cache.cpp: "%s: %10s KV buffer size = %8.2f MiB",
#       "%s: size = %7.2f MiB (%6u cells, %3d layers, %2u/%u seqs), K (%s): %7.2f MiB, V (%s): %7.2f MiB"

LCPP_FROM = re.compile(r"loaded meta data with \d+ key-value pairs and \d+ tensors from (.+?)(?: \(version .*\))?\s*$",
                       re.M)
LCPP_NAME = re.compile(r"general\.name\s+(?:str\s+)?=\s*(.+?)\s*$", re.M)
LCPP_FTYPE = re.compile(r"(?:file type|model ftype)\s+=\s*(.+?)\s*$", re.M)
LCPP_NCTX = re.compile(r"\bn_ctx\s+=\s*(\d+)")
LCPP_NSEQ = re.compile(r"\bn_seq_max\s+=\s*(\d+)")
LCPP_OFFLOAD = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
LCPP_BUFFER = re.compile(r"^\S*:\s+(\S+) (model|KV|compute) buffer size =\s*([0-9.]+) MiB\s*$", re.M)
# before 2024-06 (llama.cpp b3000-ish): "llm_load_tensors: %10s buffer size = %8.2f MiB" (the weights) and
# llm_load_print_meta's "%s: model ftype      = %s"
LCPP_OLD_WEIGHTS = re.compile(r"^llm_load_tensors:\s+(\S+) buffer size =\s*([0-9.]+) MiB\s*$", re.M)
LCPP_KV_TYPE = re.compile(r"K \((\w+)\):")
# llama_model_ftype_name (src/llama-model-loader.cpp) -> our GGUF precision
LCPP_FTYPES = {"q8_0": "q8_0", "q6_k": "q6_k", "q5_k - medium": "q5_k_m", "q4_k - medium": "q4_k_m", "q4_0": "q4_0",
               "q3_k - medium": "q3_k_m", "q2_k - medium": "q2_k", "q2_k - small": "q2_k", "f16": "fp16",
               "bf16": "bf16", "all f32": "fp32",
               # LLAMA_FTYPE_MOSTLY_MXFP4_MOE (gpt-oss's GGUFs): the experts MXFP4, the rest Q8_0 (engine
               # constants GGUF_BITS / GGUF_EXPERT_BITS); refused before though the engine models it
               "mxfp4 moe": "mxfp4_moe",
               # LLAMA_FTYPE_MOSTLY_NVFP4 (llama_model_ftype_name: "NVFP4"): engine/constants.py GGUF_BITS nvfp4_gguf
               "nvfp4": "nvfp4_gguf"}


def _host_buffer(device: str) -> bool:
    """CPU, CPU_Mapped, CPU_REPACK, CUDA_Host, ...: host memory, not the GPU's."""
    return "CPU" in device.upper() or device.endswith("_Host")


def parse_llamacpp(text: str) -> dict | None:
    """A llama.cpp load log -> a run, or None when it has no buffer-size line. Figures are per GPU
    device: the mean over the devices the log names (one card: that card's)."""
    buffers = [(m.group(1), m.group(2), float(m.group(3)), m.group(0)) for m in LCPP_BUFFER.finditer(text)]
    buffers += [(m.group(1), "model", float(m.group(2)), m.group(0)) for m in LCPP_OLD_WEIGHTS.finditer(text)]
    if not buffers:
        return None
    name = LCPP_NAME.search(text)
    path = LCPP_FROM.search(text)
    model_read = (path.group(1).strip() if path else "") or (name.group(1).strip() if name else "")
    names = [n for n in (path.group(1).strip() if path else "", name.group(1).strip() if name else "") if n]
    if not names:
        raise IngestError("this llama.cpp log names no model (no 'loaded meta data ... from FILE' or general.name "
                          "line); ingest the whole load log")
    ftype = LCPP_FTYPE.search(text)
    if not ftype:
        raise IngestError("this llama.cpp log has no 'file type' line; ingest the whole load log")
    ftype_text = re.sub(r"\s*\(guessed\)\s*$", "", ftype.group(1)).strip().lower()
    precision = LCPP_FTYPES.get(ftype_text)
    if precision is None:
        raise IngestError(f"llama.cpp file type {ftype.group(1)!r} is not read; accepted: "
                          f"{', '.join(sorted(LCPP_FTYPES))}")
    n_ctx = LCPP_NCTX.search(text)
    if not n_ctx:
        raise IngestError("this llama.cpp log has no 'n_ctx' line; ingest the whole load log")
    n_ctx = _whole_read(n_ctx.group(1), "this llama.cpp log's n_ctx", 1, LIMITS["seq"],
                        SETTING_RANGES["max_model_len"][2] + " (the context llama.cpp allocated)")
    n_seq = 1
    if LCPP_NSEQ.search(text):
        n_seq = _whole_read(LCPP_NSEQ.search(text).group(1), "this llama.cpp log's n_seq_max", 1, MAX_NUM_SEQS,
                            SETTING_RANGES["max_num_seqs"][2])
    per_kind: dict[str, dict[str, float]] = {"model": {}, "KV": {}, "compute": {}}
    lines: dict[str, str] = {}
    for device, kind, mib, line in buffers:
        if _host_buffer(device):
            continue
        per_kind[kind][device] = per_kind[kind].get(device, 0.0) + mib * MIB
        lines.setdefault({"model": "weights", "KV": "kv_cache_memory", "compute": "compute_buffer"}[kind], line.strip())
    devices = sorted(set().union(*per_kind.values()))
    if not devices:
        raise IngestError("this llama.cpp log has buffers on the CPU only; accepted: a load with layers on a GPU")
    measured = {}
    for kind, figure in (("model", "weights"), ("KV", "kv_cache_memory"), ("compute", "compute_buffer")):
        if per_kind[kind]:
            measured[figure] = sum(per_kind[kind].values()) / len(devices)
    offload = LCPP_OFFLOAD.search(text)
    settings = {"task": "infer", "engine": "llama.cpp", "precision": precision,
                "max_model_len": max(1, n_ctx // n_seq), "max_num_seqs": n_seq, "gpus": len(devices)}
    if offload:
        # "offloaded N/M layers": src/llama-model.cpp load_tensors prints std::min(n_gpu_layers,
        # max_offloadable_layers) of max_backend_supported_layers, both hparams.n_layer + 1 (the blocks and the
        # output layer), so N <= M in every log llama.cpp writes
        on_gpu, total = int(offload.group(1)), int(offload.group(2))
        if not 1 <= total <= MAX_GPU_LAYERS:
            raise IngestError(f"this llama.cpp log's '{offload.group(0)}' counts {offload.group(2)} layers in the model; "
                              f"accepted: a whole number of layers from 1 to {MAX_GPU_LAYERS:,}")
        if on_gpu > total:
            raise IngestError(f"this llama.cpp log's '{offload.group(0)}' puts {offload.group(1)} layers on the GPU, more "
                              f"than the model's {total:,}; accepted: 0 to {total:,} layers on the GPU")
        measured["gpu_layers"] = float(on_gpu)
        lines["gpu_layers"] = offload.group(0)
        settings["gpu_layers"] = on_gpu
    kv_type = LCPP_KV_TYPE.search(text)
    if kv_type and kv_type.group(1) in ("q8_0", "q4_0"):
        settings["kv_precision"] = "int8" if kv_type.group(1) == "q8_0" else "int4"
    return {"format": "llama.cpp", "model_read": model_read, "names_read": names, "settings": settings,
            "measured": measured, "lines": lines, "versions": {}, "devices": devices}


def parse_run(text: str) -> dict:
    """The first format the text holds (training JSON line, vLLM, llama.cpp) -> a run."""
    for parse in (parse_training, parse_vllm, parse_sglang, parse_llamacpp, parse_torchtune):
        run = parse(text)
        if run is not None:
            return run
    # counters other tools print with no settings beside them (no marker line): named, and what makes them readable
    if "train_mem_gpu_alloc_delta" in text or "train_mem_gpu_peaked_delta" in text:
        raise IngestError("this file holds the HF Trainer's memory metrics but not the run's settings (model, batch, seq, "
                          f"...); accepted: the {MARKER} line with train()'s metrics merged in, print(json.dumps({{...the "
                          "snippet's settings..., **train_result.metrics}})) (llm-planner ingest --snippet; docs/ingest.md)")
    if DS_MEMORY.search(text):
        raise IngestError("this log holds DeepSpeed's see_memory_usage lines but not the run's settings; accepted: the "
                          f"{MARKER} line (the snippet's settings; its counters may be left out) printed in the same log "
                          "(llm-planner ingest --snippet; docs/ingest.md)")
    raise IngestError(f"no recognizable run in this file; accepted: the {MARKER} JSON line that llm-planner ingest --snippet prints, a vLLM "
                      "start-up log ('Model loading took', 'GPU KV cache size'), an SGLang start-up log ('Load weight end', "
                      "'KV Cache is allocated'), a llama.cpp load log ('model buffer size') or a torchtune recipe's log "
                      "('Running ... with resolved config:', 'peak_memory_alloc:')")


# ---- matching the run to a catalog model -----------------------------------------------------------

_DROP = {"instruct", "chat", "hf", "it", "base", "meta", "gguf", "text", "model", "fp16", "bf16", "f16", "f32",
         "awq", "gptq", "fp8", "int4", "int8", "bnb", "4bit", "8bit", "unsloth", "dynamic", "latest", "mlx", "hub",
         # the quantized checkpoints vLLM reads (VLLM_QUANT_PRECISION, CT_NAME_PRECISIONS): -NVFP4, -FP4, -mxfp4,
         # -W4A16, -quantized.w8a8 (cut below) name the format, not another model
         "nvfp4", "fp4", "mxfp4", "w4a16", "w4a4", "w8a8", "w8a16", "quantized"}
_QUANT_TOKEN = re.compile(r"^(i?q\d(_[a-z0-9]+)*|ud)$")


def _tokens(name: str) -> tuple[str, ...]:
    """A model name as comparable tokens: "meta-llama/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf" ->
    ("llama", "3.1", "8b"); the organization, the path, the file's suffix, the quantization and
    the instruct/chat words left out."""
    text = str(name).strip().replace("\\", "/").rstrip("/")
    text = text.split("/")[-1]  # a Hub repo's name, a path's last part
    text = re.sub(r"\.gguf$", "", text, flags=re.I)
    text = re.sub(r"-\d{5}-of-\d{5}$", "", text)  # split GGUF parts
    text = re.sub(r"(?i)[-._](ud-)?(i?q\d(_[a-z0-9]+)*|f16|bf16|f32)$", "", text)  # the GGUF quantization
    text = re.sub(r"(?i)[-_.]quantized[-_.]w\d+a\d+$", "", text)  # llm-compressor's -quantized.w4a16
    words = re.split(r"[-_\s]+", text.lower())
    out = []
    for w in words:
        if not w or w in _DROP or _QUANT_TOKEN.match(w):
            continue
        out.append(w)
    return tuple(out)


def _source_repo(source) -> str:
    m = re.search(r"huggingface\.co/([^/\s]+/[^/\s]+)", str(source or ""))
    return m.group(1) if m else ""


def match_model(name: str, models: pd.DataFrame) -> str | None:
    """A catalog model id for the name a run gives (a catalog id, a Hub repo, a GGUF file name,
    a llama.cpp general.name), by the catalog's own ids and each model's Hugging Face source;
    None when no model matches."""
    name = str(name or "").strip()
    ids = list(models["id"])
    if name in ids:
        return name
    repo = "/".join(name.replace("\\", "/").rstrip("/").split("/")[-2:])
    sources = {_source_repo(s).lower(): i for i, s in zip(models["id"], models.get("source", [""] * len(ids)))}
    if repo.lower() in sources:
        return sources[repo.lower()]
    want = _tokens(name)
    if not want:
        return None
    for ident, source in zip(ids, models.get("source", [""] * len(ids))):
        if want == _tokens(ident) or (_source_repo(source) and want == _tokens(_source_repo(source))):
            return ident
    return None


def resolve_model(run: dict, models: pd.DataFrame, override: str | None = None) -> str:
    """The run's catalog model id (override: --model), or IngestError naming what was read."""
    if override:
        if override not in set(models["id"]):
            raise IngestError(f"model {override!r} is not in the catalog; accepted: a catalog model id "
                              "(see: catalog models)" + did_you_mean(override, models["id"]))
        # a log of another model than --model says is refused (a name that matches nothing, a fine-tune
        # under its own name, takes the override)
        for name in run.get("names_read") or [run["model_read"]]:
            found = match_model(name, models)
            if found and found != override:
                raise IngestError(f"the {run['format']} run is of {name!r} ({found}), not of --model {override!r}; "
                                  "give the run's own model or leave --model out")
        return override
    for name in run.get("names_read") or [run["model_read"]]:
        found = match_model(name, models)
        if found:
            return found
    read = " / ".join(repr(n) for n in (run.get("names_read") or [run["model_read"]]))
    raise IngestError(f"model {read} (read from the {run['format']} run) matches no catalog model; give --model ID "
                      "(see: catalog models)")


# ---- our estimate beside each measured figure -----------------------------------------------------

FIGURES = {  # figure -> (evidence metric, unit, what our side is)
    "allocated_peak": ("allocated_peak_bytes", "B", "peak_bytes - runtime_overhead_bytes (torch allocated)"),
    "reserved_peak": ("reserved_peak_bytes", "B", "peak_bytes - CUDA context - NCCL (torch reserved)"),
    "weights": ("weights_bytes", "B", "weights on one GPU (serve weights_gpu_bytes)"),
    "kv_cache_memory": ("kv_cache_bytes", "B", "KV cache memory on one GPU (serve kv_cache_bytes_allocated: what the engine allocates)"),
    "kv_cache_tokens": ("kv_cache_tokens", "tokens", "KV cache tokens (serve num_gpu_blocks x 16)"),
    "max_concurrency": ("max_concurrency", "x", "requests of max_model_len at once (serve max_concurrency)"),
    "compute_buffer": ("compute_buffer_bytes", "B", "compute buffer on one GPU (serve compute_buffer_bytes)"),
    "gpu_layers": ("gpu_layers", "count", "layers on the GPU (serve gpu_layers)"),
}


# A format whose figure is read from another counter than the metric's usual one (planner/evidence.py COUNTERS) names
# its own, in `--json`'s "counter" and on the Evidence page (a saved run too: by its format)
FORMAT_COUNTERS = {
    "torchtune": {"allocated_peak": "torch.cuda.max_memory_allocated, the largest over the logged steps (torchtune "
                                    "get_memory_stats: the peak since the previous logged step, GiB)",
                  "reserved_peak": "torch.cuda.max_memory_reserved, the largest over the logged steps (torchtune "
                                   "get_memory_stats: the peak since the previous logged step, GiB)"},
    "sglang": {"weights": "the card's free memory before less after loading the weights (torch.cuda.mem_get_info; "
                          "SGLang's 'mem usage', GiB)",
               "kv_cache_memory": "the KV pool's K + V buffers (SGLang memory_pool.py get_kv_size_bytes, GiB)"},
}


def scenario_of(run: dict, model: str, gpu: str) -> dict:
    """The engine request the run stands for."""
    return {"model": model, "gpu": gpu, **run["settings"]}


def estimate_run(run: dict, model: str, gpu: str, models: pd.DataFrame,
                 gpus: pd.DataFrame) -> tuple[dict[str, float], float]:
    """Our figure for each of the run's measured figures (NaN where the engine has none), and what the verdicts add
    to a training run's peak (safe_peak_bytes - peak_bytes: the band's high side, engine/margins.py) to be added to
    each of its memory peaks; NaN for a serving log."""
    sc = scenario_of(run, model, gpu)
    extra = np.nan
    if run["format"] in TRAINING_FORMATS:
        from engine.estimate import estimate
        from planner.evidence import reserved_peak_bytes
        request = {k: v for k, v in sc.items() if k != "engine"}
        result = estimate(pd.DataFrame([request]), models, gpus)
        row = result.iloc[0]
        ours = {"allocated_peak": float(row["peak_bytes"] - row["runtime_overhead_bytes"]),
                "reserved_peak": float(reserved_peak_bytes(result.iloc[:1])[0])}
        extra = float(row["safe_peak_bytes"] - row["peak_bytes"]) if "safe_peak_bytes" in row else np.nan
    else:
        from planner.serving import serve_one
        request = {k: v for k, v in sc.items() if k != "task"}
        request.setdefault("kv_precision", "auto")
        row = serve_one(request, models, gpus)
        blocks = float(row.get("num_gpu_blocks", np.nan))
        ours = {"weights": float(row.get("weights_gpu_bytes", np.nan)),
                # what the engine allocates (vLLM: its whole budget, = available; llama.cpp: its -c tokens on the GPU
                # layers, the log's "KV buffer size"), not the room left beside it (kv_cache_bytes_available)
                "kv_cache_memory": float(row.get("kv_cache_bytes_allocated", np.nan)),
                "kv_cache_tokens": blocks * VLLM_BLOCK_SIZE,
                "max_concurrency": float(row.get("max_concurrency", np.nan)),
                "compute_buffer": float(row.get("compute_buffer_bytes", np.nan)),
                "gpu_layers": float(row.get("gpu_layers", np.nan))}
    return {k: ours.get(k, np.nan) for k in run["measured"]}, extra


# The measured figures that are memory held on one GPU at once, per format (the training counters are each a peak
# of the process's memory on its GPU: the larger one is what the card held).
ON_THE_CARD = {"vllm": ("weights", "kv_cache_memory"), "sglang": ("weights", "kv_cache_memory"), "llama.cpp": ("weights", "kv_cache_memory", "compute_buffer"),
               "training": ("reserved_peak",), "torchtune": ("reserved_peak",)}
CARD_SLACK = 1.02  # the logs' rounding (vLLM's GiB to 2 decimals, llama.cpp's MiB), far below any other card's size


def check_card(run: dict, gpu: str, gpus: pd.DataFrame) -> None:
    """IngestError when the run's own figures hold more memory on one GPU than --gpu has (its nominal memory
    or its usable bytes, whichever is larger): it ran on another card. Unchecked, an H100 vLLM log given
    --gpu rtx-4090 was compared as if real (a KV cache of 56.78 GiB on a 24 GB card, ours -90%) and --save kept
    the comparison among the user's evidence."""
    row = gpus.loc[gpus["id"] == gpu].iloc[0]
    sizes = [float(v) for v in (row.get("usable_memory_bytes"), float(row.get("memory_gb") or 0) * GIB)
             if v is not None and math.isfinite(float(v))]
    measured = run.get("measured") or {}
    parts = [(f, measured[f]) for f in ON_THE_CARD.get(run.get("format"), ()) if isinstance(measured.get(f), (int, float))]
    if run.get("format") in TRAINING_FORMATS and isinstance(measured.get("allocated_peak"), (int, float)):
        parts = [max(parts + [("allocated_peak", measured["allocated_peak"])], key=lambda p: p[1])]
    held = sum(v for _, v in parts)
    if not sizes or not parts or held <= max(sizes) * CARD_SLACK:
        return
    shown = " + ".join(f"{f} {v / GIB:,.2f}" for f, v in parts)  # short: a saved run's warning holds it, and a path
    raise IngestError(f"the {run.get('format')} run held {held / GIB:,.2f} GiB on one GPU ({shown}), more than {gpu} "
                      f"has ({max(sizes) / GIB:,.2f} GiB); accepted: the --gpu of the card it ran on")


def compare(run: dict, model: str, gpu: str, models: pd.DataFrame, gpus: pd.DataFrame) -> list[dict]:
    """One record per measured figure: measured, ours, unit, error % ((ours - measured) / measured)."""
    if gpu not in set(gpus["id"]):
        raise IngestError(f"gpu {gpu!r} is not in the catalog; accepted: a catalog GPU id (see: catalog gpus)"
                          + did_you_mean(gpu, gpus["id"]))
    check_settings(run)
    check_card(run, gpu, gpus)
    ours, extra = estimate_run(run, model, gpu, models, gpus)
    from planner.evidence import COUNTERS, PEAK_METRICS
    out = []
    for figure, measured in run["measured"].items():
        metric, unit, _ = FIGURES[figure]
        est = ours.get(figure, np.nan)
        error = (est - measured) / measured * 100 if measured > 0 and math.isfinite(est) else np.nan
        # the figure the verdicts decide on, on the same counter (a memory peak of a training run only)
        safe = est + extra if metric in PEAK_METRICS and math.isfinite(est) and math.isfinite(extra) else np.nan
        out.append({"figure": figure, "metric": metric, "measured": float(measured),
                    "estimate": float(est) if math.isfinite(est) else None, "unit": unit,
                    "error_pct": round(float(error), 1) if math.isfinite(error) else None,
                    "source_line": run.get("lines", {}).get(figure, ""),
                    # a format whose figure is another counter than the metric's usual one names its own (SGLang's
                    # weights: the card's free memory falling while loading)
                    "counter": FORMAT_COUNTERS.get(run.get("format"), {}).get(figure) or COUNTERS.get(metric, FIGURES[figure][2]),
                    "safe_estimate": float(safe) if math.isfinite(safe) else None})
    return out


def _shown(value, unit: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if unit == "B":
        return f"{value / GIB:,.2f} GiB"
    if unit == "tokens":
        return f"{value:,.0f}"
    if unit == "x":
        return f"{value:,.2f}x"
    return f"{value:,.0f}"


def format_comparison(result: dict) -> str:
    """The text table: figure, measured, ours, error %; for a training run's peaks also "safe", the figure the
    verdicts decide on (ours + the band's high side: a run measured above it could have been called "fits")."""
    head = (f"{result['format']} run of {result['model']} (read: {result['model_read']}) on {result['gpu']}: "
            + ", ".join(f"{k} {v}" for k, v in result["scenario"].items() if k not in ("model", "gpu")))
    safe = any(f.get("safe_estimate") is not None for f in result["figures"])
    rows = [("figure", "measured", "ours", "safe", "error %") if safe else ("figure", "measured", "ours", "error %")]
    for f in result["figures"]:
        err = "—" if f["error_pct"] is None else f"{f['error_pct']:+.1f}"
        cells = [f["figure"], _shown(f["measured"], f["unit"]), _shown(f["estimate"], f["unit"])]
        if safe:
            cells.append(_shown(f.get("safe_estimate"), f["unit"]))
        rows.append((*cells, err))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [head]
    for r in rows:
        lines.append("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]).rstrip())
    lines += [f"note: {n}" for n in result.get("notes", [])]
    return "\n".join(lines)


def ingest(path: str | Path, gpu: str, models: pd.DataFrame, gpus: pd.DataFrame, model: str | None = None) -> dict:
    """Read, match, estimate: the `ingest --json` object (without schema_version)."""
    return ingest_text(read_text(path), gpu, models, gpus, model, name="stdin" if str(path) == "-" else Path(path).name)


def ingest_text(text: str, gpu: str, models: pd.DataFrame, gpus: pd.DataFrame, model: str | None = None,
                name: str = "pasted log") -> dict:
    """ingest() of a text (the Catalog page's pasted log): the same bounds, parsers and matching."""
    text = _text_of(text.encode("utf-8", errors="replace"), name) if isinstance(text, str) else _text_of(text, name)
    if gpu not in set(gpus["id"]):
        raise IngestError(f"gpu {gpu!r} is not in the catalog; accepted: a catalog GPU id (see: catalog gpus)"
                          + did_you_mean(gpu, gpus["id"]))
    run = parse_run(text)
    ident = resolve_model(run, models, model)
    figures = compare(run, ident, gpu, models, gpus)
    return {"format": run["format"], "file": name, "model": ident, "model_read": run["model_read"],
            "gpu": gpu, "scenario": scenario_of(run, ident, gpu), "figures": figures,
            "notes": list(run.get("notes", [])), "_run": run}


# ---- --save: the user's own runs -------------------------------------------------------------------

def user_runs_path() -> Path:
    """$LLM_PLANNER_USER_RUNS, else `user_runs.yaml` beside the user catalog (catalog/store.py
    user_catalog_path: $LLM_PLANNER_USER_CATALOG or ~/.llm-planner/user_catalog.yaml)."""
    if os.environ.get(RUNS_FILE_ENV):
        return Path(os.environ[RUNS_FILE_ENV]).expanduser()
    from catalog.store import user_catalog_path
    return user_catalog_path().with_name("user_runs.yaml")


def _read_runs(path: Path) -> list:
    """The runs file's `runs:` list as read, every entry kept (a missing file: none). A file that is not
    a list of runs raises IngestError."""
    if not path.exists():
        return []
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeError, yaml.YAMLError) as exc:
        raise IngestError(f"user runs file {str(path)!r} cannot be read: {' '.join(str(exc).split())}") from None
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, list):
        raise IngestError(f"user runs file {str(path)!r} is not a mapping with a `runs:` list")
    return runs


def load_runs(path: Path | None = None) -> list[dict]:
    """The saved runs (a missing file: none). A file that is not a list of runs raises IngestError."""
    return [r for r in _read_runs(path or user_runs_path()) if isinstance(r, dict) and isinstance(r.get("run"), dict)]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")[:40] or "run"


def _run_entry(result: dict) -> dict:
    """What a saved entry keeps of a run, beside its id, date and file."""
    run = result["_run"]
    return {"model": result["model"], "gpu": result["gpu"],
            "run": {"format": run["format"], "model_read": run["model_read"], "settings": dict(run["settings"]),
                    "measured": {k: float(v) for k, v in run["measured"].items()},
                    "lines": dict(run.get("lines", {})), "versions": dict(run.get("versions", {}))}}


def saved_before(result: dict, path: Path | None = None) -> str | None:
    """The id of a saved entry of this very run (the same model, GPU, settings, figures and log lines, wherever its
    file now is), or None. Saving a log again added a second copy, which the Evidence page then counted twice."""
    return _saved_in(_read_runs(path or user_runs_path()), result)


def _saved_in(runs: list, result: dict) -> str | None:
    """saved_before over the runs file's entries already read."""
    mine = _run_entry(result)
    for r in runs:
        if isinstance(r, dict) and {k: r.get(k) for k in mine} == mine:
            return str(r.get("id"))
    return None


def save_run(result: dict, path: Path | None = None) -> str:
    """Append the run to the user's runs file (written whole to a temporary file, then renamed);
    returns its id. A run saved before (saved_before) is not added again: its id is returned."""
    path = path or user_runs_path()
    # every entry as read, the ones load_runs cannot use too (a hand edit, an older version's): a save
    # appends, it never deletes what the user wrote (they were dropped from the file before)
    runs = _read_runs(path)
    before = _saved_in(runs, result)
    if before is not None:
        return before
    taken = {r.get("id") for r in runs if isinstance(r, dict)}
    base = f"user-{result['format'].replace('.', '')}-{_slug(result['model'])}-{_slug(Path(result['file']).stem)}"
    ident, n = base, 2
    while ident in taken:
        ident, n = f"{base}-{n}", n + 1
    entry = {"id": ident, "saved": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "file": result["file"],
             **_run_entry(result)}
    runs.append(entry)
    text = ("# LLM hardware planner: your own runs (llm-planner ingest FILE --gpu ID --save; docs/ingest.md).\n"
            + yaml.safe_dump({"runs": runs}, sort_keys=False, allow_unicode=True, width=100))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
    except OSError as exc:  # it read "error: File exists: /etc/passwd", naming neither the runs file nor the setting
        raise IngestError(f"the run cannot be saved to {str(path)!r}: {exc.strerror or exc} ({exc.filename}); accepted: a "
                          f"writable folder for your runs (${RUNS_FILE_ENV} names the file, else user_runs.yaml beside "
                          "the user catalog, $LLM_PLANNER_USER_CATALOG); without --save nothing is written") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return ident


def _set_aside_line(entry: dict, exc: Exception) -> str:
    """One line naming a saved run that cannot be estimated, the reason and what becomes of it."""
    reason = f"has no {exc}" if isinstance(exc, KeyError) else " ".join(str(exc).split())
    return (f"your run {str(entry.get('id', '(no id)'))!r} ({user_runs_path()}): {reason}; it was set aside (kept in "
            "the file as it is), every other run is listed")


def user_evidence_rows(models: pd.DataFrame, gpus: pd.DataFrame, runs: list[dict] | None = None,
                       warn: bool = True) -> pd.DataFrame:
    """The saved runs as evidence rows (planner/evidence.py EVIDENCE_JSON_KEYS), re-estimated now,
    source_kind "user". A run that cannot be estimated (its model or GPU has left the catalog, a
    setting out of range: the file is YAML a user may edit) is set aside alone, as catalog/store.py
    sets aside a bad user-catalog entry: named in one line (warned when `warn`, and listed in the
    frame's attrs["user_runs_problems"], which the Evidence page shows), every other run listed."""
    import warnings

    from planner.evidence import EVIDENCE_JSON_KEYS, TARGET_PCT, TOLERANCE_PCT
    if runs is None:
        try:
            runs = load_runs()
        except IngestError as exc:  # the published rows still show; the file is named once
            warnings.warn(f"{exc}; your runs are left out", stacklevel=2)
            runs = []
    rows, problems = [], []
    for entry in runs:
        try:
            figures = compare(entry["run"], entry["model"], entry["gpu"], models, gpus)
        except (IngestError, KeyError, ValueError, TypeError) as exc:
            problems.append(_set_aside_line(entry, exc))
            if warn:
                warnings.warn(problems[-1], stacklevel=2)
            continue
        for f in figures:
            err = f["error_pct"]
            scale, unit = (GIB, "GiB") if f["unit"] == "B" else (1, f["unit"])  # bytes as the references show them
            est = f["estimate"] / scale if f["estimate"] is not None else np.nan
            rows.append({
                "id": f"{entry['id']}-{f['figure'].replace('_', '-')}", "kind": "measured", "metric": f["metric"],
                "reference": round(f["measured"] / scale, 3), "estimate": round(est, 3),
                "unit": unit, "error_pct": err if err is not None else np.nan,
                "recipe": entry["run"]["settings"].get("recipe", "hf" if entry["run"]["format"] == "training"
                                                       else entry["run"]["format"]),
                "explanation": "", "model": entry["model"], "per_gpu": True,
                "within_10pct": err is not None and abs(err) <= TOLERANCE_PCT,
                "within_15pct": err is not None and abs(err) <= TARGET_PCT,
                "source": f"your run: {entry.get('file', '')} ({entry['run']['format']}), saved {entry.get('saved', '')}",
                "url": "", "setup_note": f["source_line"], "estimate_note": "", "counter": f["counter"],
                "source_kind": "user",
                "safe_estimate": round(f["safe_estimate"] / scale, 3) if f["safe_estimate"] is not None else np.nan})
    out = pd.DataFrame(rows, columns=list(EVIDENCE_JSON_KEYS))
    out.attrs["user_runs_problems"] = problems
    return out
