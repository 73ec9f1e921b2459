"""Procurement: what a budget buys as systems a buyer can order (issue 14).

A plan is nodes x GPUs: the cards (new or used price, with its date and source), one host per
node (chassis, CPU, RAM, PSU: catalog/gpus.yaml `hosts`, by the card's `host_class`), and
network when there is more than one node. Compatibility (engine/compat.py) and the headroom
(engine/scenarios.py DEFAULTS, 10%) are applied by planning.configurations, so an
incompatible or over-full configuration is never offered.

`budget_rows` answers "what does this budget run, each workload on its cheapest system";
`one_purchase` answers "which single system covers all these workloads". The CLI's `budget`
command calls `plan_budget`; the dashboard's Budget page calls its two halves, `budget_sweep` (every
estimate, no budget in it: cached) and `budget_within` (the budget, mode, hours and deadline: a filter).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine import columns
from engine.scenarios import did_you_mean, grid
from planner import planning
from planner.systems import CONDITIONS, _text, breakeven, system_costs  # noqa: F401 (system_costs: the one implementation)

MAX_GPUS = planning.BUDGET_MAX_GPUS  # the largest GPU count unless asked (`budget --max-gpus`, the Budget page's)

# Named workloads (`--workloads model:workload`). Training uses ZeRO-3 when it needs several
# GPUs (engine/rules.py keeps one GPU at stage 0) and gradient checkpointing, as the budget
# page's presets do; inference is batch 1 at the default sequence.
WORKLOADS: dict[str, dict] = {
    "full": dict(task="train", method="full", precision="mixed_bf16", optimizer="adamw", grad_checkpointing=True, zero=3),
    "lora": dict(task="train", method="lora", precision="bf16", optimizer="adamw", grad_checkpointing=True, zero=3),
    "qlora": dict(task="train", method="qlora", precision="bf16", optimizer="adamw", grad_checkpointing=True, zero=3),
    "infer-bf16": dict(task="infer", precision="bf16"),
    "infer-int8": dict(task="infer", precision="int8"),
    "infer-int4": dict(task="infer", precision="int4"),
}
DEFAULT_WORKLOADS = ("qlora", "lora", "full", "infer-int4")
MODES = planning.BUDGET_MODES
# budget --json: one row per (model, workload) (add, never rename)
ROW_KEYS = ("model", "workload", "gpu", "gpu_name", "gpus", "nodes", "gpus_per_node", "cost_usd", "gpu_cost_usd",
            "host_usd", "network_usd", "condition", "price_usd_per_card", "price_date", "price_source", "host_class",
            "host_source", "host_date", "cloud_usd_per_hour", "cloud_date", "cloud_source",
            "memory_used_fraction", "train_days", "tokens_per_s", "node_interconnect", "compatibility_notes",
            "system_usd", "rent_usd_per_month", "power_usd_per_month", "breakeven_months", "breakeven_hours",
            "params", "active_params")
PURCHASE_KEYS = ("gpu", "gpu_name", "gpus", "nodes", "gpus_per_node", "cost_usd", "gpu_cost_usd", "host_usd",
                 "network_usd", "condition", "price_usd_per_card", "price_date", "price_source", "host_class",
                 "host_source", "host_date", "node_interconnect", "covers", "workloads",
                 "system_usd", "rent_usd_per_month", "power_usd_per_month", "breakeven_months", "breakeven_hours")
# The buy-vs-rent settings (engine/speed.py SETTINGS, each a scenario column the speed model reads):
# utilization, PUE, electricity price, hours per month and the resale share of the purchase.
TCO_KEYS = ("utilization", "pue", "usd_per_kwh", "hours_per_month", "resale_fraction")
# break-even keys where "inf" (renting never costs more) is printed as the text "inf", as in estimate --json
_INF_AS_TEXT = ("breakeven_months", "breakeven_hours")


# The settings `budget` takes beside its named workloads (the Budget page takes them from its sidebar): each the scenario
# column of that name (engine/columns.py: its flag, range and words), the task(s) it applies to. A setting left out is
# the workload's own (WORKLOADS) or else the engine's default.
WORKLOAD_SETTINGS: dict[str, tuple[str, ...]] = {
    "batch": ("train", "infer"), "seq": ("train", "infer"), "allow_long_context": ("train", "infer"),
    "precision": ("train",),  # (a serving workload's weights are its name's: infer-bf16, infer-int4, ...)
    "optimizer": ("train",), "lora_rank": ("train",), "zero": ("train",), "offload": ("train",), "recipe": ("train",),
    "objective": ("train",),
    "kv_precision": ("infer",), "kv_policy": ("infer",),
}


def workload_scenarios(given: dict, pairs) -> dict | None:
    """Each named workload's scenario with the settings `given` (WORKLOAD_SETTINGS names) that apply to its task, for
    budget_sweep's `scenarios`; None when nothing is given. ValueError names a setting that applies to none of the
    asked workloads (`pairs`), where it would be dropped without a word."""
    given = {k: v for k, v in given.items() if v is not None}
    if not given:
        return None
    unknown = sorted(set(given) - set(WORKLOAD_SETTINGS))
    if unknown:
        raise ValueError(f"workload setting {unknown[0]!r} is not accepted; accepted: {', '.join(WORKLOAD_SETTINGS)}")
    asked = list(dict.fromkeys(w for _, w in pairs))
    tasks = {WORKLOADS[w]["task"] for w in asked}
    for key, applies in WORKLOAD_SETTINGS.items():
        if key in given and not tasks & set(applies):
            flag = columns.SCENARIO_BY_NAME[key].cli or key
            kinds = " or ".join("training (full, lora, qlora)" if t == "train" else "serving (infer-*)" for t in applies)
            raise ValueError(f"{flag} applies to {kinds} workloads; none of the workloads asked ({', '.join(asked)}) "
                             f"is one: leave {flag} out or add such a workload")
    return {name: {**w, **{k: v for k, v in given.items() if w["task"] in WORKLOAD_SETTINGS[k]}}
            for name, w in WORKLOADS.items()}


def parse_workloads(text: str | None, model_ids) -> list[tuple[str, str]]:
    """'llama-3-70b:qlora,llama-3-8b:full' -> [(model, workload), ...]; ValueError names the bad item."""
    if text is None:
        return [(m, w) for m in model_ids for w in DEFAULT_WORKLOADS]
    pairs = []
    for item in [t.strip() for t in str(text).split(",") if t.strip()]:
        model, sep, work = item.partition(":")
        if not sep or not model or not work:
            raise ValueError(f"workload {item!r} is not accepted; accepted: model:workload, e.g. llama-3-8b:qlora")
        if model not in set(model_ids):
            raise ValueError(f"model {model!r} is not in the catalog; accepted: a catalog model id (see: catalog models)"
                             + did_you_mean(model, model_ids))
        if work not in WORKLOADS:
            raise ValueError(f"workload {work!r} is not accepted; accepted: {', '.join(WORKLOADS)}"
                             + did_you_mean(work.replace("_", "-"), WORKLOADS))  # 'LoRA', 'infer_int4': the one meant
        pairs.append((model, work))
    if not pairs:
        raise ValueError(f"workloads {text!r} is empty; accepted: a comma list of model:workload")
    return list(dict.fromkeys(pairs))


def _frame(pairs, gpu_ids, own: dict) -> pd.DataFrame:
    """Every (model, workload) pair on every GPU, each workload's rows holding `own[workload]` (_scenario)."""
    base = grid(gpu=list(gpu_ids))
    blocks = [(base, {**own[w], "model": m, "workload": w}) for m, w in pairs]
    frame = planning.stacked(blocks)
    order = ["model", "gpu"] + [c for c in frame.columns if c not in ("model", "gpu", "workload")] + ["workload"]
    return planning.with_defaults(frame[order])


