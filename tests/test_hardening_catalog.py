"""Hardening of catalog/ (the "Hardening" issue): text that is not text, files that are not
files, a damaged database cache, big user catalogs, and the modules' layering.

1. A lone surrogate or a control character in any text field is refused with one line naming
   the file, entry and field; in a saved file that holds one (an older version wrote it) that
   entry is set aside alone (the others load), and nothing crashes on a later run.
2. Only regular files are read, and only up to a bound: a FIFO never blocks, /dev/zero is never
   read, an empty path and a read-only folder give one clear line.
3. A damaged catalog-*.duckdb is rebuilt (and said so), never a traceback until deleted by hand.
4. YAML is parsed once, with libyaml's C parser when PyYAML has it (the timing target is met
   in benchmarks/bench_catalog.py, never timed here).
5. No catalog module imports one that imports it back; catalog/ imports nothing of the app.
6. Arbitrary Unicode in every text field: a clean refusal, or saved and loadable again.
"""

from __future__ import annotations

import ast
import json
import os
import resource
import stat
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import catalog.schema as schema
from catalog import Catalog, CatalogError, catalog_frames, load_records
from catalog.schema import GPU_FIELDS, MODEL_FIELDS, not_text, one_line, parse_yaml
from catalog.shipped import CatalogDatabaseWarning, database_path
from catalog.store import ENV_VAR, UserCatalog, UserCatalogCorrupt, UserCatalogWarning, UserCatalogWriteError
from catalog.user import model_from_config, model_from_config_file, model_from_config_text

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "good_configs"
SHIPPED = ROOT / "catalog"
NOT_TEXT = ["\ud800", "\udfff", "\x00", "\t", "\n", "\r", "\x1b", "\x7f", "\x85", "\x9f", "\u2028", "\u2029", "\ufffe"]


def gpu_record(ident="my-gpu", **change):
    return {
        "id": ident, "name": "My GPU 24GB", "vendor": "nvidia", "segment": "workstation", "memory_gb": 24,
        "usable_memory_bytes": 24 * 2**30, "usable_memory_source": "nvidia-smi memory.total",
        "memory_type": "GDDR6", "unified_memory": False, "bandwidth_gbps": 960.0, "bf16_tflops": 150.0,
        "fp16_tflops": 150.0, "fp32_tflops": None, "int8_tops": None, "fp8_tflops": None, "tdp_w": 300.0,
        "interconnect": "PCIe 4.0 x16", "interconnect_gbps": 64.0, "launch_year": 2023, "price_usd": 4000.0,
        "price_source": "my invoice", "price_date": "2024-05", "cloud_usd_per_hour": None,
        "cloud_source": "not rented", "cloud_date": "2024-05", **change,
    }


MODEL = model_from_config_file(CONFIGS / "llama-2-7b.json")


def model_record(ident="my-model", **change):
    return {**MODEL, "id": ident, **change}


def assert_one_clean_line(message: str) -> None:
    assert "\n" not in message and "\r" not in message, message
    message.encode("utf-8")  # printable anywhere: no lone surrogate in a message either
    assert not_text(message) is None, message


class ShippedFrames:
    """The shipped frames, queried once, in catalog_frames' `catalog` role."""

    def __init__(self, cat):
        self._gpus, self._models = cat.gpus(), cat.models()

    def gpus(self):
        return self._gpus

    def models(self):
        return self._models


@pytest.fixture(scope="module")
def shipped(cat):
    return ShippedFrames(cat)


@pytest.fixture(scope="module")
def shipped_ids(shipped):
    return {"gpus": set(shipped.gpus()["id"]), "models": set(shipped.models()["id"])}


@pytest.fixture
def python_parser(monkeypatch):
    """The pure-Python YAML parser, as where PyYAML has no libyaml."""
    monkeypatch.setattr(schema, "_CParser", None)


# ---- 1. text that is not text ------------------------------------------------------------------

