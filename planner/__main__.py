"""`llm-planner` (pyproject.toml [project.scripts]) and `python -m planner`: the command line of
planner/cli.py, the same subcommands as `python -m engine`, `dashboard` included (docs/install.md).

Installed, the shipped catalog's YAML lies in site-packages/catalog/ and its DuckDB cache is
built on first use into catalog/build/ beside it (catalog/shipped.py). Where that folder cannot
be written (a system-wide install), the cache goes to the user's cache folder instead, unless
$LLM_PLANNER_BUILD_DIR names one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from planner import cli

ENV_VAR = "LLM_PLANNER_BUILD_DIR"  # catalog/shipped.py's build_dir()


def _writable(folder: Path) -> bool:
    """folder can be written, or created inside a writable parent."""
    while not folder.exists():
        folder = folder.parent
    return os.access(folder, os.W_OK)


def use_writable_build_dir() -> None:
    """Point $LLM_PLANNER_BUILD_DIR at ~/.cache/llm-planner where catalog/build cannot be written."""
    if os.environ.get(ENV_VAR):
        return
    package_build = Path(cli.__file__).resolve().parent.parent / "catalog" / "build"
    if not _writable(package_build):
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        os.environ[ENV_VAR] = str(cache / "llm-planner" / "build")


def main(argv: list[str] | None = None) -> int:
    use_writable_build_dir()
    return cli.main(argv, prog="llm-planner")


if __name__ == "__main__":
    sys.exit(main())