def _scenario(name: str, scenarios: dict | None, headroom: float, tco: dict | None) -> dict:
    """A named workload's settings as its rows in _frame hold them (beside the model, the GPU and the name)."""
    extra = {k: float(v) for k, v in (tco or {}).items() if v is not None}
    return {**{k: v for k, v in _workload(name, scenarios).items() if k not in ("model", "gpu", "gpus")},
            "headroom": headroom, **extra}


# what a named workload's settings are said by (`budget`'s text and its --json `settings.workloads`), per task
_DESCRIBED = {"train": ("method", "precision", "optimizer", "grad_checkpointing", "zero", "offload", "batch", "seq",
                        "lora_rank", "recipe", "objective"),
              "infer": ("precision", "kv_precision", "kv_policy", "batch", "seq")}


def described(scenario: dict) -> dict:
    """A workload's settings that say what it runs (_DESCRIBED: the method, precision, optimizer, ZeRO stage, micro-batch
    x sequence, ...), each the scenario's own or the engine's default (_DEFAULTS), as JSON values; the LoRA rank only
    where the method has adapters."""
    merged = {**_DEFAULTS, **{k: v for k, v in scenario.items() if v is not None}}
    keys = [k for k in _DESCRIBED[merged["task"]] if k != "lora_rank" or merged.get("method") in ("lora", "qlora")]
    return {k: planning_json(merged[k]) for k in keys}


