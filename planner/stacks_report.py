"""The figures docs/stacks.md shows, computed (`python -m planner.stacks_report` prints the
generated blocks; tests/test_stacks.py checks that the document holds them verbatim)."""

from __future__ import annotations

import pandas as pd

from engine.estimate import estimate
from engine.stacks import RECIPE_NAMES, stacks_table
from planner.evidence import TARGET_PCT, evidence_table, hit_rate

# the longest-context table: Llama 3.1 8B QLoRA r=32 on every linear layer, batch 1 (Unsloth's
# README benchmark setup), no headroom (the most a card runs), on one card of each size
CONTEXT_GPUS = ("rtx-3060-12gb", "rtx-4060-ti-16gb", "rtx-4090", "a100-40gb-sxm", "rtx-a6000", "a100-80gb-sxm")
CONTEXT_SCENARIO = dict(model="llama-3.1-8b", task="train", method="qlora", precision="bf16", lora_rank=32,
                        lora_targets="all", batch=1, seq=2048, grad_checkpointing=True, headroom=0.0,
                        allow_long_context=True)


def recipe_block() -> str:
    lines = ["| recipe | switch | value | source |", "|---|---|---|---|"]
    for r in stacks_table():
        lines.append(f"| {r['recipe']} | {r['switch']} | {r['value']} | {r['source']} |")
    return "\n".join(lines)


def evidence_block(cat) -> str:
    table = evidence_table(cat.references(), cat.models(), cat.gpus())
    measured = table[table["kind"] == "measured"]
    lines = ["| reference | recipe | measured | estimate | unit | error |", "|---|---|---:|---:|---|---:|"]
    for _, r in measured[measured["metric"].isin(("peak_bytes", "allocated_peak_bytes", "gpus_needed", "max_seq"))].iterrows():
        lines.append(f"| {r['id']} | {r['recipe']} | {r['reference']:,.1f} | {r['estimate']:,.1f} | {r['unit']} | "
                     f"{r['error_pct']:+.1f}% |")
    hits, total = hit_rate(table)
    lines.append("")
    lines.append(f"Measured references within ±{TARGET_PCT:.0f}% under their own recipe: {hits} of {total} "
                 f"({100 * hits / total:.0f}%).")
    return "\n".join(lines)


def context_block(cat) -> str:
    models, gpus = cat.models(), cat.gpus()
    rows = [dict(CONTEXT_SCENARIO, gpu=g, recipe=r) for g in CONTEXT_GPUS for r in RECIPE_NAMES]
    result = estimate(pd.DataFrame(rows), models, gpus)
    names = dict(zip(gpus["id"], gpus["name"]))
    lines = ["| GPU | " + " | ".join(RECIPE_NAMES) + " |", "|---|" + "---:|" * len(RECIPE_NAMES)]
    for g in CONTEXT_GPUS:
        part = result[result["gpu"] == g]
        cells = [f"{int(part.loc[part['recipe'] == r, 'max_seq'].iloc[0]):,}" for r in RECIPE_NAMES]
        lines.append(f"| {names.get(g, g)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def blocks(cat) -> dict[str, str]:
    return {"recipes": recipe_block(), "evidence": evidence_block(cat), "context": context_block(cat)}


if __name__ == "__main__":
    from catalog import default_catalog
    for name, text in blocks(default_catalog()).items():
        print(f"<!-- {name} -->\n{text}\n")
