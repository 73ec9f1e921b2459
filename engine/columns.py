"""The column tables: every scenario column and every result column, declared once.

Every surface is generated from these two tables (docs/columns.md):

  * the command line's scenario flags, their parsers, defaults and help (planner/cli.py);
  * the dashboard's sidebar fields and URL keys (app/state.py FIELDS);
  * `estimate --json`'s keys (planner/cli.py json_keys);
  * the sweep CSV's columns (all result columns, in RESULT order: planner/report.py);
  * the README's two column tables (python -m planner.columns_doc --write).

A scenario column's engine default, accepted range and choices are the engine's own
(engine/scenarios.py DEFAULTS, INT_RANGES, LIMITS, CHOICES; engine/speed.py SETTINGS and its
ranges; engine/constants.py for the runtime-overhead settings): the table reads them, it never
types them again, so a surface cannot drift from what the engine accepts. What the table adds is
what only a surface needs: the help line, the flag, the sidebar field and its label, whether the
key is in --json. tests/test_columns.py checks every surface against the tables.

Adding a scenario column: its default and check in engine/scenarios.py (its physics), one row
here, its test. The flag, the sidebar field (if it has one), the URL key, the JSON key, the CSV
column and the README line follow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import engine.constants as C
import engine.speed as speed
from engine.scenarios import CHOICES, DEFAULTS, FRACTION_COLUMNS, INT_RANGES, LIMITS, PRECISIONS
from engine.stacks import RECIPE_NAMES, SWITCHES

ENGINE = "engine"  # a flag's parser default: the engine's default (always sent)
DECIDE = None      # a flag's parser default: left out of the request, engine/rules.py decides


@dataclass(frozen=True)
class Sidebar:
    """A dashboard field (app/state.py): its session-state and URL key, the sidebar's default
    (the dashboard's first screen, which may differ from the engine's: LoRA, checkpointing on),
    its kind (choice | int | number | bool | multi) and, where it narrows the column's, options or bounds. A field
    need not be in the sidebar: the Budget page draws the buy-vs-rent ones; each is in the URL and the settings."""
    key: str
    default: object
    kind: str
    options: tuple | None = None
    low: int | None = None
    high: int | None = None


@dataclass(frozen=True)
class Column:
    """One scenario column (or estimate() setting): what it is, what is accepted, its surfaces."""
    name: str
    kind: str                 # choice | int | float | bool | text
    help: str
    default: object = None    # the engine's default (None: the row's own value decides, e.g. prompt_tokens = seq)
    choices: tuple = ()
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    accepted: str = ""        # the words of an error message ("a fraction >= 0.001 and <= 1, e.g. 0.4")
    group: str = "scenario"   # scenario | stack | speed | overhead (an estimate() keyword, not a frame column)
    cli: str | None = None    # the flag ("--batch"); None: not on the command line
    cli_default: object = ENGINE  # ENGINE: the parser sends the engine default; DECIDE: left out when not given
    cli_checks: bool = True   # the parser checks the value (False: the engine's own check names it)
    cli_scale: float = 1.0    # flag value x scale = the setting (--context-mib: MiB)
    default_text: str = ""    # the default in words, where the value alone does not say it
    json: bool = True         # the decided value is a key of estimate --json
    sidebar: tuple[Sidebar, ...] = field(default_factory=tuple)

    @property
    def dest(self) -> str:
        """argparse's attribute for the flag."""
        return self.cli[2:].replace("-", "_") if self.cli else self.name

    def describe_default(self) -> str:
        if self.default_text:
            return self.default_text
        if self.kind == "bool":
            return "off"
        value = self.default / self.cli_scale if isinstance(self.default, float) else self.default  # the flag's unit
        if isinstance(value, float) and value >= 1e6 and value.is_integer():
            return f"{value:.0e}".replace("e+0", "e").replace("e+", "e")  # 1e9
        return f"{value:g}" if isinstance(value, float) else str(value)

    def accepted_text(self) -> str:
        if self.accepted:
            return self.accepted
        if self.choices:
            return ", ".join(map(str, self.choices))
        if self.kind == "int":
            return f"a whole number from {self.low:,.0f} to {self.high:,.0f}"
        if self.kind == "float":
            lo = f"{'>' if self.low_open else '>='} {self.low:g}"
            hi = f"{'<' if self.high_open else '<='} {self.high:g}"
            return f"a number {lo} and {hi}"
        if self.kind == "bool":
            return "on or off (a switch)"
        return "text"