def _described_text(settings: dict) -> str:
    """described() in words: "full, mixed_bf16, adamw, ZeRO 3, gradient checkpointing, micro-batch 1 x 4,096 tokens"."""
    s = dict(settings)
    words = [str(s.pop("method"))] if "method" in s else []
    words.append(str(s.pop("precision")))
    if "optimizer" in s:
        words.append(str(s.pop("optimizer")))
    if "zero" in s:
        words.append(f"ZeRO {s.pop('zero')}")
    if s.pop("grad_checkpointing", False):
        words.append("gradient checkpointing")
    offload = s.pop("offload", "none")
    if offload not in (None, "none"):
        words.append(f"offload {offload}")
    batch, seq = s.pop("batch"), s.pop("seq")
    # (seq 0 is the engine's auto: engine/scenarios.py DEFAULTS)
    tokens = "2,048 tokens (or the model's context if shorter)" if not seq else f"{seq:,} tokens"
    if "method" in settings:
        pairs = " preference pairs" if settings.get("objective") == "dpo" else ""  # (a DPO batch counts pairs)
        words.append(f"micro-batch {batch}{pairs} x {tokens}")
    else:
        words.append(f"batch {batch} x {tokens}")
    words += [f"{k} {v}" for k, v in s.items() if v not in (None, "auto", "sft", "none")]
    return ", ".join(words)


def _workload(name: str, scenarios: dict | None) -> dict:
    """A named workload's scenario: WORKLOADS[name], or the caller's own settings for it (the Budget page's: the
    sidebar's batch, sequence, precision, ... as its other tables use them), whose task and method or weights must be
    the name's."""
    own = (scenarios or {}).get(name)
    if own is None:
        return WORKLOADS[name]
    fixed = {k: WORKLOADS[name][k] for k in ("task", "method", "precision") if k in WORKLOADS[name]}
    if fixed["task"] == "train":
        fixed.pop("precision")  # the training precision is the caller's; the method is the name's
    return {**dict(own), **fixed}


def _speed(configs: pd.DataFrame) -> pd.DataFrame:
    hours = pd.to_numeric(configs.get("train_hours", pd.Series(np.nan, index=configs.index)), errors="coerce")
    train = configs["task"].astype(str).to_numpy() == "train"
    tps = pd.to_numeric(configs.get("decode_tokens_per_s", pd.Series(np.nan, index=configs.index)), errors="coerce")
    return pd.DataFrame({"train_days": np.where(train, hours / 24.0, np.nan),
                         "tokens_per_s": np.where(train, np.nan, tps)}, index=configs.index)


def _check_budget(budget: float, mode: str, hours: float | None) -> None:
    if not np.isfinite(budget) or budget < 0:
        raise ValueError(f"budget {budget!r} is not accepted; accepted: a number of dollars >= 0")
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not accepted; accepted: {', '.join(MODES)}")
    if mode == "cloud_job" and (hours is None or not hours > 0):
        raise ValueError("--hours is required for --mode cloud_job; accepted: a number of hours > 0")


def _check_tco(tco: dict | None) -> dict:
    tco = {k: v for k, v in (tco or {}).items() if v is not None}
    unknown = sorted(set(tco) - set(TCO_KEYS))
    if unknown:
        raise ValueError(f"TCO setting {unknown[0]!r} is not accepted; accepted: {', '.join(TCO_KEYS)}")
    return tco


def plan_budget(models: pd.DataFrame, gpus: pd.DataFrame, hosts: pd.DataFrame, budget: float, mode: str = "buy",
                hours: float | None = None, workloads: str | None = None, deadline_days: float | None = None,
                one_purchase: bool = False, condition: str = "either", max_gpus: int = MAX_GPUS,
                headroom: float | None = None, rules: pd.DataFrame | None = None, gpu_ids=None,
                tco: dict | None = None, scenarios: dict | None = None) -> dict:
    """{'rows': frame (one per model x workload: its cheapest system within budget and deadline),
    'unlocks': the next ones just above the budget, 'out_of_reach': (model, workload) pairs nothing
    fits, 'purchase': one system for every listed workload (with one_purchase), 'settings'}.
    Every row and the purchase carry the buy-vs-rent break-even of the whole system (`system_usd`:
    cards + hosts + network, whatever the mode) against renting the same GPUs: `breakeven_months`
    and `breakeven_hours` (hours of use), from the engine's TCO figures at `tco` (TCO_KEYS;
    engine/speed.py defaults where left out). `scenarios`: workload name -> its scenario settings in place of
    WORKLOADS' (batch, seq, precision, optimizer, ...; the Budget page passes the sidebar's).
    = budget_within(budget_sweep(...), ...): the sweep does not depend on the budget, the mode,
    the hours or the deadline (the dashboard keeps it while those change)."""
    _check_tco(tco)
    _check_budget(budget, mode, hours)
    sweep = budget_sweep(models, gpus, hosts, workloads, condition, max_gpus, headroom, rules, gpu_ids, tco, scenarios)
    return budget_within(sweep, gpus, hosts, budget, mode, hours, deadline_days, one_purchase)