@pytest.mark.parametrize("bad", NOT_TEXT)
def test_a_gpu_name_that_is_not_one_line_of_text_is_refused_naming_file_entry_and_field(tmp_path, bad):
    store = UserCatalog(tmp_path / "u.yaml", shipped_ids={})
    with pytest.raises(CatalogError) as info:
        store.add_gpu(gpu_record(name=f"My{bad}GPU"))
    message = str(info.value)
    assert_one_clean_line(message)
    assert message.startswith("new GPU: entry 'my-gpu', field 'name': ") and f"U+{ord(bad):04X}" in message
    assert not store.path.exists()


@pytest.mark.parametrize("field", ["usable_memory_source", "memory_type", "interconnect", "price_source",
                                   "cloud_source", "notes"])
def test_every_gpu_text_field_refuses_a_lone_surrogate(tmp_path, field):
    with pytest.raises(CatalogError, match=rf"field '{field}': .*U\+D800"):
        UserCatalog(tmp_path / "u.yaml", shipped_ids={}).add_gpu(gpu_record(**{field: "x\ud800"}))


@pytest.mark.parametrize("field", ["name", "family", "source", "notes"])
def test_every_model_text_field_refuses_a_lone_surrogate(tmp_path, field):
    with pytest.raises(CatalogError, match=rf"field '{field}': .*U\+D800"):
        UserCatalog(tmp_path / "u.yaml", shipped_ids={}).add_model(model_record(**{field: "\ud800"}))


@pytest.mark.parametrize("field, value", [("id", "my-gpu\n"), ("price_date", "2024-05\n"), ("cloud_date", "2024-05\n")])
def test_a_trailing_line_break_does_not_slip_through_a_pattern(tmp_path, field, value):
    # `$` matches before a final newline: ids and dates are matched whole
    with pytest.raises(CatalogError, match=rf"field '{field}'"):
        UserCatalog(tmp_path / "u.yaml", shipped_ids={}).add_gpu(gpu_record(**{field: value}))


def test_a_model_release_date_with_a_line_break_is_refused(tmp_path):
    with pytest.raises(CatalogError, match="field 'release_date'"):
        UserCatalog(tmp_path / "u.yaml", shipped_ids={}).add_model(model_record(release_date="2023-07-18\n"))


def test_an_alias_reference_and_shipped_file_refuse_control_characters(tmp_path):
    for name in ("gpus.yaml", "models.yaml", "references.yaml"):
        (tmp_path / name).write_bytes((SHIPPED / name).read_bytes())
    text = (tmp_path / "references.yaml").read_text()
    first_source = text.index("    source: ") + len("    source: ")
    (tmp_path / "references.yaml").write_text(text[:first_source] + '"\\x07 bell" # was: ' + text[first_source:])
    with pytest.raises(CatalogError, match=r"catalog/references\.yaml|references\.yaml: entry '.*', field 'source': .*U\+0007"):
        load_records(tmp_path)


@pytest.mark.parametrize("parser", ["C", "python"])
def test_an_imported_document_with_a_lone_surrogate_is_refused_and_nothing_is_written(tmp_path, monkeypatch, parser):
    if parser == "python":
        monkeypatch.setattr(schema, "_CParser", None)
    elif schema._CParser is None:
        pytest.skip("PyYAML without libyaml")
    store = UserCatalog(tmp_path / "u.yaml", shipped_ids={})
    escaped = yaml.safe_dump({"gpus": [gpu_record(name="\ud800")]})  # the escape "\uD800", as a YAML writer puts it
    assert "\\uD800" in escaped
    raw_text = "gpus:\n- " + json.dumps(gpu_record(name="\ud800"), ensure_ascii=False) + "\n"  # the character itself
    for document in (escaped, raw_text):
        with pytest.raises(CatalogError) as info:
            store.import_yaml(document)
        message = str(info.value)
        assert_one_clean_line(message)
        assert message.startswith("imported YAML: ")
        if parser == "python" and document is escaped:  # parsed, then refused by the field check
            assert "entry 'my-gpu', field 'name'" in message and "U+D800" in message
        else:  # refused where it stands: libyaml refuses the escape, a str with one cannot be UTF-8
            assert "line " in message
    assert not store.path.exists()