def read_number(text) -> float:
    """A number as people type it in ASCII (1, 0.5, 1e9), for every surface that reads one from text: the CLI's
    flags (planner/cli.py) and the dashboard's URL keys (app/state.py), so that both take the same texts. Python's
    float() also reads other scripts' digits ("٣" and "３" are 3), which would pass unseen into a report: refused.
    ValueError("ASCII digits"), ("not a number") or ("not finite") says which."""
    text = str(text).strip()
    if not text.isascii():
        raise ValueError("ASCII digits")
    try:
        value = float(text)
    except ValueError:
        raise ValueError("not a number") from None
    if not math.isfinite(value):
        raise ValueError("not finite")
    return value


def _int(name: str, help: str, cli: str | None = None, **kw) -> Column:
    low, high = INT_RANGES[name]
    return Column(name, "int", help, DEFAULTS[name], low=low, high=high, cli=cli, **kw)


def _choice(name: str, help: str, cli: str | None = None, **kw) -> Column:
    return Column(name, "choice", help, DEFAULTS[name], choices=tuple(CHOICES[name]), cli=cli, **kw)


def _speed(name: str, help: str, **kw) -> Column:
    low, low_in, high, high_in, accepted = speed._RANGES[name]
    kind = "int" if name == "prompt_tokens" else "float"
    return Column(name, kind, help, speed.SETTINGS[name], low=low, high=high, low_open=not low_in,
                  high_open=not high_in, accepted=accepted, group="speed", cli="--" + name.replace("_", "-"),
                  cli_default=DECIDE, json=True, **kw)


_TRAIN_PRECISIONS = ", ".join(C.TRAIN_PRECISIONS)
_INFER_PRECISIONS = ", ".join(C.INFER_PRECISIONS)

