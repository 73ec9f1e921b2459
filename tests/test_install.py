"""`pip install .` (issue 26 item 1): a wheel with the llm-planner console script, the shipped
catalog as package data and the dashboard's files, that runs from a folder outside the checkout.

What this proves, without the network (the wheel is built with --no-build-isolation from the
checkout's files copied to a temporary folder, so the checkout gains no build/ folder):
- the wheel declares `llm-planner = planner.__main__:main` and requirements.txt's dependencies;
- it holds every tracked module of engine/, catalog/, planner/, app/ and pages/, dashboard.py and
  the catalog's YAML files, and no tests, no built database, no checkout-only files;
- installed (`pip install --target`, the wheel's own files and its generated llm-planner script)
  and run from another folder with only the install on the path, the generated `llm-planner`
  script answers `check` with exit status 0 (and the install's entry function with 1 and 2),
  the catalog is read from the install (its DuckDB cache built there on first use), and
  `llm-planner dashboard` would start the dashboard.py of the install, beside the pages/ and
  app/frame.py it needs.
Not proved here: that pip resolves the dependencies from an index (that needs the network),
nor a browser session on the installed dashboard (docs/install.md says how it was checked).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from app import serve
from planner import dashboard_cmd

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "catalog", "planner", "app", "pages")
CATALOG_FILES = ("gpus.yaml", "models.yaml", "references.yaml", "serving_measurements.yaml")
OUTSIDE = {"PYTHONPATH", "PYTHONHOME", "LLM_PLANNER_BUILD_DIR", "LLM_PLANNER_USER_CATALOG"}


def _tracked(*paths: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "--", *paths], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """(the folder the wheel was built in, the wheel): a copy of the checkout's files, which pip's build leaves
    with a build/ folder and an *.egg-info, as `pip install .` leaves the checkout."""
    src = tmp_path_factory.mktemp("src")
    for name in (*PACKAGES, "docs"):  # docs/: installed as planner/docs (pyproject.toml package-dir)
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "build"))
    for name in ("pyproject.toml", "dashboard.py", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                            "--no-index", "-q", "-w", str(out)], capture_output=True, text=True, cwd=src)
    # (setuptools older than 70.1 lacks bdist_wheel: requirements-test.txt asks for a newer one)
    assert built.returncode == 0, built.stdout + built.stderr
    (found,) = out.glob("llm_hardware_planner-*.whl")
    return src, found


@pytest.fixture(scope="module")
def wheel(built) -> Path:
    return built[1]


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
                           str(target), str(wheel)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return target


def _run_installed(target: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in OUTSIDE}
    env["PYTHONPATH"] = str(target)  # the install only: not the checkout, not the cwd
    env["LLM_PLANNER_USER_CATALOG"] = str(cwd / "user_catalog.yaml")
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _requirement(text: str) -> tuple:
    from packaging.requirements import Requirement  # (streamlit's dependency)
    req = Requirement(text.strip())
    return req.name.lower(), req.specifier


def test_the_wheel_declares_the_console_script_and_the_dependencies(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = z.read(info).decode()
        metadata = z.read(info.replace("entry_points.txt", "METADATA")).decode()
    assert "[console_scripts]\nllm-planner = planner.__main__:main" in entry_points
    requires = {_requirement(line.split(":", 1)[1]) for line in metadata.splitlines() if line.startswith("Requires-Dist:")}
    wanted = {_requirement(line.split("#")[0]) for line in (ROOT / "requirements.txt").read_text().splitlines()
              if line.split("#")[0].strip()}
    assert requires == wanted  # pyproject.toml and requirements.txt say the same


def test_the_install_page_lists_every_dependency():
    """docs/install.md lists the dependencies `pip install .` brings; it named six of the eight (gguf and
    huggingface_hub, which --model-file and --model ORG/NAME read, were missing)."""
    text = " ".join((ROOT / "docs" / "install.md").read_text(encoding="utf-8").split())
    listed = text.split("the dependencies are requirements.txt's ranges (", 1)[1].split(";", 1)[0]
    wanted = {_requirement(line.split("#")[0])[0] for line in (ROOT / "requirements.txt").read_text().splitlines()
              if line.split("#")[0].strip()}
    assert {name.strip().lower() for name in listed.split(",")} == wanted


def test_readme_names_the_installed_commands_subcommands_which_are_python_m_engines():
    """README's install block said `llm-planner --help` has every subcommand of python -m engine "plus check and
    dashboard"; python -m engine has both (one parser): the line now lists the subcommands both have."""
    from planner import cli

    def commands(prog):
        parser = cli.build_parser(prog)
        return list(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)
    assert commands("llm-planner") == commands("python -m engine")
    (line,) = [x for x in (ROOT / "README.md").read_text(encoding="utf-8").splitlines() if x.startswith("llm-planner --help")]
    assert line.split("#", 1)[1].split(":", 1)[1].strip().split(", ") == commands("llm-planner")


