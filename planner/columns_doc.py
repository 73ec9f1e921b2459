"""The README's column tables, generated from engine/columns.py (never typed by hand).

    python -m planner.columns_doc           # print both tables
    python -m planner.columns_doc --write   # rewrite them in README.md between their markers

tests/test_columns.py fails when README.md's tables differ from what this prints.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from engine import columns

README = Path(__file__).resolve().parent.parent / "README.md"
MARKERS = {"scenario": ("<!-- columns:scenario (generated: python -m planner.columns_doc --write) -->",
                        "<!-- /columns:scenario -->"),
           "result": ("<!-- columns:result (generated: python -m planner.columns_doc --write) -->",
                      "<!-- /columns:result -->")}


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _dashboard_default(col: columns.Column, sb: columns.Sidebar) -> str:
    """' (dashboard: lora)' where the dashboard's first screen (and so a link without the key) differs from the
    flag's default (the default column); '' where they agree."""
    value = sb.default / 100 if sb.key.endswith("_pct") else sb.default  # (whole percent: headroom_pct 10 = 0.1)
    if sb.kind == "multi":
        value = ",".join(value)
    if value == col.default:
        return ""
    shown = ("on" if sb.default else "off") if sb.kind == "bool" else (
        ", ".join(sb.default) if sb.kind == "multi" else sb.default)
    return f" (dashboard: {shown})"


def scenario_table() -> str:
    lines = ["| column | flag | sidebar / URL key | default | accepted | what it is |", "|---|---|---|---|---|---|"]
    for col in columns.SCENARIO:
        flag = f"`{col.cli}`" if col.cli else ("`--gpu`" if col.name == "gpu" else "")
        keys = ", ".join(f"`{sb.key}`" + _dashboard_default(col, sb) for sb in col.sidebar)
        lines.append(f"| `{col.name}` | {flag} | {keys} | {_cell(col.describe_default())} | "
                     f"{_cell(col.accepted_text())} | {_cell(col.help)} |")
    return "\n".join(lines)


def result_table() -> str:
    lines = ["| column | unit | what it is | null where | in `estimate --json` |", "|---|---|---|---|---|"]
    for r in columns.RESULT:
        where = "with `--gpu`" if r.needs_gpu and r.json else ("yes" if r.json else "no")
        lines.append(f"| `{r.name}` | {_cell(r.unit)} | {_cell(r.help)} | {_cell(r.null or '—')} | {where} |")
    return "\n".join(lines)


TABLES = {"scenario": scenario_table, "result": result_table}


def render(text: str) -> str:
    """text with each marked table replaced by the generated one (KeyError-free: a missing
    marker pair raises ValueError naming it)."""
    for name, (start, end) in MARKERS.items():
        pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise ValueError(f"README.md has no {start!r} ... {end!r} block")
        text = pattern.sub(lambda _m, n=name, s=start, e=end: f"{s}\n{TABLES[n]()}\n{e}", text, count=1)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the tables in README.md")
    args = ap.parse_args(argv)
    if args.write:
        README.write_text(render(README.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    print(scenario_table() + "\n\n" + result_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