SCENARIO: tuple[Column, ...] = (
    Column("model", "text", "catalog model id (see: catalog models)", None, cli="--model", cli_default=DECIDE,
           accepted="a catalog model id (python -m engine catalog models)",
           default_text="none: --model or --model-config is required",
           sidebar=(Sidebar("model", "llama-3-8b", "choice"),)),
    _choice("task", "train | infer", cli="--task",
            sidebar=(Sidebar("task", "train", "choice"),)),
    _choice("method", "full | lora | qlora | freeze (training)", cli="--method", cli_default=DECIDE, cli_checks=False,
            sidebar=(Sidebar("method", "lora", "choice"),)),
    Column("precision", "choice", f"training: {_TRAIN_PRECISIONS}; inference: {_INFER_PRECISIONS}", DEFAULTS["precision"],
           choices=PRECISIONS, cli="--precision", cli_default=DECIDE, cli_checks=False,
           sidebar=(Sidebar("train_precision", "bf16", "choice", tuple(C.TRAIN_PRECISIONS)),
                    Sidebar("infer_precision", "bf16", "choice", tuple(C.INFER_PRECISIONS)))),
    _choice("optimizer", ", ".join(C.OPTIMIZERS), cli="--optimizer", cli_checks=False,
            sidebar=(Sidebar("optimizer", "adamw", "choice"),)),
    _int("batch", "micro-batch per GPU (sequences)", cli="--batch",
         sidebar=(Sidebar("batch", 1, "int"),)),
    # (0 in the engine means "decide": engine/rules.py; a flag or a field asks for 1 or more)
    Column("seq", "int", "sequence length in tokens", DEFAULTS["seq"], low=1, high=INT_RANGES["seq"][1], cli="--seq",
           cli_default=DECIDE, default_text="2048, or the model's context if shorter",
           sidebar=(Sidebar("seq", 2048, "int", low=1),)),
    Column("grad_checkpointing", "bool", "gradient checkpointing: keep each layer's input, recompute the rest in backward",
           DEFAULTS["grad_checkpointing"], cli="--grad-checkpointing",
           sidebar=(Sidebar("grad_checkpointing", True, "bool"),)),
    Column("lora_rank", "int", "LoRA rank r", DEFAULTS["lora_rank"], low=1, high=LIMITS["lora_rank"], cli="--lora-rank",
           sidebar=(Sidebar("lora_rank", 8, "int"),)),
    Column("lora_targets", "text", "comma list of " + ",".join(C.LORA_MODULES) + ", or 'all'", DEFAULTS["lora_targets"],
           choices=tuple(C.LORA_MODULES), accepted="a comma list of " + ", ".join(C.LORA_MODULES) + ", or all",
           cli="--lora-targets", sidebar=(Sidebar("lora_targets", ("q_proj", "v_proj"), "multi"),)),
    # (the sidebar takes whole percent, as the headroom: 5 = 0.05; app/state.py divides by 100)
    Column("lora_dropout", "float", "LoRA dropout p (peft lora_dropout, lora and qlora): each adapted module keeps "
                                    "its dropout mask and output for backward (recipe litgpt: one for q, k and v "
                                    "together)", DEFAULTS["lora_dropout"],
           low=0.0, high=1.0, high_open=True, accepted=FRACTION_COLUMNS["lora_dropout"], cli="--lora-dropout",
           default_text="0 (peft's LoraConfig default)",
           sidebar=(Sidebar("lora_dropout_pct", 0, "int", low=0, high=99),)),
    _int("freeze_layers", "trainable last layers for --method freeze (at most the model's layers)", cli="--freeze-layers",
         sidebar=(Sidebar("freeze_layers", 2, "int"),)),
    _choice("base_precision", "frozen base for lora/qlora: auto, or a weight type", cli="--base-precision", cli_checks=False,
            sidebar=(Sidebar("base_precision", "auto", "choice", ("auto", "nf4", "nf4_nodq", "int8", "int4")),)),  # the QLoRA bases
    _choice("kv_precision", "KV cache: auto (as the activations), or a type", cli="--kv-precision", cli_checks=False,
            sidebar=(Sidebar("kv_precision", "auto", "choice"),)),
    _int("ep", "expert parallel for mixture-of-experts models: 1 (experts split by --tp), or a multiple of tp dividing "
               "gpus / pp (whole experts spread over those GPUs)", cli="--ep"),
    _choice("kv_policy", "KV cache of sliding-window and latent-attention layers (auto: full for a transformers "
            "prefill, windowed for a GGUF precision on llama.cpp)", cli="--kv-policy",
            cli_checks=False,
            # engine/rules.py decides "auto" by the stack that runs the row (issue 28)
            sidebar=(Sidebar("kv_policy", "auto", "choice", ("auto", "windowed", "full", "latent")),)),
    _int("zero", "ZeRO stage 0, 1, 2 or 3 (3 = FSDP full shard)", cli="--zero", accepted="0, 1, 2 or 3",
         sidebar=(Sidebar("zero", 3, "choice", (0, 1, 2, 3)),)),
    _choice("offload", "none | optimizer | all", cli="--offload", cli_checks=False,
            sidebar=(Sidebar("offload", "none", "choice"),)),
    _int("gpus", "total GPU count", cli="--gpus", sidebar=(Sidebar("gpus", 1, "int", high=1024),)),
    _int("tp", "tensor-parallel degree", cli="--tp", cli_default=DECIDE,
         default_text="inference splits over the GPUs and heads, training 1"),
    _int("pp", "pipeline-parallel degree (training: 1F1B, the first stage holds pp micro-batches of its layers)",
         cli="--pp", cli_default=DECIDE, default_text="see --tp"),
    _int("cp", "context parallel (training): the sequence split over cp GPUs (torch context_parallel, ring "
               "attention); gpus = data-parallel x tp x pp x cp", cli="--cp"),
    Column("headroom", "float", "fraction of GPU memory kept free (0.1 = 10%)", DEFAULTS["headroom"], low=0.0, high=1.0,
           high_open=True, cli="--headroom", default_text="0.1 = 10%, as on the dashboard",
           sidebar=(Sidebar("headroom_pct", round(DEFAULTS["headroom"] * 100), "int", low=0, high=50),)),
    _choice("prefill_logits", "inference: last (as generate()) | all positions", cli="--prefill-logits", cli_checks=False),
    Column("allow_long_context", "bool", "accept a seq (serve: a --max-model-len) beyond the model's context length", DEFAULTS["allow_long_context"],
           cli="--allow-long-context", sidebar=(Sidebar("allow_long_context", False, "bool"),)),
    Column("gpu", "text", "catalog GPU id to fit against (see: catalog gpus)", DEFAULTS["gpu"],
           accepted="a catalog GPU id (python -m engine catalog gpus)", default_text="none (no fit columns)",
           cli=None, sidebar=(Sidebar("gpu", "rtx-4090", "choice"),)),
    # the software stack (issue 13, engine/stacks.py): a recipe, and switches that default to its values
    Column("recipe", "choice", "software stack whose defaults the switches take: " + " | ".join(RECIPE_NAMES),
           DEFAULTS["recipe"], choices=tuple(RECIPE_NAMES), group="stack", cli="--recipe", cli_default=DECIDE,
           sidebar=(Sidebar("recipe", DEFAULTS["recipe"], "choice"),)),
    *(Column(switch, "choice", " | ".join(values) + " (auto: as the recipe sets it; docs/stacks.md)", DEFAULTS[switch],
             choices=tuple(values), group="stack", cli="--" + switch.replace("_", "-"), cli_default=DECIDE,
             sidebar=(Sidebar(switch, "auto", "choice"),))
      for switch, values in SWITCHES.items()),
    # (0 means "the recipe's" on every surface: engine/rules.py decides it)
    Column("galore_rank", "int", "GaLore's projection rank (the GaLore optimizers): the low-rank gradient and its two "
                                 "AdamW states are rank x the larger side of each projected matrix", DEFAULTS["galore_rank"],
           low=0, high=INT_RANGES["galore_rank"][1], cli="--galore-rank", cli_default=DECIDE,
           accepted=f"a whole number from 1 to {INT_RANGES['galore_rank'][1]:,}, or 0 for the recipe's",
           default_text=f"the recipe's: {C.GALORE_RANK}, or {C.GALORE_RANK_BY_RECIPE['llama-factory']} under llama-factory",
           sidebar=(Sidebar("galore_rank", 0, "int", low=0),)),
    # the training objective (engine/scenarios.py OBJECTIVES; engine/components.py dpo_parts)
    _choice("objective", "training objective: sft (next-token loss) | dpo (preference pairs: --batch counts pairs, "
                         "chosen and rejected in one forward, a reference model as --dpo-reference says)",
            cli="--objective", cli_checks=False, sidebar=(Sidebar("objective", "sft", "choice"),)),
    # the runtime overhead (estimate()'s keywords; engine/constants.py, with their sources)
    Column("context_bytes", "float", "runtime overhead: CUDA context per GPU, MiB", float(C.CUDA_CONTEXT_BYTES),
           low=0.0, high=65536.0, accepted="a number >= 0 and <= 65536 (MiB per GPU)", group="overhead",
           cli="--context-mib", cli_default=DECIDE, cli_scale=2.0**20, json=False),
    Column("fragmentation", "float", "runtime overhead: allocator share of the tensors' peak", C.FRAGMENTATION_FRACTION,
           low=0.0, high=0.9, group="overhead", cli="--fragmentation", cli_default=DECIDE, json=False),
    # speed and cost (engine/speed.py, each default with its source there)
    _speed("tokens", "training tokens for time and cost"),
    _speed("mfu", "fraction of dense peak FLOPS reached (LLaMA paper)"),
    _speed("bandwidth_efficiency", "fraction of memory bandwidth reached in decode (llama.cpp measurements)"),
    _speed("prompt_tokens", "inference: prompt length per sequence for the prefill time", default_text="seq"),
    # (the Budget page's "Buy vs rent" fields: utilisation and resale in whole percent, as the headroom)
    _speed("usd_per_kwh", "electricity price for owned GPUs",
           sidebar=(Sidebar("usd_per_kwh", speed.SETTINGS["usd_per_kwh"], "number"),)),
    _speed("utilization", "fraction of the month the GPUs are busy",
           sidebar=(Sidebar("utilization_pct", round(speed.SETTINGS["utilization"] * 100), "int", low=1, high=100),)),
    _speed("hours_per_month", "hours in a month"),
    _speed("pue", "power usage effectiveness multiplying electricity (a data centre ~1.58)",
           sidebar=(Sidebar("pue", speed.SETTINGS["pue"], "number"),)),
    _speed("resale_fraction", "share of the purchase price recovered by selling the cards later; the buy-vs-rent "
                              "break-even weighs the rest",
           sidebar=(Sidebar("resale_pct", round(speed.SETTINGS["resale_fraction"] * 100), "int", low=0, high=99),)),
)
SCENARIO_BY_NAME = {c.name: c for c in SCENARIO}
# the frame's scenario columns (not estimate()'s keywords)
FRAME_COLUMNS = tuple(c.name for c in SCENARIO if c.group != "overhead")