def budget_sweep(models: pd.DataFrame, gpus: pd.DataFrame, hosts: pd.DataFrame, workloads: str | None = None,
                 condition: str = "either", max_gpus: int = MAX_GPUS, headroom: float | None = None,
                 rules: pd.DataFrame | None = None, gpu_ids=None, tco: dict | None = None,
                 scenarios: dict | None = None, known: pd.DataFrame | None = None,
                 known_plans: dict | None = None) -> dict:
    """What plan_budget computes before a budget enters: every (model, workload) x GPU estimated at
    the count it needs (planning.configurations), its system priced (cards, hosts, network), its
    speed and break-even. {'rows': frame, 'ok': fits within the GPU limit (bool array), 'pairs',
    'settings'}; budget_within answers a budget from it. `known`: planning.configurations over
    planning.plans_frame(`known_plans`, ...), estimated with the same `max_gpus` and compatibility rules (the
    Budget page's own "GPUs only" sweep): a (model, workload) whose scenario is one of those plans' takes its
    rows from there instead of estimating them again (_known_rows)."""
    tco = _check_tco(tco)
    headroom = planning.DEFAULTS["headroom"] if headroom is None else float(headroom)
    pairs = parse_workloads(workloads, list(models["id"]))
    gpu_ids = list(gpus["id"]) if gpu_ids is None else list(gpu_ids)
    own = {w: _scenario(w, scenarios, headroom, tco) for _, w in pairs}
    asked = _frame(pairs, gpu_ids, own)
    # the page's own sweep holds every pair (its default: the two are among its chosen plans): nothing to estimate.
    # Otherwise every pair is estimated: estimating a few and putting the two frames together saved nothing measured.
    reused = _known_rows(asked, known, known_plans, own)
    configs = reused if reused is not None else planning.configurations(
        asked, models, gpus, max_gpus=max_gpus, rules=rules, hosts=hosts, condition=condition)
    ok = configs["fits_within"].fillna(False).to_numpy(dtype=bool)
    costs = system_costs(configs, gpus, hosts, condition)
    speed = _speed(configs)
    pays = breakeven(costs["cost_usd"].to_numpy(dtype=float), configs)
    rows = pd.concat([configs[["model", "workload", "gpu", "gpu_name", "gpus", "memory_used_fraction", "task",
                               "compatibility_notes", "rent_usd_per_hour", "rent_usd_per_month", "power_usd_per_month"]
                              + [k for k in TCO_KEYS if k in configs.columns]],
                      costs, speed, pays], axis=1)
    rows["system_usd"] = costs["cost_usd"]  # what buying costs, also in the cloud modes (cost_usd is then rent)
    # total and active parameters (a mixture of experts holds every expert, a token uses a few)
    m = models.set_index("id").reindex(rows["model"].astype(str))
    rows["params"] = pd.to_numeric(m["params"], errors="coerce").to_numpy(dtype=float)
    active = m["active_params"] if "active_params" in m.columns else m["params"]
    active = pd.to_numeric(active, errors="coerce").to_numpy(dtype=float)
    rows["active_params"] = np.where(np.isfinite(active), active, rows["params"].to_numpy())
    g = gpus.set_index("id").reindex(rows["gpu"].astype(str))
    rows["cloud_usd_per_hour"] = pd.to_numeric(g["cloud_usd_per_hour"], errors="coerce").to_numpy(dtype=float)
    rows["cloud_date"], rows["cloud_source"] = _text(g["cloud_date"].to_numpy()), _text(g["cloud_source"].to_numpy())
    settings = {"condition": condition, "headroom": headroom, "max_gpus": int(max_gpus),
                "tco": {k: planning_json(_setting(configs, asked, k)) for k in TCO_KEYS if k in configs.columns and len(configs)},
                "workloads": {w: described(s) for w, s in own.items()}}
    asked_pairs = pd.DataFrame({"model": [m for m, _ in pairs], "task": [WORKLOADS[w]["task"] for _, w in pairs]})
    unmodelled = [p for p, hit in zip(pairs, planning.not_modelled(asked_pairs, models)) if hit]
    return {"rows": rows, "ok": ok, "pairs": pairs, "settings": settings, "not_modelled": unmodelled}


# what budget_sweep reads of a configurations frame (beside the scenario columns); the system's own columns
# (system_usd, ...) are priced again at the sweep's condition (system_costs), so a `known` frame may be priced at another
_CONFIG_READS = ("model", "gpu", "gpu_name", "gpus", "memory_used_fraction", "task", "compatibility_notes",
                 "rent_usd_per_hour", "rent_usd_per_month", "power_usd_per_month", "fits_within", "train_hours",
                 "decode_tokens_per_s")


