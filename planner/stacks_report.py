"""The figures docs/stacks.md shows, computed (`python -m planner.stacks_report` prints the
generated blocks; tests/test_stacks.py checks that the document holds them verbatim)."""

from __future__ import annotations

import re
from pathlib import Path

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


# Unsloth README 'Context length benchmarks' (github.com/unslothai/unsloth README.md before commit
# c60636695c, 2026-03; the tables first in the Llama 3.3 blog, Dec 2024), measured: 4-bit QLoRA on
# q, k, v, o, gate, up, down, rank 32, batch 1, sequences padded to the length. (model, VRAM GB,
# catalog card) -> (Unsloth, Hugging Face + FA2) tokens; None = OOM. 8 GB (2,972 / OOM) has no
# bf16 card in the catalog. Issue 13 judges these within -40% / +25% (tests/test_stacks.py).
PUBLISHED_MAX_CONTEXT = {
    ("llama-3.1-8b", 12, "rtx-3060-12gb"): (21848, 932),
    ("llama-3.1-8b", 16, "rtx-4060-ti-16gb"): (40724, 2551),
    ("llama-3.1-8b", 24, "rtx-4090"): (78475, 5789),
    ("llama-3.1-8b", 40, "a100-40gb-sxm"): (153977, 12264),
    ("llama-3.1-8b", 48, "rtx-a6000"): (191728, 15502),
    ("llama-3.1-8b", 80, "a100-80gb-sxm"): (342733, 28454),
    ("llama-3.3-70b", 48, "rtx-a6000"): (12106, None),
    ("llama-3.3-70b", 80, "a100-80gb-sxm"): (89389, 6916),
}
PUBLISHED_RECIPES = ("unsloth", "hf")  # the table's columns: Unsloth, Hugging Face + FA2 (peft QLoRA)


def published_context_rows(cat) -> pd.DataFrame:
    """Every published longest context beside the estimate's max_seq under the column's recipe
    (QLoRA r=32 on every linear layer, batch 1, no headroom: the whole card)."""
    rows = [dict(CONTEXT_SCENARIO, model=m, lora_targets="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
                 gpu=g, recipe=r, attention="flash" if r == "hf" else "auto")  # Hugging Face + FA2
            for (m, _, g) in PUBLISHED_MAX_CONTEXT for r in PUBLISHED_RECIPES]
    result = estimate(pd.DataFrame(rows), cat.models(), cat.gpus())
    published = [v for pair in PUBLISHED_MAX_CONTEXT.values() for v in pair]
    vram = [gb for (_, gb, _) in PUBLISHED_MAX_CONTEXT for _ in PUBLISHED_RECIPES]
    out = pd.DataFrame({"model": [r["model"] for r in rows], "vram_gb": vram, "gpu": [r["gpu"] for r in rows],
                        "recipe": [r["recipe"] for r in rows], "published": published,
                        "estimate": result["max_seq"].to_numpy(dtype=float), "fits": result["fits"].to_numpy()})
    return out


def published_context_block(cat) -> str:
    t = published_context_rows(cat)
    lines = ["| model | VRAM | GPU | recipe | published | estimate | error |", "|---|---:|---|---|---:|---:|---:|"]
    for _, r in t.iterrows():
        pub = "OOM" if r["published"] is None or pd.isna(r["published"]) else f"{int(r['published']):,}"
        est = f"{int(r['estimate']):,}" if r["estimate"] > 0 else "does not fit"
        err = "—" if pub == "OOM" else f"{100 * (r['estimate'] / r['published'] - 1):+.1f}%"
        lines.append(f"| {r['model']} | {r['vram_gb']} GB | {r['gpu']} | {r['recipe']} | {pub} | {est} | {err} |")
    return "\n".join(lines)


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
    return {"recipes": recipe_block(), "evidence": evidence_block(cat), "context": context_block(cat),
            "context-published": published_context_block(cat)}


def write_doc(path, cat) -> None:
    """Replace each generated block of docs/stacks.md (the marker line and the paragraphs under it,
    as many as the block has) with the one computed now."""
    doc = Path(path).read_text(encoding="utf-8")
    for name, text in blocks(cat).items():
        paragraphs = text.count("\n\n")  # a block may hold a sentence under its table: as many paragraphs
        pattern = re.compile(r"<!-- " + re.escape(name) + r" -->\n(?:[^\n]+\n)+" + r"(?:\n(?:[^\n]+\n)+)" * paragraphs)
        if not pattern.search(doc):
            raise ValueError(f"marker <!-- {name} --> not found in {path}")
        doc = pattern.sub(lambda _: f"<!-- {name} -->\n{text}\n", doc, count=1)
    Path(path).write_text(doc, encoding="utf-8")


if __name__ == "__main__":
    import sys
    from catalog import default_catalog
    if sys.argv[1:] == ["--write"]:  # docs/stacks.md's blocks as computed now
        write_doc(Path(__file__).resolve().parent.parent / "docs" / "stacks.md", default_catalog())
    else:
        for name, text in blocks(default_catalog()).items():
            print(f"<!-- {name} -->\n{text}\n")