@dataclass(frozen=True)
class Result:
    """One column estimate() adds to the scenario's: its unit, what it means, where it is null."""
    name: str
    unit: str
    help: str
    null: str = ""            # where the value is null / NaN ("" = never)
    json: bool = True         # a key of estimate --json (with --gpu for the fit and speed keys)
    needs_gpu: bool = False   # in --json only with --gpu


_NO_GPU = "no GPU chosen"
_PHASE_NULL = "the row's task has no such phase"


def _phase(name: str, help: str, null: str = _PHASE_NULL) -> Result:
    return Result(f"{name}_phase_bytes", "bytes/GPU", help, null)


RESULT: tuple[Result, ...] = (
    Result("padding", "", "the batch's padding as decided (padded | unpadded)"),
    Result("params", "count", "the model's parameters"),
    Result("trainable_params", "count", "parameters trained"),
    Result("active_params", "count", "parameters one token uses (MoE: routed experts per token + shared; = params if dense)"),
    Result("vision_params", "count", "a vision tower + projector loaded beside the language model (VL models, a GGUF "
                                     "mmproj; in weights_bytes, not in params); 0 for a text model"),
    *(Result(f"{comp}_bytes", "bytes/GPU", f"{what} at the peak phase") for comp, what in (
        ("weights", "weights"), ("gradients", "gradients"), ("optimizer", "optimizer states"),
        ("optimizer_temp", "the optimizer step's temporaries"), ("autocast_copies", "autocast's 16-bit weight copies"),
        ("activations", "activations kept for backward"), ("logits", "logits and the loss's buffers"),
        ("kv_cache", "KV cache"), ("workspace", "working memory (gathered ZeRO-3 units, a layer's transients)"))),
    Result("kv_cache_context_bytes", "bytes/GPU", "the KV cache at the scenario's context: kv_cache_bytes, or where "
                                                  "the peak phase holds none yet (mask: built before the first layer), "
                                                  "what the prefill holds"),
    Result("model_states_bytes", "bytes/GPU", "weights + gradients + optimizer states kept between steps"),
    Result("paged_optimizer_bytes", "bytes/GPU", "optimizer states in paged (unified) memory"),
    Result("runtime_overhead_bytes", "bytes/GPU", "CUDA context + allocator fragmentation x the tensors' peak"),
    Result("peak_bytes", "bytes/GPU", "the tensors' peak + runtime overhead"),
    Result("peak_phase", "", "the phase that sets the peak"),
    _phase("forward", "training: the forward pass"),
    _phase("loss_backward", "training: the loss and the start of backward"),
    _phase("backward", "training: a layer's backward"),
    _phase("backward_end", "training: the end of backward"),
    _phase("grad_reduce", "training: DeepSpeed ZeRO-1/2's gradient reduction after backward (ZeRO-1: every gradient "
                          "beside the rank's partition buffer and the reduction bucket)",
           "rows not under ZeRO stage 1 or 2, and serving rows"),
    _phase("optimizer", "training: the optimizer step"),
    _phase("prefill", "inference: the prefill"),
    _phase("logits", "inference: the logits"),
    _phase("attention", "inference: a prefill's eager attention scores",
           "training rows, and serving rows whose attention is not eager (SDPA, flash)"),
    _phase("load", "inference: loading AutoAWQ's fused modules (every layer's fused QKV beside the original q/k/v, "
                   "the preallocated caches and RoPE tables)", "rows without --int4-kernel autoawq_fused"),
    _phase("mask", "inference: transformers building an SDPA prefill's sliding-window attention mask before the first "
                   "layer (three seq x seq bool tensors from the window on, beside the weights and the embeddings' "
                   "output; no KV cache yet)",
           "training rows, and serving rows without sliding-window layers or not attending through SDPA"),
    Result("cpu_bytes", "bytes", "host memory for offloaded states and activations"),
    Result("allocator_cached_bytes", "bytes/GPU", "freed blocks PyTorch's caching allocator keeps reserved above the "
                                                  "tensors' peak (the dropped 16-bit logits' at the loss backward): "
                                                  "max_memory_reserved and nvidia-smi count them, the allocator frees "
                                                  "them before an OOM, so neither peak_bytes nor the verdict does"),
    Result("usable_bytes", "bytes/GPU", "the GPU's usable memory", _NO_GPU, needs_gpu=True),
    Result("capacity_bytes", "bytes/GPU", "what the tensors' estimate may reach: usable memory less the headroom and "
                                          "runtime overhead, divided by 1 + the verdict margin (below 0 when they leave "
                                          "nothing)", _NO_GPU, needs_gpu=True),
    Result("fits", "", "the safe peak fits the GPU (and the card is compatible: --json and the sweep CSV)", _NO_GPU, needs_gpu=True),
    Result("memory_used_fraction", "fraction", "peak / usable memory", _NO_GPU, needs_gpu=True),
    Result("max_batch", "sequences", "the largest micro-batch that fits", _NO_GPU, needs_gpu=True),
    Result("max_seq", "tokens", "the longest sequence that fits", _NO_GPU, needs_gpu=True),
    Result("gpus_needed", "GPUs", f"the fewest GPUs it fits on (beyond the limit, {C.MAX_GPUS:,}: inf in the frame, null "
                                        f"in --json, 'not within {C.MAX_GPUS:,} GPUs' in the CSV)", _NO_GPU, needs_gpu=True),
    Result("safe_peak_bytes", "bytes/GPU", "the peak the verdicts are decided on: the tensors' peak x (1 + the verdict "
                                           "margin), with the runtime overhead", _NO_GPU, needs_gpu=True),
    Result("verdict_margin_pct", "%", "the verdicts' margin over the tensors' estimate: the band's high side (held-out "
                                      "error and allowances, engine/margins.py)", _NO_GPU, needs_gpu=True),
    Result("fits_at_estimate", "", "the point estimate alone fits (fits may still say no: the margin)", _NO_GPU,
           needs_gpu=True),
    Result("decode_tokens_per_s", "tokens/s", "inference: one sequence's decode speed", _NO_GPU + ", or training",
           needs_gpu=True),
    Result("aggregate_tokens_per_s", "tokens/s", "inference: all sequences' decode speed", _NO_GPU + ", or training",
           needs_gpu=True),
    Result("bound", "", "what limits decode: memory bandwidth or compute", _NO_GPU + ", or training", needs_gpu=True),
    Result("prefill_s", "s", "inference: the prompt's prefill time", _NO_GPU + ", or training", needs_gpu=True),
    Result("usd_per_million_tokens", "$", "inference: cloud cost per million output tokens",
           _NO_GPU + ", training, or no cloud price", needs_gpu=True),
    Result("train_flops", "FLOPs", "training: the job's FLOPs (6 x active parameters x tokens, + attention)",
           "inference rows"),
    Result("train_hours", "h", "training: the job's wall time", _NO_GPU + ", or inference", needs_gpu=True),
    Result("gpu_hours", "GPU-h", "training: GPU-hours of the job", _NO_GPU + ", or inference", needs_gpu=True),
    Result("cloud_cost_usd", "$", "training: the job at the GPU's cloud price", _NO_GPU + ", inference, or no price",
           needs_gpu=True),
    Result("power_cost_usd", "$", "training: the job's electricity on owned GPUs", _NO_GPU + ", or inference",
           needs_gpu=True),
    Result("comm_hours", "h", "training: the job's communication time beside the compute", _NO_GPU + ", or inference",
           needs_gpu=True),
    Result("purchase_usd", "$", "the GPUs' purchase price", _NO_GPU + ", or no price", needs_gpu=True),
    Result("power_usd_per_hour", "$/h", "electricity per hour of the owned GPUs", _NO_GPU, needs_gpu=True),
    Result("power_usd_per_month", "$/month", "electricity per month of the owned GPUs", _NO_GPU, needs_gpu=True),
    Result("rent_usd_per_month", "$/month", "renting the GPUs for the month", _NO_GPU + ", or no cloud price",
           needs_gpu=True),
    Result("breakeven_months", "months", "months of renting that cost the purchase less its resale (inf: never)",
           _NO_GPU + ", or no price", needs_gpu=True),
    Result("usd_per_gb_vram", "$/GB", "purchase price per GB of GPU memory", _NO_GPU + ", or no price", needs_gpu=True),
)
RESULT_BY_NAME = {r.name: r for r in RESULT}


def result_columns() -> tuple[str, ...]:
    """Every column of estimate()'s result, in its order: the scenario's, then the results'."""
    return FRAME_COLUMNS + tuple(r.name for r in RESULT if r.name not in FRAME_COLUMNS)


def json_keys(with_gpu: bool) -> tuple[str, ...]:
    """estimate --json's keys that come from the result row, in the contract's order (keys are
    added, never renamed: planner/cli.py adds the band, compatibility and what-if keys)."""
    scenario = [c.name for c in SCENARIO if c.json and c.group not in ("overhead",) and c.name != "gpu"]
    results = [r.name for r in RESULT if r.json and (with_gpu or not r.needs_gpu)]
    keys = scenario[:]
    if with_gpu:
        keys.append("gpu")
    return tuple(dict.fromkeys(keys + results))


__all__ = ["Column", "Result", "Sidebar", "read_number", "SCENARIO", "SCENARIO_BY_NAME", "RESULT", "RESULT_BY_NAME", "FRAME_COLUMNS",
           "ENGINE", "DECIDE", "result_columns", "json_keys"]
