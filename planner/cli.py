"""`python -m engine`: a thin command line over `engine.estimate` (the contract in README).

Bad values exit with status 2 and one line on stderr that names the value and what is
accepted; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from engine.estimate import estimate
from planner.report import format_estimate, format_what_if, sweep_frame, to_csv
from engine.speed import format_speed_cost

GIB = 2**30

JSON_KEYS = (
    "weights_bytes", "gradients_bytes", "optimizer_bytes", "optimizer_temp_bytes", "autocast_copies_bytes",
    "activations_bytes", "logits_bytes", "kv_cache_bytes", "workspace_bytes", "paged_optimizer_bytes",
    "runtime_overhead_bytes", "peak_bytes", "peak_phase", "cpu_bytes", "params", "trainable_params",
    "forward_phase_bytes", "loss_backward_phase_bytes", "backward_phase_bytes", "optimizer_phase_bytes",
    "prefill_phase_bytes", "logits_phase_bytes",
)
# one ranked change of --what-if in --json (planner.planning.what_if's columns)
WHAT_IF_KEYS = ("rank", "change", "overrides", "fits", "gpus", "gpus_to_fit", "peak_bytes", "saved_bytes",
                "memory_used_fraction", "impact", "impact_label", "tradeoff")
FIT_KEYS = ("gpu", "usable_bytes", "fits", "gpus_needed", "max_batch", "max_seq", "memory_used_fraction")
# speed and cost (engine/speed.py): GPU-dependent figures with --gpu; FLOPs and settings always
SPEED_KEYS = ("decode_tokens_per_s", "aggregate_tokens_per_s", "prefill_s", "bound", "usd_per_million_tokens",
              "train_flops", "train_hours", "gpu_hours", "cloud_cost_usd", "power_cost_usd", "purchase_usd",
              "power_usd_per_month", "rent_usd_per_month", "breakeven_months", "usd_per_gb_vram")
SPEED_SETTING_KEYS = ("tokens", "mfu", "bandwidth_efficiency", "prompt_tokens", "usd_per_kwh", "utilization",
                      "hours_per_month")
# CLI flag -> scenario column for the speed and cost settings (checked by engine/speed.py)
SPEED_FLAGS = {"tokens": "tokens", "mfu": "mfu", "bandwidth_efficiency": "bandwidth_efficiency",
               "prompt_tokens": "prompt_tokens", "usd_per_kwh": "usd_per_kwh", "utilization": "utilization",
               "hours_per_month": "hours_per_month"}


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        raise CliError(message)


def _positive_int(name):
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} {text!r} is not a whole number; accepted: a whole number >= 1") from None
        if not math.isfinite(value) or value != int(value) or value < 1:
            raise argparse.ArgumentTypeError(f"{name} {text!r} is not accepted; accepted: a whole number >= 1")
        return int(value)
    return parse


def _nonneg_float(name, below_one=False):
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} {text!r} is not a number") from None
        if not math.isfinite(value) or value < 0 or (below_one and value >= 1):
            raise argparse.ArgumentTypeError(f"{name} {text!r} is not accepted; accepted: a number >= 0" + (" and < 1" if below_one else ""))
        return value
    return parse


def _number(name):
    """A finite number (1e9 style accepted); its range is checked by the engine."""
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} {text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{name} {text!r} is not accepted; accepted: a finite number")
        return value
    return parse


def _add_scenario_args(p: argparse.ArgumentParser, single: bool) -> None:
    p.add_argument("--model", required=single and False, help="catalog model id (see: catalog models)")
    p.add_argument("--model-config", type=Path, help="a Hugging Face config.json to estimate instead of a catalog model")
    p.add_argument("--task", default="train", help="train | infer")
    p.add_argument("--method", default=None, help="full | lora | qlora | freeze (training)")
    p.add_argument("--precision", default=None,
                   help="training: fp32, amp_bf16, amp_fp16, bf16, fp16, mixed_bf16, mixed_fp16; "
                        "inference: fp32, bf16, fp16, int8, int4, nf4, q8_0, q6_k, q5_k_m, q4_k_m, q4_0, q3_k_m, q2_k")
    p.add_argument("--optimizer", default="adamw", help="adamw, adamw_fused, adamw_8bit, paged_adamw_8bit, sgd, adafactor")
    p.add_argument("--batch", type=_positive_int("batch"), default=1, help="micro-batch per GPU (sequences)")
    p.add_argument("--seq", type=_positive_int("seq"), default=None, help="sequence length in tokens (default 2048, or the model's context if shorter)")
    p.add_argument("--grad-checkpointing", action="store_true")
    p.add_argument("--lora-rank", type=_positive_int("lora rank"), default=8)
    p.add_argument("--lora-targets", default="q_proj,v_proj", help="comma list of q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj, or 'all'")
    p.add_argument("--freeze-layers", type=_positive_int("freeze layers"), default=2, help="trainable last layers for --method freeze")
    p.add_argument("--base-precision", default="auto", help="frozen base for lora/qlora: auto, fp32, bf16, fp16, int8, int4, nf4")
    p.add_argument("--kv-precision", default="auto", help="KV cache: auto (as the activations), fp32, bf16, fp16, fp8, int8, int4")
    p.add_argument("--zero", default="0", help="ZeRO stage 0, 1, 2 or 3 (3 = FSDP full shard)")
    p.add_argument("--offload", default="none", help="none | optimizer | all")
    p.add_argument("--gpus", type=_positive_int("gpus"), default=1, help="total GPU count")
    p.add_argument("--tp", type=_positive_int("tp"), default=None, help="tensor-parallel degree (inference default: all GPUs)")
    p.add_argument("--pp", type=_positive_int("pp"), default=1, help="pipeline-parallel degree")
    p.add_argument("--headroom", type=_nonneg_float("headroom", below_one=True), default=0.0, help="fraction of GPU memory kept free (0.1 = 10%%)")
    p.add_argument("--prefill-logits", default="last", help="inference: last (as generate()) | all positions")
    p.add_argument("--allow-long-context", action="store_true", help="accept a seq beyond the model's context length")
    p.add_argument("--context-mib", type=_nonneg_float("context-mib"), default=None, help="runtime overhead: CUDA context per GPU, MiB (default 430)")
    p.add_argument("--fragmentation", type=_nonneg_float("fragmentation", below_one=True), default=None, help="runtime overhead: allocator share of the tensors' peak (default 0.05)")
    p.add_argument("--tokens", type=_number("tokens"), default=None, help="training tokens for time and cost (default 1e9)")
    p.add_argument("--mfu", type=_number("mfu"), default=None, help="fraction of dense peak FLOPS reached, 0-1 (default 0.49, LLaMA paper)")
    p.add_argument("--bandwidth-efficiency", type=_number("bandwidth-efficiency"), default=None, help="fraction of memory bandwidth reached in decode, 0-1 (default 0.65, llama.cpp measurements)")
    p.add_argument("--prompt-tokens", type=_number("prompt-tokens"), default=None, help="inference: prompt length per sequence for the prefill time (default: seq)")
    p.add_argument("--usd-per-kwh", type=_number("usd-per-kwh"), default=None, help="electricity price for owned GPUs (default 0.13)")
    p.add_argument("--utilization", type=_number("utilization"), default=None, help="fraction of the month the GPUs are busy, 0-1 (default 1)")
    p.add_argument("--hours-per-month", type=_number("hours-per-month"), default=None, help="hours in a month (default 730)")


def build_parser() -> Parser:
    parser = Parser(prog="python -m engine", description="LLM hardware planner: memory per GPU, fit, and the catalog.")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    est = sub.add_parser("estimate", help="estimate one scenario")
    _add_scenario_args(est, single=True)
    est.add_argument("--gpu", default="", help="catalog GPU id to fit against (see: catalog gpus)")
    est.add_argument("--what-if", action="store_true",
                     help="with --gpu: every change that would save memory (checkpointing, LoRA/QLoRA, 8-bit "
                          "optimizer, ZeRO-3, offload, quantized weights, ...), ranked by whether and on how "
                          "many GPUs it fits, as the dashboard's Breakdown page ranks them")
    est.add_argument("--json", action="store_true", help="print one JSON object")
    sw = sub.add_parser("sweep", help="the full matrix (every model x GPU x method) as CSV")
    sw.add_argument("--out", type=Path, help="CSV file to write (default: standard output)")
    sw.add_argument("--models", default="", help="comma list of model ids (default: all)")
    sw.add_argument("--gpu-ids", default="", help="comma list of GPU ids (default: all)")
    sw.add_argument("--methods", default="full,lora,qlora", help="comma list of training methods")
    _add_scenario_args(sw, single=False)
    cat = sub.add_parser("catalog", help="list catalog ids")
    cat.add_argument("what", help="gpus | models | aliases")
    sub.add_parser("evidence", help="estimate vs every published reference")
    return parser


def _scenario_from_args(args, models: pd.DataFrame) -> dict:
    task = args.task
    if task not in ("train", "infer"):
        raise CliError(f"task {task!r} is not accepted; accepted: train, infer")
    try:
        zero = int(args.zero)
    except ValueError:
        raise CliError(f"zero {args.zero!r} is not accepted; accepted: 0, 1, 2 or 3") from None
    precision = args.precision or ("bf16")
    method = args.method or "full"
    seq = args.seq
    if seq is None:
        ctx = int(models.loc[models["id"] == args.model, "max_context"].iloc[0]) if (models["id"] == args.model).any() else 2048
        seq = min(2048, ctx)
    tp = args.tp if args.tp is not None else (args.gpus // args.pp if task == "infer" else 1)
    sc = dict(
        model=args.model, task=task, method=method if task == "train" else "full", precision=precision,
        optimizer=args.optimizer, batch=args.batch, seq=seq, grad_checkpointing=args.grad_checkpointing,
        lora_rank=args.lora_rank, lora_targets=args.lora_targets, freeze_layers=args.freeze_layers,
        zero=zero, offload=args.offload, gpus=args.gpus, tp=tp, pp=args.pp,
        base_precision=args.base_precision, kv_precision=args.kv_precision, headroom=args.headroom,
        prefill_logits=args.prefill_logits, allow_long_context=args.allow_long_context,
    )
    if task == "infer" and args.method not in (None, "full", "none"):
        raise CliError(f"method {args.method!r} applies to training; for --task infer leave --method out")
    sc.update(_speed_settings(args))
    return sc


def _speed_settings(args) -> dict:
    """The speed and cost settings the user gave (the engine supplies the rest)."""
    return {column: getattr(args, flag) for flag, column in SPEED_FLAGS.items() if getattr(args, flag, None) is not None}


def _overhead(args) -> dict:
    out = {}
    if args.context_mib is not None:
        out["context_bytes"] = args.context_mib * 2**20
    if args.fragmentation is not None:
        out["fragmentation"] = args.fragmentation
    return out


def _models_with_config(args, catalog_models: pd.DataFrame) -> pd.DataFrame:
    if not args.model_config:
        if not args.model:
            raise CliError("--model is required (a catalog model id, see: python -m engine catalog models), or give --model-config")
        return catalog_models
    from catalog.user import model_from_config_file  # lazy: only this path reads JSON files
    record = model_from_config_file(args.model_config)
    if args.model and args.model != record["id"]:
        record["id"] = args.model
    args.model = record["id"]
    frame = pd.DataFrame([record])
    return pd.concat([catalog_models[catalog_models["id"] != record["id"]], frame], ignore_index=True)


def _jsonable(value):
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if value is pd.NA or value is None:
        return None
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            return None
        return int(round(value)) if float(value).is_integer() or abs(value) > 1e6 else float(value)
    return value if isinstance(value, (int, str)) else str(value)


def cmd_estimate(args) -> int:
    from catalog import default_catalog
    cat = default_catalog()
    models = _models_with_config(args, cat.models(include_user=True))
    sc = _scenario_from_args(args, models)
    if args.gpu:
        sc["gpu"] = args.gpu
    elif args.what_if:
        raise CliError("--what-if needs --gpu to fit against; accepted: a catalog GPU id (see: catalog gpus)")
    gpus = cat.gpus(include_user=True) if args.gpu else None
    frame = estimate(pd.DataFrame([sc]), models, gpus, **_overhead(args))
    row = frame.iloc[0]
    changes, hint_error = None, None
    if args.what_if:
        changes = _what_if(sc, models, gpus, args)
    elif args.gpu and not args.json and not bool(row["fits"]):
        try:  # a hint under the estimate: its failure must not cost the user the estimate
            changes = _what_if(sc, models, gpus, args)
        except ValueError as exc:
            hint_error = str(exc)
    if args.json:
        keys = list(dict.fromkeys(("model", "task", "method", "precision", "optimizer", "batch", "seq",
                                   "grad_checkpointing", "zero", "offload", "gpus", "tp", "pp") + JSON_KEYS
                                  + (FIT_KEYS + SPEED_KEYS if args.gpu else ("train_flops",)) + SPEED_SETTING_KEYS))
        data = {k: _jsonable(row[k]) for k in keys if k in row.index}
        if "breakeven_months" in data and row["breakeven_months"] == math.inf:
            data["breakeven_months"] = "inf"  # renting never costs more than the power; float("inf") reads it
        if args.what_if:
            data["what_if"] = [{k: _jsonable(r[k]) for k in WHAT_IF_KEYS}
                               for _, r in changes[changes["rank"] > 0].iterrows()]
        print(json.dumps(data, indent=2))
        return 0
    print(format_estimate(row))
    speed = format_speed_cost(row)
    if speed:
        print(speed)
    if args.what_if:
        print("what if (each change estimated on this GPU; ranked: fits first, fewest GPUs, least impact):")
        print(format_what_if(changes))
    elif changes is not None:
        fitting = changes[(changes["rank"] > 0) & changes["fits"].fillna(False).astype(bool)]
        if len(fitting):
            print("changes that fit, best first (all changes: --what-if):")
            print(format_what_if(fitting, limit=3))
        else:
            print("no single change fits; every change and the GPUs it needs: --what-if")
    elif hint_error:
        print(f"(no changes to suggest: {hint_error})")
    return 0


def _what_if(sc: dict, models: pd.DataFrame, gpus: pd.DataFrame, args) -> pd.DataFrame:
    from planner.planning import what_if  # lazy: only a scenario with a GPU needs it
    return what_if(sc, models, gpus, _overhead(args))


def cmd_sweep(args) -> int:
    from catalog import default_catalog
    cat = default_catalog()
    models = cat.models(include_user=True)
    gpus = cat.gpus(include_user=True)
    model_ids = [m for m in args.models.split(",") if m] or list(models["id"])
    gpu_ids = [g for g in args.gpu_ids.split(",") if g] or list(gpus["id"])
    methods = [m for m in args.methods.split(",") if m]
    unknown = [g for g in gpu_ids if g not in set(gpus["id"])]
    if unknown:
        raise CliError(f"gpu {unknown[0]!r} is not in the catalog; accepted: {', '.join(gpus['id'])}")
    base = dict(task=args.task, optimizer=args.optimizer, batch=args.batch, seq=args.seq or 2048,
                grad_checkpointing=args.grad_checkpointing, lora_rank=args.lora_rank, lora_targets=args.lora_targets,
                zero=int(args.zero) if str(args.zero).isdigit() else args.zero, offload=args.offload,
                headroom=args.headroom, allow_long_context=True)
    if args.precision:
        base["precision"] = args.precision
    base.update(_speed_settings(args))
    frame = sweep_frame(models, gpus, model_ids, gpu_ids, methods, base, _overhead(args))
    text = to_csv(frame)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {len(frame):,} rows to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_catalog(args) -> int:
    from catalog import default_catalog
    cat = default_catalog()
    if args.what == "gpus":
        ids = cat.gpus(include_user=True)["id"]
    elif args.what == "models":
        ids = cat.models(include_user=True)["id"]
    elif args.what == "aliases":
        al = cat.aliases()
        ids = [f"{a}\t{c} x {g}" for a, g, c in zip(al["alias"], al["gpu"], al["count"])]
    else:
        raise CliError(f"catalog {args.what!r} is not accepted; accepted: gpus, models, aliases")
    for i in ids:
        print(i)
    return 0


def cmd_evidence(args) -> int:
    from catalog import default_catalog
    from planner.evidence import evidence_table
    cat = default_catalog()
    table = evidence_table(cat.references(), cat.models(), cat.gpus())
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 60,
                           "display.max_rows", 500):
        print(table[["id", "kind", "metric", "reference", "estimate", "unit", "error_pct", "explanation"]].to_string(index=False))
    return 0


def main(argv: list[str] | None = None) -> int:
    import warnings
    warnings.formatwarning = lambda message, *args, **kwargs: f"warning: {message}\n"
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not args.command:
            parser.print_help()
            return 2
        handler = {"estimate": cmd_estimate, "sweep": cmd_sweep, "catalog": cmd_catalog, "evidence": cmd_evidence}[args.command]
        return handler(args)
    except (CliError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {exc.strerror or exc}: {getattr(exc, 'filename', '') or ''}".rstrip(": "), file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