def test_a_config_json_name_with_a_lone_surrogate_is_refused_naming_the_field(tmp_path):
    cfg = json.loads((CONFIGS / "gemma-2b.json").read_text())
    for name in ("\ud800", "org/model\n", "a\x00b"):
        with pytest.raises(CatalogError) as info:
            model_from_config({**cfg, "_name_or_path": name}, "config.json")
        assert_one_clean_line(str(info.value))
        assert str(info.value).startswith("config.json, field '_name_or_path': ")
    text = json.dumps({**cfg, "_name_or_path": "\ud800"})  # the JSON escape \ud800
    with pytest.raises(CatalogError, match="_name_or_path"):
        model_from_config_text(text, "uploaded.json")
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(CatalogError, match="_name_or_path"):
        model_from_config_file(path)


def test_a_pre_quantized_method_name_that_is_not_text_is_left_out_of_the_notes():
    cfg = json.loads((CONFIGS / "llama-2-7b.json").read_text())
    record = model_from_config({**cfg, "quantization_config": {"quant_method": "gptq\ud800"}})
    assert "pre-quantized" not in record["notes"]


@pytest.mark.parametrize("parser", ["C", "python"])
@pytest.mark.parametrize("bad", ["\ud800", "\x01", "\u2028"])
def test_a_saved_file_with_text_that_is_not_text_sets_that_entry_aside_and_nothing_crashes(tmp_path, monkeypatch,
                                                                                          shipped, parser, bad):
    """As an older version wrote it: the emitter escapes the character ("\\uD800", "\\x01"). The
    entry that holds it is set aside alone (issue 24: one bad entry never empties the catalog);
    where the parser refuses the file itself (libyaml and the escape of a lone surrogate) the
    whole file is kept aside, as any file that is not a catalog."""
    if parser == "python":
        monkeypatch.setattr(schema, "_CParser", None)
    path = tmp_path / "user_catalog.yaml"
    path.write_text(yaml.safe_dump({"gpus": [gpu_record("kept-gpu"), gpu_record("old-gpu", name=f"Old{bad}GPU")],
                                    "models": []}, allow_unicode=True, sort_keys=False), encoding="utf-8")
    content = path.read_bytes()
    try:
        loaded = UserCatalog(path, shipped_ids={}).read()
    except UserCatalogCorrupt as exc:  # the file itself is refused: kept aside whole, as before
        assert parser == "C" and bad == "\ud800"
        message = str(exc)
        assert_one_clean_line(message)
        assert str(path) in message and "kept as" in message
        assert exc.kept_as.read_bytes() == content and not path.exists()
        return
    assert [g["id"] for g in loaded.records["gpus"]] == ["kept-gpu"]
    [aside] = loaded.set_aside
    assert_one_clean_line(str(aside))
    assert "entry 'old-gpu', field 'name'" in str(aside) and "set aside" in str(aside)
    assert path.read_bytes() == content  # the file is kept as it is
    # the merged frames hold the good entry and name the other one; new entries work
    with pytest.warns(UserCatalogWarning, match="entry 'old-gpu'"):
        frames = catalog_frames(shipped, UserCatalog(path, shipped_ids={}))
    assert list(frames["gpus"].loc[frames["gpus"]["origin"] == "user", "id"]) == ["kept-gpu"]
    UserCatalog(path, shipped_ids={}).add_gpu(gpu_record("new-gpu"))
    assert [g["id"] for g in UserCatalog(path, shipped_ids={}).load()["gpus"]] == ["kept-gpu", "new-gpu"]


def test_messages_escape_what_is_not_text():
    assert one_line("a\ud800b\x00c\n") == "a\\ud800b\\x00c\\n"
    error = CatalogError("dir\udcff/u.yaml", "'x\ud800'", "na\x1bme", "bad \u2028 thing")
    assert_one_clean_line(str(error))


# ---- 2. files that are not regular files ---------------------------------------------------------

def _unblock(path: Path) -> None:
    """Let a reader stuck opening a FIFO go (a writer comes and leaves)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    except OSError:
        pass


def finishes(fn, fifo: Path, seconds: float = 10.0):
    """fn() in a thread; a test failure (not a hung suite) if it is still waiting after `seconds`."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for _ in range(20):
            _unblock(fifo)
            thread.join(0.1)
        pytest.fail(f"still waiting on the FIFO {fifo} after {seconds} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")