def _known_rows(asked: pd.DataFrame, known: pd.DataFrame | None, plans: dict | None,
                own: dict) -> pd.DataFrame | None:
    """The asked rows as rows of `known`, in the asked order, or None where `known` does not hold them all.
    `known` is planning.configurations over planning.plans_frame(`plans`, model=..., gpu=...); `own`: each asked
    workload's scenario as _frame puts it in its rows. A (model, workload) is held only where a plan's scenario
    equals the workload's, each over the engine's defaults (a column left out of either frame takes the same
    constant), in every column but the model and GPU (the rows' own) and gpus, tp and pp (configurations' answer: it
    estimates at one card, then at the count needed), and `known` holds that plan for the model on every asked
    GPU: a row taken is then the estimate the same scenario gets alone (one scenario, one answer;
    tests/test_procurement.py compares them). None where `known` lacks a column budget_sweep reads."""
    if known is None or not plans or not len(known) or "plan" not in known.columns \
            or any(n not in known.columns for n in _CONFIG_READS):
        return None
    workload = asked["workload"].astype(str).to_numpy()
    model = asked["model"].astype(str).to_numpy()
    gpu = asked["gpu"].astype(str).to_numpy()
    at = np.flatnonzero(known["model"].isin(set(model)).to_numpy(dtype=bool))
    where = {key: i for key, i in zip(zip(*(known[k].iloc[at].astype(str) for k in ("model", "plan", "gpu"))), at)}
    effective = {label: _effective(workload_) for label, workload_ in plans.items()}
    take = np.full(len(asked), -1, dtype=np.intp)
    for m, w in dict.fromkeys(zip(model, workload)):
        block = np.flatnonzero((model == m) & (workload == w))
        mine = _effective(own[w])
        label = next((p for p, theirs in effective.items() if theirs == mine), None)
        if label is None:
            return None
        take[block] = [where.get((m, label, g), -1) for g in gpu[block]]
    if take.min() < 0:
        return None
    rows = known.iloc[take].drop(columns="plan").reset_index(drop=True)
    for key in _asked_types(asked):  # the same values, typed as the asked frame's, as a fresh estimate returns them
        rows[key] = asked[key].reset_index(drop=True)
    return rows


def _asked_types(asked: pd.DataFrame) -> tuple:
    """The columns budget_sweep reads whose values a configurations frame keeps as asked (categories included)."""
    return ("model", "gpu", "workload", "task", *(k for k in TCO_KEYS if k in asked.columns))


# every scenario column's default as the engine takes it where a frame leaves the column out (engine/columns.py;
# the buy-vs-rent settings too, which planning.DEFAULTS leaves to engine/speed.py SETTINGS: the same values)
_DEFAULTS = {**{col.name: col.default for col in columns.SCENARIO}, **planning.DEFAULTS}


def _effective(scenario: dict) -> dict:
    """A workload's scenario over the engine's defaults (_DEFAULTS), without the row's own model and GPU and the counts
    configurations decides; numbers as floats and a missing value as None, so that equal scenarios compare equal."""
    def value(v):
        if v is None or (isinstance(v, float) and v != v):
            return None
        if isinstance(v, (bool, np.bool_, int, float, np.integer, np.floating)):
            return float(v)
        return v
    merged = {**_DEFAULTS, **{k: v for k, v in scenario.items() if value(v) is not None}}
    return {k: value(v) for k, v in merged.items() if k not in ("model", "gpu", "gpus", "tp", "pp", "plan", "workload")}


def _setting(configs: pd.DataFrame, asked: pd.DataFrame, key: str) -> float:
    """A buy-vs-rent setting as the sweep used it: the rows' value (the same in every row), or where no row has one
    (every row one the engine does not model, whose figures are empty) the value asked, else the column's default."""
    values = pd.to_numeric(configs[key], errors="coerce").dropna()
    if len(values):
        return float(values.iloc[0])
    if key in asked.columns:
        return float(pd.to_numeric(asked[key]).iloc[0])
    return float(columns.SCENARIO_BY_NAME[key].default)