def test_what_pip_install_leaves_in_the_checkout_is_neither_linted_nor_tracked(built):
    """`pip install .` (README, docs/install.md) builds in the checkout: setuptools leaves build/lib/ (a copy of
    every package) and an *.egg-info there. Before, `make test`'s `ruff check .` then failed on build/lib/pages/*.py
    (12 E402: pages/* has its per-file ignore, build/lib/pages/* had none) and `git status` listed build/."""
    src, _ = built
    assert (src / "build" / "lib" / "pages").is_dir()  # what setuptools left, as in a checkout
    shutil.copy2(ROOT / ".gitignore", src / ".gitignore")
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=src, capture_output=True,
                          text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    paths = ["build/lib/pages/overview.py", "dist/llm_hardware_planner-0.1.0-py3-none-any.whl"]
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=ROOT, capture_output=True, text=True)
    assert ignored.stdout.split() == paths, ignored.stderr


def test_the_wheel_holds_the_code_the_catalog_and_the_dashboard(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    modules = {p for p in _tracked(*PACKAGES, "dashboard.py") if p.endswith(".py")}
    assert modules and modules <= names, sorted(modules - names)
    assert {f"catalog/{f}" for f in CATALOG_FILES} <= names
    assert {f"pages/{Path(p).name}" for p in _tracked("pages")} <= names
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "docs/")) or "/build/" in n
                or n.endswith((".duckdb", ".pyc"))]


def test_the_installed_tool_runs_from_another_folder(installed, tmp_path):
    script = installed / "bin" / "llm-planner"
    assert script.is_file()
    fits = _run_installed(installed, tmp_path, str(script), "check", "--model", "llama-3.1-8b", "--task", "infer",
                          "--precision", "int4", "--gpu", "rtx-4090")
    assert (fits.returncode, fits.stderr) == (0, "") and fits.stdout.startswith("fits: llama-3.1-8b infer int4")
    assert (installed / "catalog" / "build").is_dir()  # the catalog's cache, built inside the install
    # the other exit statuses, the modules' origin and what `llm-planner dashboard` would start, in
    # one more interpreter (each start imports pandas and DuckDB: seconds on the 2-core CI machine)
    probe = _run_installed(installed, tmp_path, sys.executable, "-c", (
        "import contextlib, importlib.util, io, json, catalog.shipped as s, planner.dashboard_cmd as d\n"
        "from planner.__main__ import main\n"
        "def run(*argv):\n"
        "    out, err = io.StringIO(), io.StringIO()\n"
        "    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):\n"
        "        code = main(list(argv))\n"
        "    return [code, out.getvalue(), err.getvalue()]\n"
        "too_big = run('check', '--model', 'llama-3-70b', '--method', 'full', '--gpu', 'rtx-4090', '--json')\n"
        "bad = run('check', '--model', 'no-such-model', '--gpu', 'rtx-4090')\n"
        "frame = importlib.util.find_spec('app.frame').origin\n"
        "print(json.dumps([too_big, bad, str(s.CATALOG_DIR), str(d.DASHBOARD), frame, d.streamlit_command()[1]]))"))
    assert probe.returncode == 0, probe.stderr
    too_big, bad, catalog_dir, dashboard, frame, run = json.loads(probe.stdout)
    assert too_big[0] == 1 and json.loads(too_big[1])["schema_version"] == 1
    assert bad[0] == 2 and bad[2].startswith("error: model 'no-such-model'") and "Traceback" not in bad[2]
    assert Path(catalog_dir) == installed / "catalog"
    assert Path(dashboard) == installed / "dashboard.py" == Path(frame).parent.parent / "dashboard.py"  # app/frame.py's
    assert Path(run) == installed / "app" / "serve.py" and Path(run).is_file()  # the launcher runs dashboard.py
    # dashboard.py's st.Page paths are relative to it
    pages = [line.split('"')[1] for line in Path(dashboard).read_text().splitlines() if "st.Page(" in line]
    assert pages and all((installed / p).is_file() for p in pages)