@needs_fifo
def test_a_model_config_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(CatalogError) as info:
        finishes(lambda: model_from_config_file(fifo), fifo)
    assert_one_clean_line(str(info.value))
    assert str(info.value) == f"{fifo}: is a named pipe (FIFO), not a regular file; accepted: a path to a config.json"


@needs_fifo
def test_a_user_catalog_fifo_is_refused_left_alone_and_the_shipped_catalog_still_loads(tmp_path, shipped):
    fifo = tmp_path / "user_catalog.yaml"
    os.mkfifo(fifo)
    store = UserCatalog(fifo, shipped_ids={})
    for action in (store.load, lambda: store.add_gpu(gpu_record()), lambda: store.import_yaml("gpus: []\n")):
        with pytest.raises(CatalogError, match=r"user_catalog\.yaml: is a named pipe \(FIFO\), not a regular file; "
                                               r"accepted: a YAML file") as info:
            finishes(action, fifo)
        assert not isinstance(info.value, UserCatalogCorrupt)
    with pytest.warns(UserCatalogWarning, match="named pipe"):
        frames = finishes(lambda: catalog_frames(shipped, UserCatalog(fifo, shipped_ids={})), fifo)
    assert len(frames["gpus"]) == len(shipped.gpus())
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["user_catalog.yaml"]


def test_an_empty_model_config_path_says_it_is_not_a_file():
    with pytest.raises(CatalogError) as info:
        model_from_config_file("")
    assert str(info.value) == "model config '': is not a file; accepted: a path to a config.json"


def test_a_directory_is_not_a_config(tmp_path):
    with pytest.raises(CatalogError, match=r": is a directory, not a regular file; accepted: a path to a config\.json"):
        model_from_config_file(tmp_path)


def _limited(memory=3 * 2**30):
    def apply():  # in the child: reading a device to the end fails fast instead of taking the machine's memory
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    return apply


DEVICE_SCRIPT = """
import os, sys, json
sys.path.insert(0, sys.argv[1])
from catalog.schema import CatalogError
from catalog.user import model_from_config_file
from catalog.store import UserCatalog, catalog_frames
record = json.loads(sys.argv[2])
out = {}
for path in sys.argv[3:]:
    for what, call in (("config", lambda: model_from_config_file(path)),
                       ("user", lambda: UserCatalog(path, shipped_ids={}).load()),
                       ("add", lambda: UserCatalog(path, shipped_ids={}).add_gpu(record))):
        try:
            call()
            out[f"{what} {path}"] = "accepted"
        except CatalogError as exc:
            out[f"{what} {path}"] = str(exc)
print(json.dumps(out))
"""