def budget_within(sweep: dict, gpus: pd.DataFrame, hosts: pd.DataFrame, budget: float, mode: str = "buy",
                  hours: float | None = None, deadline_days: float | None = None, one_purchase: bool = False) -> dict:
    """plan_budget's answer from budget_sweep's: each (model, workload) on its cheapest system
    within the deadline, split at the budget; costed by the mode (no estimate: a filter)."""
    _check_budget(budget, mode, hours)
    rows, ok, pairs, condition = sweep["rows"].copy(), sweep["ok"], sweep["pairs"], sweep["settings"]["condition"]
    if mode == "cloud_hour":
        rows["cost_usd"] = rows["rent_usd_per_hour"]
    elif mode == "cloud_job":
        rows["cost_usd"] = rows["rent_usd_per_hour"] * float(hours)
    late = np.zeros(len(rows), dtype=bool)
    if deadline_days is not None:
        late = np.nan_to_num(rows["train_days"].to_numpy(dtype=float), nan=0.0) > float(deadline_days)
    rows["meets_deadline"] = ~late
    cost = pd.to_numeric(rows["cost_usd"], errors="coerce").to_numpy(dtype=float)
    usable = ok & ~late & np.isfinite(cost)
    # each (model, workload)'s cheapest usable row (ties: fewer GPUs, then the rows' order), in the order of `pairs`:
    # as rows[usable].sort_values(["cost_usd", "gpus"], kind="stable").drop_duplicates(["model", "workload"]) ordered
    # by pair, on positions (the sort, the dedupe and the reorder of the ~40-column frame cost ~3 ms a Budget change)
    cand = np.flatnonzero(usable)
    cand = cand[np.lexsort((rows["gpus"].to_numpy()[cand], cost[cand]))]
    key = pd.factorize(rows["model"])[0].astype(np.int64)[cand] * (len(rows) + 1) + pd.factorize(rows["workload"])[0][cand]
    cand = cand[np.sort(np.unique(key, return_index=True)[1])]
    order = {p: i for i, p in enumerate(pairs)}
    cand = cand[np.argsort([order[(m, w)] for m, w in zip(rows["model"].to_numpy()[cand], rows["workload"].to_numpy()[cand])],
                           kind="stable")]
    best = rows.iloc[cand]
    within = best[best["cost_usd"] <= budget].reset_index(drop=True)
    unlocks = best[best["cost_usd"] > budget].reset_index(drop=True)
    reached = set(zip(best["model"], best["workload"]))
    # training a model with linear-attention layers is not modelled (planning.not_modelled): said so, not "out of reach"
    unmodelled = set(sweep.get("not_modelled", ()))
    out_of_reach = [{"model": m, "workload": w} for m, w in pairs if (m, w) not in reached and (m, w) not in unmodelled]
    not_modelled = [{"model": m, "workload": w} for m, w in pairs if (m, w) in unmodelled]
    settings = sweep["settings"]
    result = {"rows": within, "unlocks": unlocks, "out_of_reach": out_of_reach, "not_modelled": not_modelled,
              "purchase": None,
              "settings": {"budget_usd": float(budget), "mode": mode, "hours": hours, "deadline_days": deadline_days,
                           "condition": condition, "headroom": settings["headroom"], "max_gpus": settings["max_gpus"],
                           "one_purchase": bool(one_purchase), "tco": dict(settings["tco"]),
                           # (added key) each asked workload's settings: procurement.described
                           "workloads": {w: dict(v) for w, v in settings.get("workloads", {}).items()}}}
    if one_purchase:
        result["purchase"] = purchase_for(rows[ok & ~late], pairs, gpus, hosts, budget, mode, hours, condition)
    return result


def _needs_per_gpu(rows: pd.DataFrame) -> pd.DataFrame:
    """Per GPU, in the order the rows first name it: how many (model, workload) it runs (`covered`) and the most GPUs
    one of them needs (`gpus`, each at its fewest), as rows.groupby(["gpu", "model", "workload"], sort=False)["gpus"]
    .min() and then .groupby("gpu", sort=False).agg(covered=size, gpus=max) give it (a row missing a key left out), on
    the keys' codes: the two groupbys cost ~3 ms on a Budget page's hundred rows."""
    codes, uniques = zip(*(pd.factorize(rows[k], sort=False) for k in ("gpu", "model", "workload")))
    known = (codes[0] >= 0) & (codes[1] >= 0) & (codes[2] >= 0)
    gpu, model, workload = (c[known].astype(np.int64) for c in codes)
    gpus = rows["gpus"].to_numpy()[known]
    pair = (gpu * len(uniques[1]) + model) * len(uniques[2]) + workload
    keys, at = np.unique(pair, return_inverse=True)
    fewest = np.full(len(keys), np.iinfo(np.int64).max if gpus.dtype.kind in "iu" else np.inf, dtype=gpus.dtype)
    np.minimum.at(fewest, at.reshape(-1), gpus)
    of_gpu = keys // (len(uniques[1]) * len(uniques[2]))  # each (gpu, model, workload)'s GPU
    seen = np.unique(gpu)  # the GPUs with a row (first-seen order: their codes)
    most = np.full(len(uniques[0]), np.iinfo(np.int64).min if gpus.dtype.kind in "iu" else -np.inf, dtype=gpus.dtype)
    np.maximum.at(most, of_gpu, fewest)
    return pd.DataFrame({"gpu": uniques[0].take(seen) if len(seen) < len(uniques[0]) else uniques[0],
                         "covered": np.bincount(of_gpu, minlength=len(uniques[0]))[seen].astype(np.int64),
                         "gpus": most[seen]})


