"""`python -m engine`: a thin command line over `engine.estimate` (the contract in README).

Bad values exit with status 2 and one line on stderr that names the value and what is
accepted; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from engine import buffers, columns, rules, uncertainty
from engine.estimate import estimate
from engine.scenarios import DEFAULTS, LIMITS, did_you_mean, show
from engine.speed import format_speed_cost
from engine.stacks import STACK_COLUMNS
from planner.report import format_estimate, format_what_if, sweep_frame, to_csv

GIB = 2**30

# --json's keys, the decided scenario and the flags are generated from the column tables
# (engine/columns.py): a new column is declared there once. The keys below are the ones --json
# adds beside the result row's (a contract: keys are added, never renamed).
# one ranked change of --what-if in --json (planner.planning.what_if's columns)
WHAT_IF_KEYS = ("rank", "change", "overrides", "fits", "gpus", "gpus_to_fit", "peak_bytes", "saved_bytes",
                "memory_used_fraction", "impact", "impact_label", "tradeoff",
                # issue 28: what the change's fit was decided on (the estimate + the verdict margin)
                "safe_peak_bytes", "fits_at_estimate",
                # how many single changes the row makes (2 or more: the combination tried where none fits alone)
                "change_count",
                # the card's compatibility rules allow the row (a refused row never fits: bf16 on Volta / Turing)
                "compatible")
# the scenario as estimated (the decided values), the columns the what-if changes start from
SCENARIO_COLUMNS = tuple(c.name for c in columns.SCENARIO if c.group in ("scenario", "stack"))
# every --json output carries this (docs/install.md): a whole number, raised when a key is renamed
# or removed or changes meaning; adding a key keeps it. A list output (catalog, evidence) carries
# it in each record, so that the list stays a list.
SCHEMA_VERSION = 1


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    docs_line = ""  # the folder of the docs/*.md the help names (build_parser): one line, a path argparse's wrap would break

    def error(self, message):  # one line, no usage dump
        raise CliError(message)

    def format_help(self) -> str:
        return super().format_help() + (f"\n{self.docs_line}\n" if self.docs_line else "")


def _ascii_number(name: str, text: str, accepted: str) -> float:
    """A number as people type it in ASCII (1, 0.5, 1e9): engine/columns.py read_number, the dashboard's URL
    keys' reader too (other scripts' digits, "٣", are refused)."""
    try:
        return columns.read_number(text)
    except ValueError as exc:
        shown = show(str(text).strip())
        if str(exc) == "ASCII digits":
            raise argparse.ArgumentTypeError(f"{name} {shown} is not accepted; accepted: {accepted} (ASCII digits)") from None
        if str(exc) == "not a number":
            raise argparse.ArgumentTypeError(f"{name} {shown} is not a number; accepted: {accepted}") from None
        raise argparse.ArgumentTypeError(f"{name} {shown} is not accepted; accepted: {accepted}") from None


def _whole(name: str, low: int = 1, high: int | None = None, accepted: str | None = None):
    """A whole number in [low, high] (high: the engine's own limit for the column, LIMITS)."""
    high = high if high is not None else LIMITS.get(name.replace(" ", "_").replace("-", "_"), 10**6)
    accepted = accepted or f"a whole number from {low:,} to {high:,}"

    def parse(text):
        value = _ascii_number(name, text, accepted)
        if value != int(value) or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{name} {show(text)} is not accepted; accepted: {accepted}")
        return int(value)
    return parse


def _bounded(name: str, low: float, high: float, low_open: bool = False, high_open: bool = False, what: str = "",
             accepted: str = ""):
    """A number in a range that describes a real system; outside it the figures would be
    300-digit or infinite."""
    accepted = accepted or (f"a number {'>' if low_open else '>='} {low:g} and {'<' if high_open else '<='} {high:g}"
                            + (f" ({what})" if what else ""))

    def parse(text):
        value = _ascii_number(name, text, accepted)
        if value < low or value > high or (low_open and value == low) or (high_open and value == high):
            raise argparse.ArgumentTypeError(f"{name} {show(text)} is not accepted; accepted: {accepted}")
        return value
    return parse


def _choice_text(name: str, choices):
    """A text option from a fixed list (its error names the list)."""
    def parse(text):
        if text not in choices:
            raise argparse.ArgumentTypeError(f"{name} {show(text)} is not accepted; accepted: {', '.join(map(str, choices))}"
                                             + did_you_mean(text, map(str, choices)))  # 'INFER', 'VLLM': the one meant
        return text
    return parse


def _column_parser(col: columns.Column):
    """The flag's parser: the column's kind and range (engine/columns.py), or none where the
    engine's own check names the bad value (choices that depend on the task: precision, ...)."""
    if col.kind == "bool" or not col.cli_checks:
        return None
    if col.kind == "choice":
        return _choice_text(col.cli[2:], col.choices)
    if col.kind == "int":
        return _whole(col.name.replace("_", " "), low=int(col.low), high=int(col.high),
                      accepted=col.accepted or None)
    if col.kind == "float":
        return _bounded(col.cli[2:], col.low, col.high, low_open=col.low_open, high_open=col.high_open,
                        accepted=col.accepted)
    return None


def _column_help(col: columns.Column, default: str | None = None) -> str:
    """The flag's help from the column table; `default`: the default in other words than the engine's."""
    text = col.help
    if col.choices and len(col.choices) > 1 and str(col.choices[1]) not in col.help:
        text += f"; accepted: {', '.join(map(str, col.choices))}"
    text += f" (default {col.describe_default() if default is None else default})"
    return text.replace("%", "%%")  # argparse formats help with %


def add_column_flag(p: argparse.ArgumentParser, col: columns.Column) -> None:
    """One scenario column's flag, as the column table declares it."""
    if col.kind == "bool":
        p.add_argument(col.cli, action="store_true", help=_column_help(col))
        return
    default = col.default if col.cli_default == columns.ENGINE else None
    if col.cli_scale != 1 and default is not None:
        default = default / col.cli_scale
    p.add_argument(col.cli, default=default, type=_column_parser(col), help=_column_help(col))


MODEL_FILE_HELP = ("a checkpoint to estimate instead of a catalog model, headers only (docs/models.md): a GGUF file "
                   "(split parts read together; again for its mmproj file), a safetensors file or folder with its "
                   "config.json (a shard's set read together), or a config.json")


def _add_scenario_args(p: argparse.ArgumentParser) -> None:
    """The scenario flags, the same for estimate and sweep (one request, one meaning), generated
    from the column table (engine/columns.py). Every flag left out is decided by engine/rules.py,
    as for the library and the dashboard."""
    model, *rest = [c for c in columns.SCENARIO if c.cli]
    add_column_flag(p, model)
    p.add_argument("--model-config", help="a Hugging Face config.json to estimate instead of a catalog model")
    p.add_argument("--model-file", action="append", help=MODEL_FILE_HELP)
    for col in rest:
        add_column_flag(p, col)


def request_from_args(args) -> dict:
    """The scenario exactly as asked on the command line: what was not given is left out, and
    engine/rules.py decides it (the same rules as for the library and the dashboard)."""
    if args.task == "infer" and args.method not in (None, "full", "none"):
        raise CliError(f"method {show(args.method)} applies to training; for --task infer leave --method out")
    sc = {}
    for col in columns.SCENARIO:
        if not col.cli or col.group == "overhead":
            continue
        value = getattr(args, col.dest, None)
        if value is not None and not (col.name == "method" and args.task == "infer"):
            sc[col.name] = value
    return sc


def _overhead(args) -> dict:
    """estimate()'s runtime-overhead keywords the user gave (--context-mib in MiB -> bytes)."""
    return {col.name: getattr(args, col.dest) * col.cli_scale for col in columns.SCENARIO
            if col.group == "overhead" and getattr(args, col.dest, None) is not None}


_PARSERS: dict = {}


def docs_folder() -> Path:
    """Where the docs/*.md that the helps and errors name lie: the checkout's docs/, or in an install
    planner/docs/ (pyproject.toml [tool.setuptools.package-dir] ships the checkout's docs/ there, since an
    installed copy has no checkout beside it)."""
    here = Path(__file__).resolve().parent
    for folder in (here.parent / "docs", here / "docs"):
        if (folder / "install.md").is_file():
            return folder
    return here / "docs"


def _docs_epilog() -> str:
    return f"docs/NAME.md named here: {docs_folder() / 'NAME.md'}"


def build_parser(prog: str = "python -m engine") -> Parser:
    """The command line's parser, built once per name and column table (~1,200 add_argument calls: tens of
    milliseconds, which every in-process call of main() paid again; parse_args does not change it)."""
    key = (prog, id(columns.SCENARIO))
    if key not in _PARSERS:
        _PARSERS.clear()  # (a changed table: only the newest is kept)
        _PARSERS[key] = _new_parser(prog)
    return _PARSERS[key]


def _new_parser(prog: str) -> Parser:
    parser = Parser(prog=prog, description="LLM hardware planner: memory per GPU, fit, and the catalog.")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    est = sub.add_parser("estimate", help="estimate one scenario")
    _add_scenario_args(est)
    est.add_argument("--gpu", default="", help="catalog GPU id to fit against (see: catalog gpus)")
    est.add_argument("--what-if", action="store_true",
                     help="with --gpu: every change that would save memory (checkpointing, LoRA/QLoRA, 8-bit "
                          "optimizer, ZeRO-3, offload, quantized weights, ...), ranked by whether and on how "
                          "many GPUs it fits, as the dashboard's Breakdown page ranks them")
    est.add_argument("--json", action="store_true", help="print one JSON object")
    from planner.exports import EXPORTERS
    est.add_argument("--export", type=_choice_text("export", tuple(EXPORTERS)), default=None,
                     help=f"print the training config of this plan for {' | '.join(EXPORTERS)} (docs/install.md)")
    chk = sub.add_parser("check", help="does one scenario fit? one line; exit status 0 fits, 1 does not fit, 2 bad input")
    _add_scenario_args(chk)  # the estimate's flags (planner/check.py)
    chk.add_argument("--gpu", required=True, help="catalog GPU id to fit against (see: catalog gpus)")
    chk.add_argument("--json", action="store_true", help="print the estimate's JSON object instead (same exit status)")
    sw = sub.add_parser("sweep", help="the full matrix (every model x GPU x method) as CSV")
    sw.add_argument("--out", help="CSV file to write (default, or -: standard output)")
    sw.add_argument("--models", default=None, help="comma list of model ids (default: all)")
    sw.add_argument("--gpu-ids", default=None, help="comma list of GPU ids (default: all)")
    sw.add_argument("--methods", default=None, help="comma list of training methods (default full,lora,qlora; "
                                                     "--method gives one)")
    _add_scenario_args(sw)
    _add_serve_parser(sub)
    cat = sub.add_parser("catalog", help="list catalog ids")
    # optional to argparse so that a bare `catalog` is told what it takes (argparse said "the following arguments are
    # required: what", naming neither the choices nor anything a user typed)
    cat.add_argument("what", nargs="?", metavar="what", help="gpus | models | aliases | hosts | compatibility")
    cat.add_argument("--json", action="store_true", help="print the records (every field, with sources and dates)")
    from planner.procurement import MAX_GPUS, WORKLOAD_SETTINGS
    bud = sub.add_parser("budget", help="what a budget buys: systems (nodes x GPUs, hosts, network), cheapest first")
    bud.add_argument("--budget", required=True, type=_bounded("budget", 0, 1e12, what="US dollars"), help="US dollars")
    bud.add_argument("--mode", default="buy", type=_choice_text("mode", ("buy", "cloud_hour", "cloud_job")),
                     help="buy (cards + hosts + network) | cloud_hour ($ per hour) | cloud_job ($ for --hours)")
    bud.add_argument("--hours", type=_bounded("hours", 0, 1e6, low_open=True), default=None, help="hours of a cloud_job")
    bud.add_argument("--workloads", default=None,
                     help="comma list of model:workload, workload one of full, lora, qlora, infer-bf16, infer-int8, "
                          "infer-int4 (default: every model x qlora, lora, full, infer-int4)")
    bud.add_argument("--deadline-days", type=_bounded("deadline-days", 0, 1e5, low_open=True), default=None,
                     help="training must finish within this many days (1e9 tokens, see estimate --tokens)")
    bud.add_argument("--one-purchase", action="store_true", help="one system that covers every listed workload")
    bud.add_argument("--condition", default="either", type=_choice_text("condition", ("new", "used", "either")),
                     help="card prices: new, used or either (the cheaper known price)")
    bud.add_argument("--max-gpus", type=_whole("max-gpus", high=LIMITS["gpus"]), default=MAX_GPUS,
                     help=f"largest GPU count (default {MAX_GPUS})")
    # the headroom and the buy-vs-rent settings (break-even per row): the estimate's flags (engine/columns.py)
    for name in ("headroom", "utilization", "pue", "usd_per_kwh", "hours_per_month", "resale_fraction"):
        add_column_flag(bud, columns.SCENARIO_BY_NAME[name])
    # the workloads' own settings (procurement.WORKLOAD_SETTINGS, as the Budget page's sidebar sets them): the
    # estimate's flags, left out when not given (the workload's own value, else the engine's default)
    for name, tasks in WORKLOAD_SETTINGS.items():
        col = columns.SCENARIO_BY_NAME[name]
        words = "every workload" if len(tasks) == 2 else \
            "the training workloads (full, lora, qlora)" if tasks == ("train",) else "the serving workloads (infer-*)"
        default = f"for {words}: the workload's own, else the engine's, {col.describe_default()}"
        if col.kind == "bool":
            bud.add_argument(col.cli, action="store_true", default=None, help=_column_help(col, default))
        else:
            bud.add_argument(col.cli, default=None, type=_column_parser(col), help=_column_help(col, default))
    bud.add_argument("--json", action="store_true", help="print one JSON object")
    ev = sub.add_parser("evidence", help="estimate vs every published reference")
    ev.add_argument("--json", action="store_true", help="print one JSON list, a row per reference (id, kind, metric, "
                                                        "reference, estimate, unit, error_pct, recipe, explanation, ...)")
    ev.add_argument("--serving", action="store_true",
                    help="the serving engines' published runs instead: batch-1 decode and prefill speed and the "
                         "KV budgets of vLLM / SGLang start-up logs, each beside the serving model's figure "
                         "(fit rows set a constant, held-out rows are the accuracy; docs/serving.md)")
    ing = sub.add_parser("ingest", help="a real run's log (training JSON line, vLLM or SGLang start-up, llama.cpp load, torchtune "
                                        "recipe) beside "
                                        "our estimate (docs/ingest.md)")
    ing.add_argument("file", nargs="?", help="the log, or a file holding the llm_planner_run JSON line that --snippet "
                                             "prints (docs/ingest.md); - reads standard input")
    ing.add_argument("--gpu", help="catalog GPU id the run ran on (see: catalog gpus); needed with a file")
    ing.add_argument("--snippet", action="store_true", help="print the Python lines to paste into a training script "
                                                            "(they print the JSON line ingest reads), with --model's id")
    ing.add_argument("--model", default=None, help="catalog model id, when the log's model name matches none")
    ing.add_argument("--json", action="store_true", help="print one JSON object (format, model, scenario, figures)")
    ing.add_argument("--save", action="store_true", help="keep the run among your own (evidence lists it as yours)")
    dash = sub.add_parser("dashboard", help="start the Streamlit dashboard (headless) on http://localhost:PORT")
    dash.add_argument("--port", type=_whole("port", high=65535), default=8501, help="port (default 8501)")
    dash.add_argument("--address", default=None, help="address to listen on (default: Streamlit's, every interface)")
    dash.add_argument("streamlit_args", nargs=argparse.REMAINDER,
                      help="after --: more `streamlit run` flags, e.g. -- --server.maxUploadSize 10")
    docs_line = _docs_epilog()  # (one look for the folder, not one per subcommand)
    for each in (parser, *sub.choices.values()):
        each.docs_line = docs_line
    return parser


def print_json(data) -> None:
    """One --json output, with SCHEMA_VERSION added (last: every other key stays where it was)."""
    if isinstance(data, list):
        data = [{**record, "schema_version": SCHEMA_VERSION} for record in data]
    else:
        data = {**data, "schema_version": SCHEMA_VERSION}
    print(json.dumps(data, indent=2))


def _models_with_config(args, catalog_models: pd.DataFrame, required: bool = True) -> pd.DataFrame:
    """The catalog's models, plus the model of --model-config (named by --model when given)."""
    model_file = getattr(args, "model_file", None)  # issue 25: catalog/checkpoints.py
    if args.model and "/" in args.model and args.model_config is None and not model_file:  # a Hub id, ORG/NAME[@REV]
        from catalog.checkpoints import default_precision, model_from_hub
        from engine.serving import engine_takes_precision
        record, args.checkpoint = model_from_hub(args.model)
        default_precision(args, args.checkpoint, engine_takes_precision)
        args.model = record["id"]
        return pd.concat([catalog_models[catalog_models["id"] != record["id"]], pd.DataFrame([record])], ignore_index=True)
    if args.model_config is None and not model_file:
        if required and not args.model:
            raise CliError("--model is required (a catalog model id, see: python -m engine catalog models), or give "
                           "--model-file or --model-config")
        return catalog_models
    from catalog.schema import ID_RE  # the catalog's own id rule, as for every saved model
    if model_file:
        if args.model_config is not None:
            raise CliError("give --model-file or --model-config (a config.json is a --model-file too), not both")
        from catalog.checkpoints import default_precision, model_from_files
        from engine.serving import engine_takes_precision
        record, args.checkpoint = model_from_files(model_file)
        default_precision(args, args.checkpoint, engine_takes_precision)
    elif not str(args.model_config).strip():
        raise CliError("model config '' is not a file; accepted: a path to a Hugging Face config.json")
    else:
        from catalog.user import model_from_config_file  # lazy: only this path reads JSON files
        record = model_from_config_file(Path(args.model_config))
    if args.model:
        if not ID_RE.match(args.model):
            raise CliError(f"model id {show(args.model)} is not accepted for --model-config; accepted: lower-case "
                           "letters, digits, '.' and '-', up to 64 characters, starting with a letter or digit")
        if args.model in set(catalog_models["id"]):
            # (the file's model under a catalog id: every figure would be the file's, labelled as the catalog model's)
            raise CliError(f"model id {show(args.model)} is a catalog model; --model names the model of "
                           f"{'--model-file' if model_file else '--model-config'}: accepted: a new id (lower-case "
                           "letters, digits, '.' and '-'), or leave --model out to use the file's own name")
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


def _estimate_one(args):
    """The scenario of the flags, estimated (estimate and check): (catalog, models, gpus, request, frame)."""
    from catalog import default_catalog
    cat = default_catalog()
    models = _models_with_config(args, cat.models(include_user=True))
    request = request_from_args(args)
    if args.gpu:
        request["gpu"] = args.gpu
    elif getattr(args, "what_if", False):
        raise CliError("--what-if needs --gpu to fit against; accepted: a catalog GPU id (see: catalog gpus)")
    gpus = cat.gpus(include_user=True) if args.gpu else None
    frame = estimate(pd.DataFrame([request]), models, gpus, **_overhead(args))
    from planner.planning import lora_targets_problem
    problem = lora_targets_problem(models, request, float(frame["trainable_params"].iloc[0]))
    if problem:
        raise CliError(problem)
    return cat, models, gpus, request, frame


def _names_a_model_file(text) -> bool:
    """A --draft-model value that names a checkpoint on disk: a path that exists, or text shaped like one (a leading
    /, ~ or ., a .gguf / .safetensors / .json suffix), as the dashboard's model field decides (docs/models.md)."""
    text = str(text)
    return Path(text).expanduser().exists() or text.startswith(("/", "~", ".")) or \
        text.lower().endswith((".gguf", ".safetensors", ".json"))


def _whole_language_model_weights(models, request: dict, vision: str = "off"):
    """The weights the estimate counts for `request`'s task, method and precision, whole (on one GPU: no tensor,
    pipeline or expert split, no ZeRO sharding or offload) and without a vision tower (vision "off"): what a
    checkpoint's weights_bytes_stored holds, so `weights_bytes_difference` compares like with like. The scenario's
    weights_bytes is per GPU and counts the vision tower: at --tp 2 a Llama 3.1 8B's stored 16,060,522,496 bytes read
    +8,030,261,248 against the estimate's half, and Gemma 3 27B's stored language model -846,120,672 (its SigLIP
    tower) where the two agree to the byte. None where that scenario cannot be estimated."""
    one = {k: v for k, v in request.items() if k not in ("gpus", "tp", "pp", "cp", "ep", "zero", "offload",
                                                          "sequence_parallel", "gpu")}
    try:
        return float(estimate(pd.DataFrame([{**one, "gpus": 1, "vision_tower": vision}]), models)["weights_bytes"].iloc[0])
    except (ValueError, KeyError):
        return None


def _estimate_json(args, cat, models, gpus, frame, notes) -> dict:
    """estimate --json's object (without what_if, and without schema_version: print_json adds it)."""
    row = frame.iloc[0]
    keys = columns.json_keys(with_gpu=bool(args.gpu))  # engine/columns.py
    data = {k: _jsonable(row[k]) for k in keys if k in row.index}
    data["normalization_notes"] = notes
    data["checkpoint"] = None  # a catalog model or --model-config: the key is there, null (one key set for every model)
    if getattr(args, "checkpoint", None):  # issue 25: what the checkpoint's headers say (catalog/checkpoints.py)
        from catalog.checkpoints import stored_vs_engine
        data["checkpoint"] = stored_vs_engine(args.checkpoint, _whole_language_model_weights(models, request_from_args(args)),
                                              row.get("precision"))
    # issue 12: the band around peak_bytes (engine/uncertainty.py): measured error, unmeasured paths
    data.update({k: _jsonable(v) for k, v in uncertainty.band(frame.iloc[:1], models).iloc[0].items()})
    if args.gpu:  # issue 14: the rules of catalog/gpus.yaml `compatibility`, applied by engine/compat.py
        data.update(_compatibility(frame.iloc[:1], gpus, cat))
        data.update(_price_facts(gpus, row.get("gpu")))  # the dates and sources of the prices behind the costs
    if "breakeven_months" in data and row["breakeven_months"] == math.inf:
        data["breakeven_months"] = "inf"  # renting never costs more than the power; float("inf") reads it
    return data


# The catalog's dated, sourced prices behind estimate's purchase_usd (the card's new list price x GPUs) and its cloud
# figures (cloud_usd_per_hour x GPU-hours): `estimate --json` and the sweep CSV carry them beside those figures, the
# text output prints them under the costs (README: every price has a date and a source). Keys as `budget --json`'s.
PRICE_KEYS = ("price_date", "price_source", "cloud_date", "cloud_source")
# the sweep CSV's last two columns: estimate --json's `compatible` and its `compatibility_notes` (joined with "; ")
COMPATIBILITY_KEYS = ("compatible", "compatibility_notes")


def _price_facts(gpus: pd.DataFrame, gpu_id) -> dict:
    """{price_date, price_source, cloud_date, cloud_source} of one catalog GPU: None where the catalog has no price
    (a date without its price dates nothing the user sees)."""
    if not isinstance(gpu_id, str) or gpu_id not in set(gpus["id"]):
        return {k: None for k in PRICE_KEYS}
    g = gpus.set_index("id").loc[gpu_id]

    def text(key, price):
        value = g.get(key)
        known = pd.notna(g.get(price)) and pd.notna(value) and str(value).strip() != ""
        return str(value) if known else None

    return {"price_date": text("price_date", "price_usd"), "price_source": text("price_source", "price_usd"),
            "cloud_date": text("cloud_date", "cloud_usd_per_hour"), "cloud_source": text("cloud_source", "cloud_usd_per_hour")}


def _price_line(gpus: pd.DataFrame, row) -> str:
    """The estimate's text line naming the prices its costs used, each with its date and source ('' with no price)."""
    if not (isinstance(row.get("gpu"), str) and row["gpu"] and row["gpu"] in set(gpus["id"])):
        return ""
    g = gpus.set_index("id").loc[row["gpu"]]
    facts = _price_facts(gpus, row["gpu"])
    parts = []
    if facts["price_date"] is not None:
        parts.append(f"card ${float(g['price_usd']):,.0f} new list price ({facts['price_date']}: {facts['price_source']})")
    if facts["cloud_date"] is not None:
        parts.append(f"cloud ${float(g['cloud_usd_per_hour']):,.2f}/GPU-hour ({facts['cloud_date']}: {facts['cloud_source']})")
    return ("prices: " + "; ".join(parts)) if parts else ""


def _print_export(export, row, see: str = "check, estimate --what-if") -> int:
    """The export on stdout; what it could not express on stderr when its format has no comments. see: where
    the user finds what would fit a plan that does not (the training commands'; serve passes its own)."""
    sys.stdout.write(export.text)
    if not export.comments_inline:
        for line in export.about:
            print(f"# {line}", file=sys.stderr)
        for note in export.not_expressed:
            print(f"# not expressed: {note}", file=sys.stderr)
    if "fits" in row.index and isinstance(row.get("gpu"), str) and row["gpu"] and not bool(row["fits"]):
        print(f"warning: this plan does not fit {row['gpu']} (see: {see})", file=sys.stderr)
    return 0


def cmd_check(args) -> int:
    """`check`: one line (planner/check.py), exit status 0 fits, 1 does not fit (2: bad input, main)."""
    from planner.check import exit_code, verdict_line
    if not (args.gpu or "").strip():  # (estimate takes an empty --gpu as none; a fit needs a card)
        raise CliError(f"gpu {args.gpu!r} is not accepted; accepted: a catalog GPU id (python -m engine catalog gpus), "
                       "e.g. h100-sxm-80gb, rtx-4090: check answers whether the scenario fits on it")
    cat, models, gpus, request, frame = _estimate_one(args)
    row = frame.iloc[0]
    verdict = _compatibility(frame.iloc[:1], gpus, cat)
    if args.json:
        print_json(_estimate_json(args, cat, models, gpus, frame, rules.notes(request, row)))
    else:
        print(verdict_line(row, verdict))
    return exit_code(row, verdict)


def cmd_dashboard(args) -> int:
    from planner.dashboard_cmd import run_dashboard
    return run_dashboard(args.port, args.address, args.streamlit_args)


def cmd_estimate(args) -> int:
    cat, models, gpus, request, frame = _estimate_one(args)
    row = frame.iloc[0]
    notes = rules.notes(request, row)
    if args.export:
        if args.json or args.what_if:
            raise CliError("--export prints a config; leave out --json and --what-if")
        from planner.exports import train_export
        return _print_export(train_export(args.export, row, models.set_index("id").loc[row["model"]]), row)
    decided = {k: row[k] for k in SCENARIO_COLUMNS if k in row.index}  # the scenario as estimated
    decided.update({k: v for k, v in request.items() if k not in decided})
    # the stack's switches as asked ('auto' unless given): a what-if change such as gradient
    # checkpointing must reach the recipe's rule, not meet the value decided without it
    decided.update({k: request.get(k, DEFAULTS[k]) for k in STACK_COLUMNS})
    changes, hint_error = None, None
    if args.what_if:
        changes = _what_if(decided, models, gpus, args)
    elif args.gpu and not args.json and not bool(row["fits"]):
        try:  # a hint under the estimate: its failure must not cost the user the estimate
            changes = _what_if(decided, models, gpus, args)
        except ValueError as exc:
            hint_error = str(exc)
    if args.json:
        data = _estimate_json(args, cat, models, gpus, frame, notes)
        if args.what_if:
            data["what_if"] = [{k: _jsonable(r[k]) for k in WHAT_IF_KEYS}
                               for _, r in changes[changes["rank"] > 0].iterrows()]
        print_json(data)
        return 0
    print(format_estimate(row))
    if "active_params" in row.index and row["active_params"] != row["params"]:
        print(f"mixture of experts: {row['active_params']:,} of {row['params']:,} parameters active per token "
              f"(every expert resident; decode reads the active ones)")
    if args.gpu:
        verdict = _compatibility(frame.iloc[:1], gpus, cat)
        if verdict["compatibility_notes"]:
            lead = "compatible" if verdict["compatible"] else "NOT COMPATIBLE (never counted as a fit)"
            print(f"{lead}: " + "; ".join(verdict["compatibility_notes"]))
    if notes:
        print("decided for this scenario: " + "; ".join(notes))
    speed = format_speed_cost(row)
    if speed:
        print(speed)
    prices = _price_line(gpus, row)
    if prices:
        print(prices)
    if args.what_if:
        print("what if (each change estimated on this GPU; ranked: fits first, fewest GPUs, most memory saved, least impact):")
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


def _compatibility(rows: pd.DataFrame, gpus: pd.DataFrame, cat) -> dict:
    """{'compatible': bool, 'compatibility_notes': [...]} of one estimated row; an incompatible
    row never `fits` (the card cannot run it whatever the memory says)."""
    from engine.compat import check
    verdict = check(rows, gpus, cat.compatibility()).iloc[0]
    out = {"compatible": bool(verdict["compatible"]), "compatibility_notes": list(verdict["compatibility_notes"])}
    if not out["compatible"]:
        out["fits"] = False
    return out


def _what_if(sc: dict, models: pd.DataFrame, gpus: pd.DataFrame, args) -> pd.DataFrame:
    from planner.planning import what_if  # lazy: only a scenario with a GPU needs it
    return what_if(sc, models, gpus, _overhead(args))


def _id_list(flag: str, text: str | None) -> list[str]:
    """A comma list flag; given but empty (\"\" or \",\") is an error, never an empty sweep."""
    if text is None:
        return []
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise CliError(f"{flag} {show(text)} is empty; accepted: a comma list of ids")
    return list(dict.fromkeys(items))


def cmd_sweep(args) -> int:
    """Every model x GPU (x method for training) of one request, with the same flags and the
    same rules as estimate: a sweep row is the estimate of its scenario."""
    if args.out is not None and not str(args.out).strip():  # `--out "$UNSET"`: not a quiet switch to stdout
        raise CliError(f"--out {show(args.out)} is not accepted; accepted: a file path, or - for standard output "
                       "(the default)")
    from catalog import default_catalog
    cat = default_catalog()
    models = _models_with_config(args, cat.models(include_user=True), required=False)
    gpus = cat.gpus(include_user=True)
    model_ids = ([args.model] if args.model else []) + [m for m in _id_list("--models", args.models) if m != args.model]
    from catalog.checkpoints import hub_models  # issue 25: ORG/NAME[@REV] ids in --models
    model_ids, models, sources = hub_models(model_ids, models)
    if getattr(args, "checkpoint", None):  # --model ORG/NAME, --model-file: the CSV names the file or Hub commit
        sources[args.model] = models.loc[models["id"] == args.model, "source"].iloc[0]
    model_ids = model_ids or list(models["id"])
    gpu_ids = _id_list("--gpu-ids", args.gpu_ids) or list(gpus["id"])
    unknown = [g for g in gpu_ids if g not in set(gpus["id"])]
    if unknown:
        raise CliError(f"gpu {show(unknown[0])} is not in the catalog; accepted: a catalog GPU id (see: catalog gpus)"
                       + did_you_mean(unknown[0], gpus["id"]))
    if args.method is not None and args.methods is not None:
        raise CliError("give --method (one method) or --methods (a comma list), not both")
    methods = [args.method] if args.method else _id_list("--methods", args.methods) or ["full", "lora", "qlora"]
    if args.task == "infer" and args.methods is not None and set(methods) - {"full", "none"}:
        # as --method is (request_from_args): an inference sweep has one row per model x GPU, so a list of
        # training methods would be dropped without a word
        raise CliError(f"--methods {show(args.methods)} applies to training; for --task infer leave --methods out")
    request = request_from_args(args)
    request.pop("method", None)
    request.pop("model", None)
    frame = sweep_frame(models, gpus, model_ids, gpu_ids, methods, request, _overhead(args))
    left_out = frame.attrs.get("beyond_context", [])
    if left_out:
        print(f"note: left out {', '.join(left_out)}: the sequence is longer than their context "
              "(--allow-long-context to estimate them)", file=sys.stderr)
    too_deep = frame.attrs.get("beyond_layers", [])
    if too_deep:
        print(f"note: left out freeze rows of {', '.join(too_deep)}: --freeze-layers is more than their layers",
              file=sys.stderr)
    refused_lora = frame.attrs.get("lora_refused", [])
    if refused_lora:
        print(f"note: left out LoRA rows of {', '.join(refused_lora)}: peft would not build --lora-targets "
              f"{show(str(request.get('lora_targets', '')))} there (estimate says why, exit 2)", file=sys.stderr)
    hybrid = frame.attrs.get("not_modelled", [])
    if hybrid:
        print(f"note: left out {', '.join(hybrid)}: training this hybrid model (linear-attention or Mamba2 layers) is "
              "not modelled yet (--task infer and `serve` are; modelled: Qwen3.5 dense, Qwen3-Next, Granite 4.0-H "
              "dense)", file=sys.stderr)
    if sources:
        frame.insert(1, "model_source", frame["model"].map(sources).fillna("catalog"))
    facts = {g: _price_facts(gpus, g) for g in gpu_ids}  # each row's prices, dated and sourced (added at the end)
    for key in PRICE_KEYS:
        frame[key] = frame["gpu"].astype(str).map({g: f[key] for g, f in facts.items()})
    # the card's compatibility rules (catalog/gpus.yaml, engine/compat.py), as estimate --json and check apply them: an
    # incompatible row never fits. The CSV said fits True for bf16 on a T4 where check exits 1 ("does not fit").
    from engine.compat import check as compatibility
    verdict = compatibility(frame, gpus, cat.compatibility())
    frame["fits"] = frame["fits"].astype(bool).to_numpy() & verdict["compatible"].to_numpy(dtype=bool)
    frame[COMPATIBILITY_KEYS[0]] = verdict["compatible"].to_numpy(dtype=bool)
    frame[COMPATIBILITY_KEYS[1]] = ["; ".join(notes) for notes in verdict["compatibility_notes"]]
    text = to_csv(frame)
    if args.out and args.out != "-":  # "-": standard output, as Unix tools read it (not a file named "-")
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as exc:  # "error: Input/output error" named no file
            raise CliError(f"--out {show(args.out)} cannot be written: {exc.strerror or exc}; accepted: a writable file "
                           "path, or - for standard output") from None
        print(f"wrote {len(frame):,} rows to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_budget(args) -> int:
    """`budget`: planner.procurement.plan_budget, the function the Budget page calls."""
    from catalog import default_catalog
    from planner import procurement
    cat = default_catalog()
    from catalog.checkpoints import hub_workloads  # issue 25: ORG/NAME[@REV]:workload items
    if args.hours is not None and args.mode != "cloud_job":
        # only a cloud job is priced by its hours: buy and cloud_hour would drop them without a word
        raise CliError(f"--hours {args.hours:g} applies to --mode cloud_job; with --mode {show(args.mode)} "
                       "leave --hours out")
    workloads, models = hub_workloads(args.workloads, cat.models(include_user=True))
    given = {k: getattr(args, columns.SCENARIO_BY_NAME[k].dest) for k in procurement.WORKLOAD_SETTINGS}
    given = {k: v for k, v in given.items() if v is not None}
    scenarios = procurement.workload_scenarios(given, procurement.parse_workloads(workloads, list(models["id"])))
    result = procurement.plan_budget(models, cat.gpus(include_user=True), cat.hosts(),
                                     args.budget, args.mode, args.hours, workloads, args.deadline_days,
                                     args.one_purchase, args.condition, args.max_gpus, args.headroom,
                                     cat.compatibility(),
                                     tco={k: getattr(args, k) for k in procurement.TCO_KEYS}, scenarios=scenarios)
    result["settings"]["workload_settings"] = given  # (added key: the settings given beside the workloads' own)
    if args.json:
        data = {"settings": result["settings"], "rows": procurement.rows_json(result["rows"]),
                "unlocks": procurement.rows_json(result["unlocks"]), "out_of_reach": result["out_of_reach"],
                # training rows the engine does not model (a linear-attention model): named, not "out of reach"
                "not_modelled": result["not_modelled"]}
        if args.one_purchase:
            data["purchase"] = result["purchase"]
        print_json(data)
        return 0
    print(procurement.format_budget(result))
    return 0


def cmd_catalog(args) -> int:
    from catalog import default_catalog
    if args.what is None:
        raise CliError("catalog needs what to list; accepted: gpus, models, aliases, hosts, compatibility "
                       "(e.g. catalog gpus)")
    cat = default_catalog()
    if args.what in ("hosts", "compatibility") or getattr(args, "json", False):
        frames = {"gpus": lambda: cat.gpus(include_user=True), "models": lambda: cat.models(include_user=True),
                  "aliases": cat.aliases, "hosts": cat.hosts, "compatibility": cat.compatibility}
        if args.what not in frames:
            raise CliError(f"catalog {args.what!r} is not accepted; accepted: {', '.join(frames)}")
        frame = frames[args.what]()
        if not getattr(args, "json", False):
            for i in frame["id"]:
                print(i)
            return 0
        print_json([{k: _jsonable(v) for k, v in r.items()} for r in frame.to_dict("records")])
        return 0
    if args.what == "gpus":
        ids = cat.gpus(include_user=True)["id"]
    elif args.what == "models":
        ids = cat.models(include_user=True)["id"]
    elif args.what == "aliases":
        al = cat.aliases()
        ids = [f"{a}\t{c} x {g}" for a, g, c in zip(al["alias"], al["gpu"], al["count"])]
    else:
        raise CliError(f"catalog {args.what!r} is not accepted; accepted: gpus, models, aliases, hosts, compatibility")
    for i in ids:
        print(i)
    return 0


def cmd_evidence(args) -> int:
    from catalog import default_catalog
    if getattr(args, "serving", False):
        return _serving_evidence(args, default_catalog())
    from planner.evidence import evidence_table, format_evidence
    cat = default_catalog()
    table = evidence_table(cat.references(), cat.models(), cat.gpus())
    from planner.ingest import user_evidence_rows  # issue 26: the user's own runs (ingest --save), after the published
    mine = user_evidence_rows(cat.models(include_user=True), cat.gpus(include_user=True))
    if not mine.empty:
        table = pd.concat([table, mine], ignore_index=True)
    if getattr(args, "json", False):
        from planner.evidence import EVIDENCE_JSON_KEYS
        print_json([{k: _jsonable(r[k]) for k in EVIDENCE_JSON_KEYS} for _, r in table.iterrows()])
        return 0
    print(format_evidence(table))
    return 0


def _serving_evidence(args, cat) -> int:
    """`evidence --serving`: catalog/serving_measurements.yaml beside the serving model (planner/serving_evidence.py)."""
    from planner.serving_evidence import SERVING_EVIDENCE_JSON_KEYS, format_serving_evidence, serving_evidence_table
    table = serving_evidence_table(models=cat.models(), gpus=cat.gpus())
    if getattr(args, "json", False):
        print_json([{k: _jsonable(r[k]) for k in SERVING_EVIDENCE_JSON_KEYS} for _, r in table.iterrows()])
        return 0
    print(format_serving_evidence(table))
    return 0


def cmd_ingest(args) -> int:
    from catalog import default_catalog
    from planner.ingest import FIGURE_KEYS, INGEST_JSON_KEYS, SNIPPET, format_comparison, ingest, save_run, saved_before
    if args.snippet:
        if args.file:
            raise CliError(f"file {show(args.file)} is not accepted with --snippet, which prints the lines to paste; "
                           "accepted: ingest --snippet [--model ID], or ingest FILE --gpu ID")
        # what applies to a log only is refused, not dropped: `--snippet --json` printed Python where a script read JSON
        extra = [flag for flag, given in (("--json", args.json), ("--save", args.save), ("--gpu", args.gpu)) if given]
        if extra:
            raise CliError(f"{', '.join(extra)} {'is' if len(extra) == 1 else 'are'} not accepted with --snippet, which "
                           "prints the Python lines to paste; accepted: ingest --snippet [--model ID], or ingest FILE "
                           "--gpu ID [--json] [--save]")
        text = SNIPPET
        if args.model:  # the user's model in place of the example's
            quoted = '"' + str(args.model).replace("\\", "\\\\").replace('"', '\\"') + '"'  # a Python string literal
            text = text.replace('"model": "llama-3.2-3b"', f'"model": {quoted}', 1)
        print(text, end="")
        return 0
    if not args.file or not args.gpu:
        raise CliError("ingest needs " + ("the log file and " if not args.file else "") + "--gpu ID; accepted: ingest FILE "
                       "--gpu ID (a catalog GPU id, see: catalog gpus), or ingest --snippet for the lines that print "
                       "a training run's line")
    cat = default_catalog()
    result = ingest(args.file, args.gpu, cat.models(include_user=True), cat.gpus(include_user=True), args.model)
    before = saved_before(result) if args.save else None  # the same run saved earlier: not added again
    saved = save_run(result) if args.save else None
    if args.json:
        data = {k: result[k] for k in INGEST_JSON_KEYS}
        data["scenario"] = {k: _jsonable(v) for k, v in data["scenario"].items()}
        data["figures"] = [{k: _jsonable(f[k]) for k in FIGURE_KEYS} for f in data["figures"]]
        data["saved_id"] = saved
        data["saved_before"] = before is not None  # (added key: saved_id is then the earlier entry's)
        print_json(data)
        return 0
    print(format_comparison(result))
    if before:
        print(f"already saved as {before}: the same run, not added again (see: evidence)")
    elif saved:
        print(f"saved as {saved} (see: evidence)")
    return 0


def _add_serve_parser(sub) -> None:
    """`serve`: capacity and speed of one serving configuration (engine/serving.py)."""
    from engine.serving import ENGINES, MLC_UTILIZATION, VLLM_UTILIZATION, max_num_seqs_help
    sv = sub.add_parser("serve", help="serving capacity and speed under vLLM, SGLang, llama.cpp, Ollama, transformers, "
                                      "ExLlamaV2, ExLlamaV3, MLC-LLM or mlx-lm")
    sv.add_argument("--model", help="catalog model id (see: catalog models)")
    sv.add_argument("--model-config", help="a Hugging Face config.json to serve instead of a catalog model")
    sv.add_argument("--model-file", action="append", help=MODEL_FILE_HELP)
    sv.add_argument("--gpu", required=True, help="catalog GPU id (see: catalog gpus)")
    sv.add_argument("--gpus", type=_whole("gpus", high=LIMITS["gpus"]), default=1, help="GPUs (tensor parallel for vLLM/SGLang)")
    sv.add_argument("--precision", default=None, help="weights: bf16, fp16, int8, int4, fp8, ... or a GGUF type for llama.cpp/ollama (bf16 / fp16 there: a 16-bit GGUF), "
                                                      "exl2-B (B bits per weight) or int4 (GPTQ) for exllamav2, exl3-B (B from 1 "
                                                      "to 8) for exllamav3, q4f16_1 ... "
                                                      "for mlc-llm, mlx-4bit, mlx-8bit ... for mlx-lm (default: a quantized published checkpoint's own "
                                                      "format, gpt-oss mxfp4 (mxfp4_moe for llama.cpp/ollama, which read mxfp4 as that type; llama.cpp reads "
                                                      "nvfp4 as its NVFP4 file type, nvfp4_gguf), "
                                                      "DeepSeek V3/R1 fp8; else bf16, fp16 on a card without bf16 "
                                                      "(V100, T4), q4_k_m for llama.cpp/ollama, exl2-4.0 for "
                                                      "exllamav2, exl3-4.0 for exllamav3, q4f16_1 for mlc-llm, mlx-4bit for mlx-lm)")
    sv.add_argument("--kv-precision", default="auto", help="KV cache: auto, fp16, bf16, fp8, int8, int4")
    sv.add_argument("--engine", required=True, type=_choice_text("engine", ENGINES), help=" | ".join(ENGINES))
    sv.add_argument("--max-model-len", default=None, type=_whole("max-model-len", high=LIMITS["seq"]),
                    help="tokens per request (default: what the engine takes without its context flag: vLLM, SGLang, "
                         "ExLlamaV2 and MLC-LLM the model's context; llama.cpp its trained context, lowered by --fit to "
                         "what fits; Ollama 4,096 / 32,768 / 262,144 by the VRAM of all GPUs, at most the model's; "
                         "ExLlamaV3 its 32,768-token -cs pool; required for transformers and mlx-lm)")
    # a --max-model-len beyond the model's context: refused unless asked for, as estimate's --seq (engine/columns.py)
    add_column_flag(sv, columns.SCENARIO_BY_NAME["allow_long_context"])
    sv.add_argument("--gpu-memory-utilization", type=_bounded("gpu-memory-utilization", 0, 1, low_open=True), default=None,
                    help=f"vLLM: share of the card (default {VLLM_UTILIZATION:g}); SGLang: mem-fraction-static (default: by the "
                         "card's memory from 0.5.3, e.g. 0.830 on an H100; by the tensor-parallel size before, 0.88 on one "
                         f"GPU); MLC-LLM: its gpu_memory_utilization (default {MLC_UTILIZATION:g}); the other engines fit in "
                         "what is free and refuse it")
    sv.add_argument("--gpu-memory-in-use", dest="gpu_memory_in_use_gib", type=_bounded("gpu-memory-in-use", 0, 100000), default=None,
                    help="GiB other processes already hold on each GPU (a desktop, another server; nvidia-smi shows "
                         "them): vLLM and MLC-LLM do not start where their share of the card's total is not free, the "
                         "other engines size themselves from what is free; below the card's memory (default 0)")
    sv.add_argument("--kv-cache-memory-bytes", type=_whole("kv-cache-memory-bytes", high=10**15), default=None,
                    help="vLLM: the KV cache in bytes per GPU, in place of its profiled share (its --kv-cache-memory-bytes; "
                         "the weights, activation peak and this must fit in what is free)")
    sv.add_argument("--max-num-seqs", type=_whole("max-num-seqs", high=65536), default=None,
                    help=max_num_seqs_help())  # each engine's default, from the constants serve() uses
    sv.add_argument("--gpu-layers", default="auto", help="llama.cpp/ollama: layers on the GPU (-ngl), a whole number or auto (like --fit)")
    sv.add_argument("--cpu-moe-layers", default="0",
                    help="llama.cpp, mixture-of-experts models: keep the routed experts of the first N layers in host RAM "
                         "(its --n-cpu-moe N), all (its --cpu-moe) or auto (the fewest layers that fit); default 0")
    sv.add_argument("--concurrency", type=_whole("concurrency", high=65536), default=None,
                    help="concurrent requests for TTFT, time per output token and aggregate tokens/s (default: what fits)")
    sv.add_argument("--prompt-tokens", type=_whole("prompt-tokens", high=LIMITS["seq"]), default=512, help="prompt length (default 512)")
    sv.add_argument("--output-tokens", type=_whole("output-tokens", high=LIMITS["seq"]), default=128, help="output length (default 128)")
    sv.add_argument("--host-bandwidth-gbps", type=_bounded("host-bandwidth-gbps", 1, 2000), default=None,
                    help="llama.cpp/ollama: host RAM bandwidth reached for layers left on the CPU, GB/s (default 55)")
    sv.add_argument("--engine-version", default=None,
                    help="vLLM: its version X.Y (default: the current V1 defaults); before 0.8 the V0 engine profiles a "
                         "whole max-model-len prompt without chunked prefill. SGLang: its version X.Y.Z (default: the "
                         "current release); before 0.5.3 its mem-fraction-static default follows the tensor-parallel size")
    sv.add_argument("--draft-model", default=None,
                    help="vllm/sglang/llama.cpp: a draft model for speculative decoding, a catalog model id, ORG/NAME "
                         "or a checkpoint as --model-file takes it (a GGUF file, a safetensors folder) (loaded beside the "
                         "target, its KV cache from the same budget)")
    sv.add_argument("--draft-tensor-parallel-size", type=_whole("draft-tensor-parallel-size", high=LIMITS["gpus"]),
                    default=None, help="vLLM: the draft's tensor parallel size, 1 or --gpus (default --gpus)")
    sv.add_argument("--draft-context", type=_whole("draft-context", high=LIMITS["seq"]), default=None,
                    help="llama.cpp: the draft's context per slot (the target's --max-model-len only: current llama.cpp has no -cd)")
    sv.add_argument("--backend", default=None, help="llama.cpp/ollama: cuda, rocm, metal or vulkan (default: the GPU's own)")
    sv.add_argument("--json", action="store_true", help="print one JSON object")
    from planner.exports import SERVE_EXPORTERS
    sv.add_argument("--export", type=_choice_text("export", tuple(SERVE_EXPORTERS)), default=None,
                    help=f"print the launch command (ollama: a Modelfile) with this plan's memory settings: "
                         f"{' | '.join(SERVE_EXPORTERS)}")


def _cpu_moe_layers(text, engine: str) -> int:
    """--cpu-moe-layers N|all|auto -> N, -2 (all) or -1 (auto), as engine/serving.py takes it."""
    from engine.serving import CPU_MOE_ALL, CPU_MOE_AUTO
    value = str(text).strip().lower()
    if value in ("auto", "all"):
        layers = CPU_MOE_AUTO if value == "auto" else CPU_MOE_ALL
    else:
        try:
            layers = _whole("cpu-moe-layers", low=0, high=100000, accepted="a whole number >= 0, all or auto")(value)
        except argparse.ArgumentTypeError as exc:
            raise CliError(str(exc)) from None
    if layers != 0 and engine != "llama.cpp":
        raise CliError(f"cpu-moe-layers {show(text)} is not accepted with --engine {engine}; accepted: 0, or "
                       "--engine llama.cpp (its --n-cpu-moe / --cpu-moe)")
    return layers


def _check_model_len(args, models: pd.DataFrame) -> None:
    """--max-model-len beyond the model's context, unless --allow-long-context: planner/serving.py check_model_len
    (the Serving page's target search asks the same)."""
    from planner.serving import check_model_len
    try:
        check_model_len(args.model, args.max_model_len, models, bool(args.allow_long_context))
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _check_memory_in_use(row: pd.Series, args) -> None:
    """--gpu-memory-in-use of the card's memory or more leaves nothing free: no engine starts there, and a KV cache,
    speed or cost figure would describe nothing (engine/serving.py counts what is free as usable - in use). Bad input,
    named with the card's memory (the usable memory the plan counts, nvidia-smi's memory.total)."""
    in_use, usable = float(row.get("gpu_memory_in_use_bytes", 0.0)), float(row["usable_bytes"])
    if in_use >= usable:
        raise CliError(f"gpu-memory-in-use {args.gpu_memory_in_use_gib:g} is not less than the memory of {args.gpu} "
                       f"({usable / GIB:.2f} GiB per GPU): nothing would be free; accepted: a number of GiB >= 0 and "
                       f"below {math.floor(usable / GIB * 100) / 100:.2f} (what other processes hold on each GPU)")


def _check_engine_flags(args) -> None:
    """A flag only some engines read (engine/serving.py ENGINE_ONLY_SETTINGS) given with another engine: refused, as
    the engine refuses --kv-cache-memory-bytes, --engine-version or --backend there, never dropped unseen (--gpu-layers
    with vLLM planned as if it were not given). --gpu-layers auto is its default, taken with any engine."""
    from engine.serving import CLI_CHECKED_SETTINGS, ENGINE_ONLY_SETTINGS
    for name in CLI_CHECKED_SETTINGS:
        value = getattr(args, name, None)
        engines = ENGINE_ONLY_SETTINGS[name]
        if value is None or args.engine in engines or (name == "gpu_layers" and str(value).strip().lower() == "auto"):
            continue
        flag = "--" + name.replace("_", "-")
        which = (", ".join(engines[:-1]) + " or " if len(engines) > 1 else "") + engines[-1]
        raise CliError(f"{flag[2:]} {show(value)} is not accepted with --engine {args.engine}, which does not use it; "
                       f"accepted: --engine {which}, or leave {flag} out")
    if getattr(args, "draft_context", None) is not None and not getattr(args, "draft_model", None):
        raise CliError(f"draft-context {show(args.draft_context)} is not accepted without a draft model; accepted: "
                       "--draft-model ID first")


def cmd_serve(args) -> int:
    from catalog import default_catalog
    from engine.serving import NO_BF16_ARCHITECTURES
    from planner.serving import SERVE_JSON_KEYS, default_precision, format_serve, serve_one
    cat = default_catalog()
    precision_given = args.precision is not None  # (a checkpoint's stored precision fills it in below, not the user)
    models = _models_with_config(args, cat.models(include_user=True))
    gpus = cat.gpus(include_user=True)
    if args.gpu not in set(gpus["id"]):
        raise CliError(f"gpu {show(args.gpu)} is not in the catalog; accepted: a catalog GPU id (see: catalog gpus)"
                       + did_you_mean(args.gpu, gpus["id"]))
    if args.model not in set(models["id"]):
        raise CliError(f"model {show(args.model)} is not in the catalog; accepted: a catalog model id (see: catalog models)"
                       + did_you_mean(args.model, models["id"]))
    if args.max_model_len is not None:  # (the engine's default is not checked: it is what the engine itself takes)
        _check_model_len(args, models)
    _check_engine_flags(args)
    layers = str(args.gpu_layers).strip().lower()
    if layers == "auto":
        gpu_layers = -1
    else:
        try:
            gpu_layers = _whole("gpu-layers", low=0, high=100000, accepted="a whole number >= 0 or auto")(layers)
        except argparse.ArgumentTypeError as exc:
            raise CliError(str(exc)) from None
    cpu_moe_layers = _cpu_moe_layers(args.cpu_moe_layers, args.engine)
    # the weights when none is asked (planner/serving.py default_precision: a published checkpoint's own format,
    # gpt-oss's MXFP4, else the engine's; fp16 on a card without bf16)
    default = default_precision(models, args.model, args.engine, gpus, args.gpu, args.gpus)
    arch = str(gpus.set_index("id")["architecture"].get(args.gpu, "")).lower() if "architecture" in gpus else ""
    if arch in NO_BF16_ARCHITECTURES and not precision_given and args.precision == "bf16":
        args.precision = "fp16"  # a bf16 checkpoint file, loaded there in float16 (the same bytes)
    request = dict(model=args.model, gpu=args.gpu, gpus=args.gpus, engine=args.engine,
                   precision=args.precision or default,
                   kv_precision=args.kv_precision,
                   max_model_len=args.max_model_len, gpu_layers=gpu_layers, cpu_moe_layers=cpu_moe_layers,
                   prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens)
    for key in ("gpu_memory_utilization", "max_num_seqs", "concurrency", "host_bandwidth_gbps", "engine_version",
                "draft_tensor_parallel_size", "draft_context", "backend", "gpu_memory_in_use_gib", "kv_cache_memory_bytes"):
        if getattr(args, key, None) is not None:
            request[key] = getattr(args, key)
    length_default = None  # (tokens, why): serve without --max-model-len plans with the engine's own (planner/serving.py default_model_len)
    draft_files = None  # (a --draft-model read from its files: its id and what they said)
    if getattr(args, "draft_model", None):
        from catalog.checkpoints import hub_models, is_hub_id  # a draft named ORG/NAME[@REV] (issue 25)
        if _names_a_model_file(args.draft_model) and args.draft_model not in set(models["id"]):
            # a draft from its checkpoint, as the target's --model-file: llama-server's -md takes a GGUF file
            # (tools/server/server.cpp --model-draft), and a vLLM / SGLang draft is a folder as often as a Hub id
            from catalog.checkpoints import model_from_files
            record, draft_info = model_from_files(args.draft_model)
            if record["id"] == args.model:  # both read from files named alike: the draft's id must not replace the target
                record["id"] = (record["id"][:58] + "-draft").strip("-")
            models = pd.concat([models[models["id"] != record["id"]], pd.DataFrame([record])], ignore_index=True)
            draft = record["id"]
            draft_files = (draft, draft_info)
        elif is_hub_id(args.draft_model) and args.draft_model not in set(models["id"]):
            (draft,), models, _sources = hub_models([args.draft_model], models)
        else:
            draft = args.draft_model
        request["draft_model"] = draft
    try:
        if args.max_model_len is None:
            from planner.serving import default_model_len
            length_default = default_model_len(request, models, gpus)
            request["max_model_len"] = length_default[0]
        row = serve_one(request, models, gpus)
    except ValueError as exc:  # engine/serving.py's checks name the bad value and what is accepted
        raise CliError(str(exc).replace("engine_version", "engine-version").replace("draft_model", "draft-model")
                       .replace("draft_tensor_parallel_size", "draft-tensor-parallel-size")
                       .replace("kv_cache_memory_bytes", "kv-cache-memory-bytes")
                       .replace("gpu_memory_in_use_gib", "gpu-memory-in-use")
                       .replace("kv_precision '", "kv-precision '")) from None
    _check_memory_in_use(row, args)
    row["max_model_len_default"] = length_default is not None
    row["max_model_len_source"] = length_default[1] if length_default else "--max-model-len"
    if length_default:
        from planner.serving import command_without_context
        row["command"] = command_without_context(str(row["command"]), args.engine, int(row["max_model_len"]))
    # a model read from its files: the command, the text report's -ngl (blocks the GGUF holds that llama.cpp counts but
    # does not run) and the export name them
    from planner.serving import command_naming, files_named
    files = files_named(getattr(args, "checkpoint", None), str(row["precision"]), args.engine, draft_files)
    if files:
        row["command"] = command_naming(str(row["command"]), files, args.model, str(row["precision"]), args.engine,
                                        draft_files[0] if draft_files else None)
        row["extra_blocks"] = files.get("extra_blocks", 0)
    if args.export:
        if args.json:
            raise CliError("--export prints a command; leave out --json")
        from planner.exports import serve_export
        by_id = models.set_index("id")
        draft = getattr(args, "draft_model", None)
        draft_row = by_id.loc[row["draft_model"]] if draft and str(row.get("draft_model", "")) in by_id.index else None
        # (what fits instead is serve's own report: check and estimate --what-if plan training and transformers rows)
        return _print_export(serve_export(args.export, row, by_id.loc[args.model], draft_row, files), row,
                             see="serve without --export: why, and its 'fits with' line where a change fits")
    # a vLLM / SGLang plan that holds no request: the fewest GPUs per weight format that do (planner.serving.fits_with)
    options = None
    if not (bool(row["fits"]) and float(row["max_concurrency"]) >= 1):
        from planner.serving import fits_with
        options = fits_with(request, models, gpus, asked=row)
    if args.json:
        data = {k: _jsonable(row[k]) for k in SERVE_JSON_KEYS if k in row.index}
        data["checkpoint"] = None  # null for a catalog model or --model-config, as estimate --json
        if getattr(args, "checkpoint", None):  # issue 25 (catalog/checkpoints.py)
            from catalog.checkpoints import stored_vs_engine
            lm = _whole_language_model_weights(models, {"model": args.model, "task": "infer", "precision": request["precision"]})
            vision = None if lm is None else _whole_language_model_weights(models, {"model": args.model, "task": "infer",
                                                                           "precision": request["precision"]}, vision="on")
            # serve's weights_bytes are the whole model's (its estimate on one GPU, engine/serving.py serve), vision tower
            # included where the engine loads it, and the engine's own terms (vLLM's MXFP4 padding): less the vision
            # tower's part, they are the language model's, as weights_bytes_stored
            served = row.get("weights_bytes")
            if lm is not None and served is not None and args.engine not in ("exllamav2", "exllamav3", "mlc-llm", "mlx-lm"):
                served = float(served) - (vision - lm)  # (ExLlamaV2/V3's, MLC's and MLX's weights count no vision tower)
            data["checkpoint"] = stored_vs_engine(args.checkpoint, served, request["precision"])
        data["fits_with"] = [] if options is None else [
            {"gpus": int(r["gpus"]), "precision": str(r["precision"]), "max_concurrency": float(r["max_concurrency"]),
             "max_model_len": int(r["max_model_len"]),
             "gpu_memory_utilization": None if pd.isna(r["gpu_memory_utilization"]) else float(r["gpu_memory_utilization"])}
            for _, r in options.iterrows()]
        print_json({k: data[k] for k in SERVE_JSON_KEYS if k in data})  # the contract's order
        return 0
    from engine.serving import HF_REPO_PATTERN
    source = models.set_index("id")["source"].get(args.model) if "source" in models.columns else None
    repo = re.search(HF_REPO_PATTERN, str(source or ""))
    # the catalog's stored format (a quantized checkpoint must replace the command's repository where the plan's differs);
    # not for a model read from the user's own files, which the command names
    from planner.serving import stored_precision
    stored = False if files else stored_precision(models, args.model)
    print(format_serve(row, options, repo=repo.group(1) if repo else None, stored=stored))
    return 0


MAX_MESSAGE = 400  # characters of an error line; a 100,000-character bad value is cut, not repeated


def _one_line(message: str) -> str:
    text = " ".join(str(message).split())
    if len(text) > MAX_MESSAGE:
        text = text[:MAX_MESSAGE - 60] + f"… ({len(text):,} characters) …" + text[-40:]
    return text


def _with_closest_options(message: str, parser: argparse.ArgumentParser, argv: list[str] | None) -> str:
    """argparse's 'unrecognized arguments: --fooo 1' with what is accepted: the closest option of the subcommand
    to each unknown one (difflib) and where the whole list is."""
    prefix = "unrecognized arguments: "
    import difflib
    words = [str(w) for w in (sys.argv[1:] if argv is None else argv)]
    sub = parser._subparsers._group_actions[0] if parser._subparsers else None  # (the subcommands' action)
    command = next((w for w in words if sub is not None and w in sub.choices), None)
    if command is None:
        if sub is not None and message.startswith("argument command: invalid choice"):  # `estimat`, `Check`
            typed = next((w for w in words if not w.startswith("-")), "")
            close = difflib.get_close_matches(typed.lower(), list(sub.choices), n=1, cutoff=0.6)
            return f"{message}; did you mean {close[0]}?" if close else message
        return message
    if not message.startswith(prefix):
        # `--gpu=rtx-4090 check ...`: argparse sets a flag given before the subcommand aside, and then says
        # "the following arguments are required: --gpu" of a flag the user gave
        early = [w.split("=")[0] for w in words[:words.index(command)] if w.startswith("--") and w != "--help"]
        if early:
            return (f"{message} ({', '.join(early)} given before {command}: the flags of {command} go after it, "
                    f"{parser.prog} {command} ... {early[0]})")
        return message
    options = sorted({o for a in sub.choices[command]._actions for o in a.option_strings if o.startswith("--")})
    hints = []
    for word in message[len(prefix):].split():
        if word.startswith("--"):
            name = word.split("=")[0]
            # an option the word begins with (--batchsize: --batch), else the closest spelling without dashes
            # (--seq-len, --seqlen: --seq; --methd: --method)
            begins = [o for o in options if name.startswith(o) and len(o) >= 5]
            bare = {o.lstrip("-").replace("-", ""): o for o in options}
            close = difflib.get_close_matches(name.lstrip("-").replace("-", "").replace("_", ""), list(bare), n=1,
                                              cutoff=0.75)
            guess = max(begins, key=len) if begins else (bare[close[0]] if close else None)
            if name in options:  # `--json estimate ...`: the subcommand's own flag, given before it ("did you mean --json?")
                hints.append(f"{word}: a flag of {command}, give it after the subcommand ({parser.prog} {command} ... {word})")
                continue
            hints.append(f"{word}: did you mean {guess}?" if guess else f"{word}: no such option")
    where = f"accepted: the options of {parser.prog} {command} --help"
    return f"{message} ({'; '.join(hints)}); {where}" if hints else f"{message}; {where}"


# What the text output's few typographic characters become on a standard output whose encoding cannot
# write them (a Windows console redirected to a file writes cp1252, PYTHONIOENCODING=ascii, a C locale
# with UTF-8 mode off): the line is printed with these, not refused with "'ascii' codec can't encode".
ASCII_STAND_INS = {"\u2192": "->", "\u2190": "<-", "\u2026": "...", "\u2014": "--", "\u2013": "-", "\u2212": "-",
                   "\u00d7": "x", "\u00b7": "-", "\u2717": "x", "\u2713": "v", "\u2248": "~", "\u00b1": "+/-",
                   "\u2265": ">=", "\u2264": "<=", "\u00b2": "^2", "\u2018": "'", "\u2019": "'", "\u201c": '"',
                   "\u201d": '"', "\u00a0": " ", "\u202f": " ", "\u2044": "/"}


def _stand_in(error: UnicodeEncodeError) -> tuple[str, int]:
    """codecs error handler "planner-stand-in": ASCII_STAND_INS, else the character's compatibility
    decomposition (NFKD: é -> e, ½ -> 1/2) without its accents, else "?" (never dropped: 1⁄2 stays 1/2, not 12)."""
    import unicodedata

    def one(char: str) -> str:
        if char.isascii():
            return char
        if char in ASCII_STAND_INS:
            return ASCII_STAND_INS[char]
        return "" if unicodedata.combining(char) else "?"
    out = []
    for char in error.object[error.start:error.end]:
        parts = unicodedata.normalize("NFKD", char)
        out.append(ASCII_STAND_INS.get(char) or ("".join(one(c) for c in parts) if parts != char else "") or "?")
    return "".join(out), error.end


def _prepare_stdout() -> str | None:
    """None when standard output can take the command's output, else why not (an error line, exit 2).
    A closed stdout (`llm-planner check ... >&-`) leaves sys.stdout None, where print() writes nothing
    and the command would answer without its output; a stdout whose encoding cannot write every
    character gets ASCII stand-ins (_stand_in) in place of a codec error."""
    if sys.stdout is None:
        return ("standard output is closed; accepted: an open standard output (redirect it to /dev/null to discard "
                "the output)")
    import codecs
    try:
        codecs.lookup_error("planner-stand-in")
    except LookupError:
        codecs.register_error("planner-stand-in", _stand_in)
    encoding = str(getattr(sys.stdout, "encoding", None) or "utf-8")
    try:
        universal = codecs.lookup(encoding).name.startswith(("utf-8", "utf-16", "utf-32"))
    except LookupError:
        universal = False
    if not universal and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="planner-stand-in")
    return None


def _undecodable_argument(exc: Exception, argv: list[str] | None) -> str | None:
    """The flag and value behind a UnicodeEncodeError of a lone surrogate (bytes that are not UTF-8 on the command
    line, which Python keeps as U+DC80-U+DCFF): it read "'utf-8' codec can't encode character '\\udcff' ...:
    surrogates not allowed", naming neither. Since the entry points keep text in pandas' python storage
    (engine/buffers.py prefer_python_strings), such a value no longer fails where it is stored but where it is
    looked up ("model '\\udcff' is not accepted"): a refusal of a command line holding one names the bytes
    too. None for any other error."""
    if not isinstance(exc, (UnicodeEncodeError, ValueError, CliError)):
        return None
    if isinstance(exc, UnicodeEncodeError) and "surrogates" not in str(exc):
        return None
    words = [str(w) for w in (sys.argv[1:] if argv is None else argv)]
    for i, word in enumerate(words):
        if any("\udc80" <= ch <= "\udcff" for ch in word):
            joined = word.startswith("--") and "=" in word  # --model=VALUE
            flag = word.split("=")[0] if joined else (words[i - 1] if i and words[i - 1].startswith("--") else "a value")
            return (f"{flag} {show(word.split('=', 1)[1] if joined else word)} holds bytes that are not UTF-8 text; accepted: UTF-8 text (check the "
                    "locale or encoding the value was typed or read in)")
    return None


def main(argv: list[str] | None = None, prog: str = "python -m engine") -> int:
    """prog: the name in --help and usage (`llm-planner`, planner/__main__.py)."""
    import warnings
    warnings.formatwarning = lambda message, *args, **kwargs: f"warning: {_one_line(message)}\n"
    closed = _prepare_stdout()
    if closed:
        print(f"error: {closed}", file=sys.stderr)
        return 2
    buffers.prefer_small_pages()  # fresh result memory without numpy's huge-page advice (engine/buffers.py)
    buffers.prefer_python_strings()  # text columns taken with numpy, not pyarrow.compute (engine/buffers.py)
    parser = build_parser(prog)
    try:
        args = parser.parse_args(argv)
        if not args.command:
            parser.print_help(sys.stderr)  # a usage error (exit 2): on stderr, not into a script's captured output
            return 2
        handler = {"estimate": cmd_estimate, "check": cmd_check, "sweep": cmd_sweep, "catalog": cmd_catalog,
                   "budget": cmd_budget, "evidence": cmd_evidence, "serve": cmd_serve,
                   "dashboard": cmd_dashboard, "ingest": cmd_ingest}[args.command]
        code = handler(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        return code
    except BrokenPipeError:
        # the reader went away (`| head -1`): stop quietly as Unix tools do, with SIGPIPE's status;
        # stdout goes to /dev/null so that Python's own flush at exit does not complain
        import os
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13
    except (CliError, ValueError) as exc:
        message = _undecodable_argument(exc, argv) or _with_closest_options(str(exc), parser, argv)
        print(f"error: {_one_line(message)}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = getattr(exc, "filename", "") or ""
        print(f"error: {_one_line(f'{exc.strerror or exc}: {where}'.rstrip(': '))}", file=sys.stderr)
        return 2
