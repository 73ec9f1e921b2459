"""Systems: what a configuration of cards costs as something a buyer can order (issue 14).

One function, `system_costs`: for each (gpu, count) the nodes (at most the card's `max_per_node`
GPUs each), the cards at a new or used price (with its date and source), one host per node by
the card's `host_class` (catalog/gpus.yaml `hosts`) and, from two nodes on, the network. The
planner's configurations (`system_usd`, the Overview and Cost per fit pages) and procurement (the
`budget` command and the Budget page) both price systems through it; no other implementation.
Unknown prices stay NaN: never free.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

import engine.categories as categories

CONDITIONS = ("new", "used", "either")


def _text(values) -> np.ndarray:
    """Each value as text, "" where missing (None, NaN, pd.NA, NaT), as an object array. Per value in Python: these
    are a few hundred (card, count) pairs, where four pandas conversions cost ~0.8 ms a column."""
    return np.array(["" if pd.isna(v) else str(v) for v in np.asarray(values, dtype=object).ravel()], dtype=object)


def system_costs(configs: pd.DataFrame, gpus: pd.DataFrame, hosts: pd.DataFrame, condition: str = "either",
                 count: np.ndarray | None = None) -> pd.DataFrame:
    """For every configuration (or at `count` GPUs): nodes, GPUs per node, card, host and
    network cost, and where each price comes from. Unknown prices stay NaN (never free)."""
    priced, group = system_costs_per_pair(configs, gpus, hosts, condition, count)
    return priced.take(group).set_axis(configs.index)


def system_costs_per_pair(configs: pd.DataFrame, gpus: pd.DataFrame, hosts: pd.DataFrame, condition: str = "either",
                          count: np.ndarray | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """system_costs as (one row per distinct (card, count) of the frame, each row's position in it):
    a system depends on its card and count only (a sweep has thousands of rows, a few hundred pairs)."""
    if condition not in CONDITIONS:
        raise ValueError(f"condition {condition!r} is not accepted; accepted: {', '.join(CONDITIONS)}")
    at = categories.positions(gpus["id"], configs["gpu"])
    n = np.asarray(configs["gpus"] if count is None else count, dtype=float)
    n_code, n_values = pd.factorize(n, use_na_sentinel=False)
    group, _ = pd.factorize((at.astype(np.int64) + 1) * (len(n_values) + 1) + n_code)
    first = np.unique(group, return_index=True)[1]
    return _priced(at[first], n[first], gpus, hosts, condition), group


_CARD_FACTS = ("price_usd", "price_used_usd", "max_per_node", "host_class", "price_date", "price_used_date",
               "price_source", "price_used_source", "node_interconnect")


def _priced(at: np.ndarray, n: np.ndarray, gpus: pd.DataFrame, hosts: pd.DataFrame, condition: str) -> pd.DataFrame:
    """system_costs for `n` cards of the catalog row `at` (-1: unknown), one row per pair."""
    known = at >= 0
    facts = [c for c in _CARD_FACTS if c in gpus.columns]
    cards = gpus[facts].iloc[np.maximum(at, 0)]  # each pair's catalog facts (converted below for those rows only)

    def num(name):
        if name not in cards.columns:
            return np.full(len(n), np.nan)
        return np.where(known, pd.to_numeric(cards[name], errors="coerce").to_numpy(dtype=float), np.nan)

    def col(name):
        if name not in cards.columns:
            return np.full(len(n), "", dtype=object)
        return np.where(known, _text(cards[name].to_numpy()), "").astype(object)

    new, used = num("price_usd"), num("price_used_usd")
    if condition == "new":
        take_used = np.zeros(len(n), dtype=bool)
    elif condition == "used":
        take_used = np.ones(len(n), dtype=bool)
    else:  # the cheaper known price
        take_used = np.isfinite(used) & ~(np.isfinite(new) & (new <= used))
    card = np.where(take_used, used, new)

    per_node_max = num("max_per_node")
    per_node_max = np.where(np.isfinite(per_node_max), per_node_max, np.nan)
    nodes = np.ceil(n / per_node_max)
    per_node = np.ceil(n / nodes)
    host_class = col("host_class")
    h = hosts[hosts["kind"] == "host"].set_index("id")
    # one card in a workstation-class slot goes in a desktop (the cheaper one-GPU host)
    if "desktop" in h.index:
        host_class = np.where((host_class == "workstation") & (per_node <= h.loc["desktop", "max_gpus"]), "desktop", host_class)
    hat = h.index.get_indexer(pd.Index(host_class.astype(str)))
    hknown = hat >= 0

    def host_fact(name, numeric=False):
        values = (pd.to_numeric(h[name], errors="coerce").to_numpy(dtype=float) if numeric
                  else _text(h[name].to_numpy()))
        picked = values[np.maximum(hat, 0)] if len(values) else np.full(len(n), np.nan if numeric else "")
        return np.where(hknown, picked, np.nan if numeric else "")

    host_each = host_fact("usd_per_node", numeric=True)
    net = hosts[hosts["kind"] == "network"]
    net_node = float(net["usd_per_node"].iloc[0]) if len(net) else np.nan
    net_fixed = float(net["usd_fixed"].fillna(0).iloc[0]) if len(net) else np.nan
    network = np.where(nodes > 1, nodes * net_node + np.where(nodes > 2, net_fixed, 0.0), 0.0)
    gpu_cost = n * card
    out = pd.DataFrame({
        "nodes": nodes, "gpus_per_node": per_node, "condition": np.where(take_used, "used", "new"),
        "price_usd_per_card": card, "gpu_cost_usd": gpu_cost, "host_class": host_class, "host_usd": nodes * host_each,
        "network_usd": network, "cost_usd": gpu_cost + nodes * host_each + network,
        "price_date": np.where(take_used, col("price_used_date"), col("price_date")),
        "price_source": np.where(take_used, col("price_used_source"), col("price_source")),
        "host_source": host_fact("source"), "host_date": host_fact("date"),
        "node_interconnect": col("node_interconnect"),
        "network_source": (net["source"].iloc[0] if len(net) else ""),
    })
    return out


# the columns of `frame` breakeven reads
BREAKEVEN_INPUTS = ("rent_usd_per_month", "power_usd_per_month", "resale_fraction", "hours_per_month", "utilization")


def breakeven(cost_usd, frame: pd.DataFrame) -> pd.DataFrame:
    """Buy vs rent for a whole system of `cost_usd` (cards + hosts + network) against renting the
    same GPUs: `breakeven_months` (engine/speed.py breakeven_months over the engine's own TCO
    figures of each row: rent_usd_per_month and power_usd_per_month at its utilization, PUE and
    electricity price, resale_fraction) and `breakeven_hours`, the hours of use that takes
    (months x hours_per_month x utilization). inf: renting never costs more; NaN: a price unknown.
    The electricity counts the GPUs' TDP only (no host power): an optimistic owner."""
    from engine.speed import breakeven_months

    def col(name, default=np.nan):
        return pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=float) if name in frame.columns \
            else np.full(len(frame), default)

    months = breakeven_months(np.asarray(cost_usd, dtype=float), col("rent_usd_per_month"), col("power_usd_per_month"),
                              np.nan_to_num(col("resale_fraction", 0.0)))
    hours = months * col("hours_per_month") * col("utilization")
    return pd.DataFrame({"breakeven_months": months, "breakeven_hours": hours}, index=frame.index)