def purchase_for(rows: pd.DataFrame, pairs, gpus: pd.DataFrame, hosts: pd.DataFrame, budget: float, mode: str,
                 hours: float | None, condition: str) -> dict | None:
    """The cheapest single system (one GPU type, one count) on which every listed workload fits
    (each on as many of its cards as it needs) within the budget; None when there is none."""
    counts = _needs_per_gpu(rows)
    counts = counts[counts["covered"] == len(pairs)].reset_index(drop=True)
    if counts.empty:
        return None
    costs = system_costs(counts, gpus, hosts, condition)
    costs["system_usd"] = costs["cost_usd"]
    g = gpus.set_index("id").reindex(counts["gpu"].astype(str))
    if mode == "cloud_hour":
        costs["cost_usd"] = counts["gpus"].to_numpy() * pd.to_numeric(g["cloud_usd_per_hour"], errors="coerce").to_numpy()
    elif mode == "cloud_job":
        costs["cost_usd"] = counts["gpus"].to_numpy() * pd.to_numeric(g["cloud_usd_per_hour"], errors="coerce").to_numpy() * hours
    sysf = pd.concat([counts, costs], axis=1)
    sysf["gpu_name"] = _text(g["name"].to_numpy())
    sysf = sysf[np.isfinite(sysf["cost_usd"].to_numpy(dtype=float)) & (sysf["cost_usd"] <= budget)]
    if sysf.empty:
        return None
    pick = sysf.sort_values(["cost_usd", "gpus"], kind="stable").iloc[0]
    mine = rows[rows["gpu"] == pick["gpu"]].sort_values("gpus").drop_duplicates(["model", "workload"])
    # renting the same GPUs: the TCO figures of a workload row at the system's count (the largest need)
    same = mine[mine["gpus"] == pick["gpus"]].iloc[[0]]
    pays = breakeven(np.array([float(pick["system_usd"])]), same)
    pick = pd.concat([pick, pd.Series({"rent_usd_per_month": float(same["rent_usd_per_month"].iloc[0]),
                                       "power_usd_per_month": float(same["power_usd_per_month"].iloc[0]),
                                       "breakeven_months": float(pays["breakeven_months"].iloc[0]),
                                       "breakeven_hours": float(pays["breakeven_hours"].iloc[0])})])
    out = {k: _json_value(k, pick[k]) for k in PURCHASE_KEYS if k in pick.index}
    out["covers"] = [f"{m}:{w}" for m, w in pairs]
    out["workloads"] = [{"model": r["model"], "workload": r["workload"], "gpus": int(r["gpus"]),
                         "memory_used_fraction": planning_json(r["memory_used_fraction"]),
                         "train_days": planning_json(r["train_days"]), "tokens_per_s": planning_json(r["tokens_per_s"])}
                        for _, r in mine.iterrows()]
    return out


def planning_json(value):
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        if not np.isfinite(value):
            return None
        return int(value) if float(value).is_integer() else round(float(value), 4)
    if isinstance(value, np.ndarray):
        return [planning_json(v) for v in value]
    if isinstance(value, list):
        return [planning_json(v) for v in value]
    return value


def _json_value(key: str, value):
    if key in _INF_AS_TEXT and isinstance(value, (float, np.floating)) and np.isinf(value):
        return "inf"
    return planning_json(value)


def rows_json(frame: pd.DataFrame) -> list[dict]:
    return [{k: _json_value(k, r[k]) for k in ROW_KEYS if k in r.index} for _, r in frame.iterrows()]


def _money(v) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"${v:,.0f}"


def _rate(v) -> str:
    """An hourly price in cents ("$0.22"): whole dollars would print a $0.22 card as $0."""
    return "n/a" if v is None or not np.isfinite(v) else f"${v:,.2f}"


def params_text(r) -> str:
    """' (46.7B total, 12.9B active)' for a mixture of experts; '' for a dense model."""
    total, active = r.get("params"), r.get("active_params")
    if total is None or active is None or pd.isna(total) or pd.isna(active) or total == active:
        return ""
    return f" ({total / 1e9:,.1f}B total, {active / 1e9:,.1f}B active)"


def pays_text(r) -> str:
    """The break-even of buying the system vs renting its GPUs, in words."""
    months, hours = r["breakeven_months"], r["breakeven_hours"]
    if months is None or months == "inf" or (isinstance(months, float) and np.isinf(months)):
        return "buying never beats renting" if months is not None and not pd.isna(months) else "break-even: no cloud price"
    if pd.isna(months):
        return "break-even: no cloud price"
    return f"buying pays off after {float(months):.1f} months ({float(hours):,.0f} h of use)"