@pytest.mark.skipif(not os.path.exists("/dev/zero") or sys.platform == "win32", reason="no /dev/zero")
def test_devices_and_links_to_them_are_refused_without_reading_them(tmp_path):
    link = tmp_path / "config.json"
    link.symlink_to("/dev/zero")
    paths = ["/dev/zero", "/dev/urandom", str(link)]
    done = subprocess.run([sys.executable, "-c", DEVICE_SCRIPT, str(ROOT), json.dumps(gpu_record()), *paths],
                          capture_output=True, text=True,
                          timeout=120, preexec_fn=_limited(), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    for path in paths:
        assert out[f"config {path}"].startswith(f"{path}: is a character device")
        assert out[f"config {path}"].endswith("not a regular file; accepted: a path to a config.json")
        for what in ("user", "add"):
            assert out[f"{what} {path}"].startswith(f"{path}: is a character device"), out[f"{what} {path}"]
    assert "(a link to /dev/zero)" in out[f"config {link}"]
    assert not os.path.exists("/dev/zero.lock") and not any(p.name.endswith(".lock") for p in tmp_path.iterdir())


@pytest.mark.skipif(not os.path.exists("/dev/zero") or sys.platform == "win32", reason="no /dev/zero")
def test_the_cli_refuses_devices_fifos_and_an_empty_path_in_one_line(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    env = {**os.environ, ENV_VAR: str(tmp_path / "u.yaml")}
    for arg, words in (("/dev/zero", "character device"), (str(fifo), "named pipe"), ("", "not a file")):
        done = subprocess.run([sys.executable, "-m", "engine", "estimate", "--model-config", arg, "--task", "infer"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, preexec_fn=_limited())
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and words in lines[0], done.stderr[-2000:]
    env[ENV_VAR] = str(fifo)  # the user catalog a FIFO: a warning, and the shipped catalog
    done = subprocess.run([sys.executable, "-m", "engine", "catalog", "gpus"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, preexec_fn=_limited())
    assert done.returncode == 0 and "rtx-4090" in done.stdout and "named pipe" in done.stderr, done.stderr[-2000:]


def test_a_user_catalog_bigger_than_the_bound_is_kept_aside_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr("catalog.store.MAX_USER_CATALOG_BYTES", 1000)
    path = tmp_path / "u.yaml"
    path.write_text("# " + "x" * 2000 + "\n")
    with pytest.raises(UserCatalogCorrupt, match=r"is 2,003 bytes; a catalog file is at most 1,000.*kept as"):
        UserCatalog(path, shipped_ids={}).load()


def test_a_read_only_folder_gives_one_line_naming_the_file(tmp_path, monkeypatch):
    path = tmp_path / "ro" / "u.yaml"

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path.parent))

    monkeypatch.setattr("catalog.store.tempfile.mkstemp", refuse)
    store = UserCatalog(path, shipped_ids={})
    for action in (lambda: store.add_gpu(gpu_record()), lambda: store.add_model(model_record()),
                   lambda: store.import_yaml(yaml.safe_dump({"gpus": [gpu_record()]}))):
        with pytest.raises(CatalogError) as info:  # what the pages and the CLI catch
            action()
        assert isinstance(info.value, UserCatalogWriteError) and info.value.errno == 13
        assert str(info.value).startswith(f"{path}: cannot be written: Permission denied ({path.parent})")
        assert_one_clean_line(str(info.value))
    assert not path.exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes to read-only folders")
def test_a_really_read_only_folder_gives_one_line(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(UserCatalogWriteError, match="cannot be written: Permission denied"):
            UserCatalog(folder / "u.yaml", shipped_ids={}).add_gpu(gpu_record())
    finally:
        folder.chmod(0o700)


# ---- 3. a damaged database cache ---------------------------------------------------------------------

@pytest.fixture
def tree(tmp_path, monkeypatch):
    for name in ("gpus.yaml", "models.yaml", "references.yaml"):
        (tmp_path / name).write_bytes((SHIPPED / name).read_bytes())
    monkeypatch.setenv("LLM_PLANNER_BUILD_DIR", str(tmp_path / "build"))
    return tmp_path


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage", "half"])
def test_a_damaged_database_file_is_rebuilt_and_said_so_once(tree, damage):
    first = Catalog(tree)
    ids = list(first.gpus()["id"])
    path = first.path
    first.close()
    data = path.read_bytes()
    path.write_bytes({"truncated": data[:5], "empty": b"", "garbage": os.urandom(4096) * 64,
                      "half": data[: len(data) // 2]}[damage])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = Catalog(tree)
        try:
            assert list(again.gpus()["id"]) == ids
            assert len(again.models()) > 0 and len(again.references()) > 0
        finally:
            again.close()
    told = [w for w in caught if issubclass(w.category, CatalogDatabaseWarning)]
    assert len(told) == 1 and str(path) in str(told[0].message) and "rebuilt" in str(told[0].message)
    assert "\n" not in str(told[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Catalog(tree).close()  # rebuilt for good: quiet next time


def test_a_database_file_missing_its_tables_is_rebuilt(tree):
    import duckdb
    path = database_path(tree)
    path.unlink()
    duckdb.connect(str(path)).close()  # a valid, empty database
    with pytest.warns(CatalogDatabaseWarning, match="rebuilt"):
        cat = Catalog(tree)
    assert len(cat.gpus()) > 20
    cat.close()


def test_a_database_that_fails_during_a_query_is_reopened(tree):
    import duckdb
    cat = Catalog(tree)
    ids = list(cat.gpus()["id"])

    class Broken:  # what a file damaged after it was opened gives
        def cursor(self):
            return self

        def execute(self, *args):
            raise duckdb.IOException("IO Error: Could not read enough bytes from file")

        def close(self):
            pass

    cat._db.con = Broken()
    with pytest.warns(CatalogDatabaseWarning, match="Could not read enough bytes"):
        assert list(cat.gpus()["id"]) == ids
    assert list(cat.gpus()["id"]) == ids
    cat.close()


# ---- 4. one parse, with libyaml -----------------------------------------------------------------------

def test_documents_are_parsed_once_with_the_c_parser(monkeypatch):
    if not yaml.__with_libyaml__:
        pytest.skip("PyYAML without libyaml: the pure-Python parser is the one there is")
    made = []

    class Spy(schema._CParser):
        def __init__(self, stream):
            made.append(type(stream))
            super().__init__(stream)

    def never(*args, **kwargs):
        raise AssertionError("a second, pure-Python parse")

    monkeypatch.setattr(schema, "_CParser", Spy)
    for name in ("load", "safe_load", "parse", "compose"):
        monkeypatch.setattr(yaml, name, never)
    records = load_records(SHIPPED)
    assert made == [bytes, bytes, bytes]  # one C parser per file, fed the UTF-8 bytes
    assert len(records["gpus"]) > 20


def test_a_user_catalog_is_parsed_once_for_both_frames_until_it_changes(tmp_path, monkeypatch, shipped):
    path = tmp_path / "u.yaml"
    store = UserCatalog(path, shipped_ids={})
    store.add_gpu(gpu_record())
    store.add_model(model_record())
    parses = []
    real = schema.parse_yaml
    monkeypatch.setattr("catalog.store.parse_yaml", lambda raw, name, **kw: parses.append(name) or real(raw, name, **kw))
    monkeypatch.setenv(ENV_VAR, str(path))
    cat = Catalog()  # the CLI asks for the GPUs, then the models
    assert "my-gpu" in set(cat.gpus(include_user=True)["id"])
    assert "my-model" in set(cat.models(include_user=True)["id"])
    assert len(parses) == 1
    UserCatalog(path, shipped_ids={}).add_gpu(gpu_record("second-gpu"))
    parses.clear()
    assert {"my-gpu", "second-gpu"} <= set(cat.gpus(include_user=True)["id"])
    assert len(parses) == 1
    cat.close()


def test_the_pure_python_parser_gives_what_the_c_parser_and_safe_load_give(monkeypatch):
    documents = [(SHIPPED / n).read_bytes() for n in ("gpus.yaml", "models.yaml", "references.yaml")]
    documents += [b"a: &x {b: 1, c: 2}\nd:\n  <<: *x\n  c: 3\ne: [*x]\n",
                  b"a: &x {b: 1}\nz: &y {b: 2, q: 1}\nd:\n  <<: [*x, *y]\n",
                  b"a: !!str 123\nb: !!int '0x1f'\nc: !!float '1.5'\nd: ! 12\nf: 017\ng: 1_000\nh: 1:20\ni: .inf\n"
                  b"k: yes\nl: ~\nm: 2001-12-14t21:59:43.10-05:00\nn: 2002-12-14\no: '<<'\np: \"\\t\"\n"]
    for document in documents:
        fast = parse_yaml(document, "t")
        assert fast == yaml.safe_load(document)
        with monkeypatch.context() as m:
            m.setattr(schema, "_CParser", None)
            assert parse_yaml(document, "t") == fast


@pytest.mark.parametrize("document, words", [
    (b"a: !!bool maybe\n", ["line 1", "'maybe' is not a valid !!bool value"]),  # safe_load: KeyError
    (b"a: !!timestamp soon\n", ["line 1", "not a valid !!timestamp value"]),  # safe_load: AttributeError
    (b"? [a, b]\n: 1\n", ["line 1", "a mapping key must be a single value"]),
    (b"a: &x 1\nb: &x 2\n", ["line 2", "anchor &x is defined twice"]),
    (b"a: !!seq {b: 1}\n", ["line 1", "tag '!!seq' cannot be used on a mapping"]),
    (b"a:\n  <<: 5\n", ["line 2", "a merge key (<<) needs a mapping"]),
])
def test_odd_yaml_is_one_clean_line_never_a_traceback(document, words):
    with pytest.raises(CatalogError) as info:
        parse_yaml(document, "odd.yaml")
    assert_one_clean_line(str(info.value))
    for word in words:
        assert word in str(info.value)


# ---- 5. layering ---------------------------------------------------------------------------------------

def _imports(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function (a lazy import is still one)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def test_catalog_modules_import_each_other_one_way_only_and_nothing_of_the_app():
    import importlib
    files = {f"catalog.{p.stem}" if p.stem != "__init__" else "catalog": p for p in (ROOT / "catalog").glob("*.py")}
    for module in files:
        importlib.import_module(module)  # each imports cleanly
    graph = {m: {i for i in _imports(p) if i in files and i != m} for m, p in files.items()}
    for module, deps in graph.items():
        if module != "catalog":
            assert "catalog" not in deps, f"{module} imports the package catalog, which imports it back"
        outside = {i.split(".")[0] for i in _imports(files[module])} & {"app", "pages", "planner", "dashboard"}
        assert not outside, f"{module} imports {outside}"
        # of the engine only its descriptions: parameter counts and the scenario schema (the layer below)
        engine = {i for i in _imports(files[module]) if i.split(".")[0] == "engine"}
        assert {i.rsplit(".", 1)[0] if i.count(".") > 1 else i for i in engine} <= {"engine.params", "engine.scenarios"}, \
            f"{module} imports {engine}"

    def reaches(start, target, seen=()):
        return any(d == target or (d not in seen and reaches(d, target, (*seen, d))) for d in graph[start])

    cycles = [m for m in graph if m != "catalog" and reaches(m, m)]
    assert not cycles, {m: graph[m] for m in cycles}


# ---- 6. arbitrary Unicode in every text field ---------------------------------------------------------

SPECIAL = list("\x00\t\n\r\x1b\x7f\x85\x9f\u2028\u2029\ud800\udbff\udc00\udfff\ufeff\ufffe\uffff\u00a0\u200b"
               ":'\"#&*!|>%@`-? {}[],\\=<~")
TEXT = st.text(st.one_of(st.characters(codec=None, exclude_categories=()), st.sampled_from(SPECIAL)), max_size=40)
FUZZ = settings(derandomize=True, database=None, max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _text_fields(fields: dict, record: dict) -> list[str]:
    """The fields whose valid value is a string (text, ids, choices, dates written as text)."""
    return sorted(k for k in fields if isinstance(record.get(k), str))


GPU_TEXT = _text_fields(GPU_FIELDS, {**gpu_record(), "notes": "n"})
MODEL_TEXT = _text_fields(MODEL_FIELDS, {**model_record(), "release_date": "2023-07-18"})


def _saved_or_refused(action, kind: str, record: dict, folder: Path, shipped, shipped_ids):
    """Run action(); a refusal must be one clean line, a save must come back exactly from a
    fresh load and survive the merged frames and an export / import round trip."""
    try:
        action()
    except (CatalogError, ValueError) as exc:
        assert_one_clean_line(str(exc))
        event("refused")
        return None
    event("saved, then loaded, merged, exported and imported again")
    fresh = UserCatalog(folder / "u.yaml", shipped_ids=shipped_ids).load()
    ident = record["id"]
    assert [r["id"] for r in fresh[kind]] == [ident]
    assert {k: v for k, v in fresh[kind][0].items() if k in record} == record  # every text exactly as given
    frames = catalog_frames(shipped, UserCatalog(folder / "u.yaml", shipped_ids=shipped_ids))
    row = frames[kind][frames[kind]["id"] == ident]
    assert len(row) == 1 and row["origin"].iloc[0] == "user"
    frames[kind].to_csv()  # every text column encodes
    other = UserCatalog(folder / "again.yaml", shipped_ids=shipped_ids)
    other.import_yaml(UserCatalog(folder / "u.yaml", shipped_ids=shipped_ids).export_yaml())
    assert other.load() == fresh
    return fresh


@FUZZ
@given(field=st.sampled_from(GPU_TEXT), value=TEXT, how=st.sampled_from(["add", "yaml", "json"]))
def test_any_text_in_a_gpu_field_is_refused_cleanly_or_saved_for_good(shipped, shipped_ids, field, value, how):
    record = gpu_record("fuzz-gpu", **{field: value})
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        store = UserCatalog(folder / "u.yaml", shipped_ids=shipped_ids)
        action = {"add": lambda: store.add_gpu(record),
                  "yaml": lambda: store.import_yaml(yaml.safe_dump({"gpus": [record]}, allow_unicode=True)),
                  "json": lambda: store.import_yaml(json.dumps({"gpus": [record]}, ensure_ascii=False))}[how]
        _saved_or_refused(action, "gpus", record, folder, shipped, shipped_ids)


@FUZZ
@given(field=st.sampled_from(MODEL_TEXT + ["_name_or_path"]), value=TEXT, how=st.sampled_from(["add", "yaml"]))
def test_any_text_in_a_model_field_is_refused_cleanly_or_saved_for_good(shipped, shipped_ids, field, value, how):
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        store = UserCatalog(folder / "u.yaml", shipped_ids=shipped_ids)
        if field == "_name_or_path":  # through a config.json, as the CLI and the Catalog page read one
            cfg = json.loads((CONFIGS / "qwen2-7b.json").read_text())
            try:
                record = model_from_config_text(json.dumps({**cfg, "_name_or_path": value}), "config.json")
            except CatalogError as exc:
                assert_one_clean_line(str(exc))
                return
        else:
            record = model_record("fuzz-model", **{field: value})
        action = {"add": lambda: store.add_model(record),
                  "yaml": lambda: store.import_yaml(yaml.safe_dump({"models": [record]}, allow_unicode=True))}[how]
        _saved_or_refused(action, "models", record, folder, shipped, shipped_ids)


def test_the_fuzzed_text_reaches_every_kind_of_character():
    # the alphabet has surrogates, controls and separators, so a refusal is really exercised
    assert {"\ud800", "\x00", "\n", "\u2028"} <= set(SPECIAL)
    assert set(GPU_TEXT) >= {"id", "name", "notes", "usable_memory_source", "memory_type", "interconnect",
                             "price_source", "cloud_source", "vendor", "segment", "price_date", "cloud_date"}
    assert set(MODEL_TEXT) >= {"id", "name", "family", "source", "notes", "release_date"}


# ---- the merged catalog: one function ------------------------------------------------------------------

def test_catalog_frames_merges_shipped_saved_and_session_records(tmp_path, shipped):
    store = UserCatalog(tmp_path / "u.yaml", shipped_ids={})
    store.add_gpu(gpu_record("saved-gpu"))
    store.add_gpu(gpu_record("shared-gpu", name="saved version"))
    extra = {"gpus": [gpu_record("session-gpu"), gpu_record("shared-gpu", name="session version"),
                      gpu_record("bad-gpu", memory_gb=-1), gpu_record("rtx-4090")],
             "models": [model_record("session-model")]}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frames = catalog_frames(shipped, store, extra=extra)
    gpus = frames["gpus"].set_index("id")
    n = len(shipped.gpus())
    assert list(frames["gpus"]["origin"]) == ["shipped"] * n + ["user", "session", "session"]
    assert gpus.loc["shared-gpu", "name"] == "session version"  # a session's own entry hides the saved one
    assert "bad-gpu" not in gpus.index and (frames["gpus"]["id"] == "rtx-4090").sum() == 1
    assert frames["models"].set_index("id").loc["session-model", "origin"] == "session"
    problems = frames["gpus"].attrs["user_catalog_problems"]
    assert len(problems) == 2 and any("memory_gb" in p for p in problems) and any("rtx-4090" in p for p in problems)
    assert len([w for w in caught if issubclass(w.category, UserCatalogWarning)]) == 2
    assert frames["gpus"]["memory_gb"].dtype == shipped.gpus()["memory_gb"].dtype