def test_the_docs_the_helps_name_are_in_the_install(wheel, installed, tmp_path):
    """The helps and many errors name docs/*.md (docs/models.md, docs/ingest.md, docs/stacks.md, ...). Before, the
    wheel held none of them: a user of the installed copy (no checkout) had none of the pages named. Now the
    checkout's docs/ is installed as planner/docs/, and every --help ends with the folder they lie in."""
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    docs = {f"planner/docs/{Path(p).name}" for p in _tracked("docs") if p.endswith(".md")}
    assert docs and docs <= names, sorted(docs - names)
    helped = _run_installed(installed, tmp_path, str(installed / "bin" / "llm-planner"), "ingest", "--help")
    assert helped.returncode == 0 and "docs/ingest.md" in helped.stdout, helped.stderr
    named = " ".join(helped.stdout.split()).split("docs/NAME.md named here: ")[-1].split()[0]
    assert Path(named) == installed / "planner" / "docs" / "NAME.md"
    assert (Path(named).parent / "ingest.md").read_bytes() == (ROOT / "docs" / "ingest.md").read_bytes()


def test_the_dashboard_command_carries_the_checkouts_streamlit_settings():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    flat = {f"{section}.{key}": value for section, keys in config.items() for key, value in keys.items()}
    assert dashboard_cmd.SETTINGS == flat
    cmd = dashboard_cmd.streamlit_command(8502, "127.0.0.1", ["--", "--server.maxUploadSize", "10"])
    assert cmd[:2] == [sys.executable, str(ROOT / "app" / "serve.py")]  # streamlit run on dashboard.py:
    assert serve.DASHBOARD == ROOT / "dashboard.py"
    flags = dict(zip(cmd[2::2], cmd[3::2]))
    assert flags["--server.port"] == "8502" and flags["--server.address"] == "127.0.0.1"
    assert flags["--server.headless"] == "true" and flags["--browser.gatherUsageStats"] == "false"
    assert flags["--server.maxUploadSize"] == "10"


def test_a_read_only_install_builds_the_catalog_cache_in_the_users_cache(monkeypatch, tmp_path):
    from planner import __main__ as entry
    monkeypatch.delenv("LLM_PLANNER_BUILD_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(entry, "_writable", lambda folder: False)
    entry.use_writable_build_dir()
    assert os.environ["LLM_PLANNER_BUILD_DIR"] == str(tmp_path / "llm-planner" / "build")
    monkeypatch.setenv("LLM_PLANNER_BUILD_DIR", "/somewhere")  # a folder the user named is kept
    entry.use_writable_build_dir()
    assert os.environ["LLM_PLANNER_BUILD_DIR"] == "/somewhere"