def format_budget(result: dict) -> str:
    """The budget answer as text: each workload's cheapest system; every price's date and source
    listed once at the end."""
    st = result["settings"]
    lines = [f"budget {_money(st['budget_usd'])} ({st['mode']}), card prices: {st['condition']}, "
             f"headroom {st['headroom']:.0%} of each GPU kept free"]
    if st.get("workload_settings"):
        given = st["workload_settings"]
        # (objective dpo: the training workloads' batch counts preference pairs, as estimate's header says; a serving
        # workload's, sequences)
        pairs = given.get("objective") == "dpo"
        lines.append("workload settings: " + ", ".join(
            f"{k} {v}" + (" (pairs for training)" if pairs and k == "batch" else "") for k, v in given.items()))
    for name, settings in (st.get("workloads") or {}).items():
        lines.append(f"workload {name}: {_described_text(settings)}")
    if st.get("tco"):
        t = st["tco"]
        lines.append(f"buy vs rent at {t.get('utilization', 1):.0%} use, PUE {t.get('pue', 1):g}, "
                     f"${t.get('usd_per_kwh', 0):.2f}/kWh, resale {t.get('resale_fraction', 0):.0%} of the price")
    rows = result["rows"]
    sources: dict[str, str] = {}
    if rows.empty:
        lines.append("nothing fits within this budget")
    for _, r in rows.iterrows():
        speed = (f"{r['train_days']:.1f} days per 1e9 tokens" if np.isfinite(r["train_days"])
                 else f"{r['tokens_per_s']:.1f} tokens/s" if np.isfinite(r["tokens_per_s"]) else "")
        nodes = f"{int(r['nodes'])} nodes x {int(r['gpus_per_node'])} GPUs" if r["nodes"] > 1 else "1 node"
        if st["mode"] == "buy":
            cost = (f"{_money(r['cost_usd'])} = {int(r['gpus'])} x {_money(r['price_usd_per_card'])} {r['condition']} "
                    f"[{r['price_date']}] + {r['host_class']} host {_money(r['host_usd'])} [{r['host_date']}]"
                    + (f" + network {_money(r['network_usd'])}" if r["network_usd"] > 0 else ""))
            sources[f"{r['gpu']} {r['condition']} [{r['price_date']}]"] = r["price_source"]
            sources[f"host {r['host_class']} [{r['host_date']}]"] = r["host_source"]
        else:
            cost = f"{_money(r['cost_usd'])} at {_rate(r['cloud_usd_per_hour'])}/GPU-hour [{r['cloud_date']}]"
            sources[f"{r['gpu']} cloud [{r['cloud_date']}]"] = r["cloud_source"]
        lines.append(f"  {r['model']}:{r['workload']}{params_text(r)}: {int(r['gpus'])}x {r['gpu_name']} ({nodes}) {cost}; "
                     f"{r['memory_used_fraction']:.0%} of each card; {speed}; {pays_text(r)}")
    if len(result["unlocks"]):
        nxt = result["unlocks"].sort_values("cost_usd").iloc[0]
        lines.append(f"a bigger budget: {nxt['model']}:{nxt['workload']} from {_money(nxt['cost_usd'])} "
                     f"({int(nxt['gpus'])}x {nxt['gpu_name']}); {len(result['unlocks'])} more above this budget")
    if result["out_of_reach"]:
        lines.append("no configuration within the GPU limit: "
                     + ", ".join(f"{p['model']}:{p['workload']}" for p in result["out_of_reach"]))
    if result.get("not_modelled"):
        lines.append("not modelled (training a model with linear-attention layers; its serving is): "
                     + ", ".join(f"{p['model']}:{p['workload']}" for p in result["not_modelled"]))
    if st.get("one_purchase"):
        p = result.get("purchase")
        if p is None:
            lines.append("one purchase: no single system covers every workload within the budget")
        else:
            lines.append(f"one purchase: {p['gpus']}x {p['gpu_name']} ({p['nodes']} node(s), {p['condition']}) "
                         f"{_money(p['cost_usd'])} = cards {_money(p['gpu_cost_usd'])} [{p['price_date']}] + "
                         f"{p['host_class']} host {_money(p['host_usd'])} [{p['host_date']}] + network "
                         f"{_money(p['network_usd'])}; covers {', '.join(p['covers'])}; {pays_text(p)}")
            for w in p["workloads"]:
                lines.append(f"    {w['model']}:{w['workload']} on {w['gpus']} of them, "
                             f"{w['memory_used_fraction']:.0%} of each card")
            sources[f"{p['gpu']} {p['condition']} [{p['price_date']}]"] = p["price_source"]
            sources[f"host {p['host_class']} [{p['host_date']}]"] = p["host_source"]
    if sources:
        lines.append("sources:")
        lines += [f"  {k}: {v}" for k, v in sources.items()]
    return "\n".join(lines)
