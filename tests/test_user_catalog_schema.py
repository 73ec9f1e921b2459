"""Issue 24, item 5: the user's file survives the schema (catalog/store.py).

1. An entry saved by an older schema loads: a field added since is read with its BACKFILL value
   (one line per entry saying so where the value is one a user reads); tests/data/user_catalogs/
   holds a file written by the code of each earlier version of the user file (each file's first
   lines name the commit), and every entry of each loads with the right values.
2. One bad entry is set aside alone, named with its id, the field, the bad value and what is
   accepted; every other entry loads, the file is not renamed, and a save keeps the set-aside
   entry in the file. The CLI names it on stderr (exit 0), the Catalog page in a warning.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from catalog.schema import GPU_FIELDS, MODEL_FIELDS, CatalogError
from catalog.store import (
    BACKFILL,
    ENV_VAR,
    FIELDS,
    PLACEHOLDER_NOTE,
    USABLE_MEMORY_SOURCE_UNKNOWN,
    UserCatalog,
    UserCatalogCorrupt,
    UserCatalogWarning,
    catalog_frames,
)
from tests.conftest import ROOT

DATA = Path(__file__).resolve().parent / "data" / "user_catalogs"
FILES = {
    "v0": DATA / "v0-hand-written-without-usable-memory-source.yaml",
    "v1": DATA / "v1-b749624-first-user-file.yaml",
    "v2": DATA / "v2-7b9506f-release-date-optional.yaml",
    "v3": DATA / "v3-188f9d0-systems-and-used-prices.yaml",
    "v4": DATA / "v4-c5cbb93-moe-and-attention-layouts.yaml",
}
# The fields of the user file's first version (b749624: `git show b749624:catalog/schema.py`).
V1_GPU_FIELDS = {
    "id", "name", "vendor", "segment", "memory_gb", "usable_memory_bytes", "usable_memory_source", "memory_type",
    "unified_memory", "bandwidth_gbps", "bf16_tflops", "fp16_tflops", "fp32_tflops", "int8_tops", "fp8_tflops",
    "tdp_w", "interconnect", "interconnect_gbps", "launch_year", "price_usd", "price_source", "price_date",
    "cloud_usd_per_hour", "cloud_source", "cloud_date", "notes"}
V1_MODEL_FIELDS = {
    "id", "name", "family", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
    "head_dim", "vocab_size", "max_context", "tied_embeddings", "qkv_bias", "params", "release_date", "source",
    "notes"}
DERIVED = {"active_params"}  # computed by check_model, never filled in


# libyaml's loader and emitter where PyYAML has them (a file of thousands of entries is read here)
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def raw_entries(path: Path) -> dict[str, list[dict]]:
    doc = yaml.load(path.read_text(encoding="utf-8"), Loader=LOADER)
    return {kind: doc.get(kind) or [] for kind in ("gpus", "models")}


def sample(version: str, folder: Path) -> Path:
    """A copy of a sample file to read (a read takes a lock file beside the file: never in tests/data)."""
    return Path(shutil.copy(FILES[version], folder / FILES[version].name))


def gpu(ident: str, **change) -> dict:
    """A GPU entry as the current code writes it."""
    record = {
        "id": ident, "name": f"GPU {ident}", "vendor": "nvidia", "segment": "workstation", "memory_gb": 24,
        "usable_memory_bytes": 24 * 2**30, "usable_memory_source": "nvidia-smi memory.total", "memory_type": "GDDR6",
        "unified_memory": False, "bandwidth_gbps": 960.0, "bf16_tflops": 150.0, "fp16_tflops": 150.0,
        "fp32_tflops": None, "int8_tops": None, "fp8_tflops": None, "tdp_w": 300.0, "interconnect": "PCIe 4.0 x16",
        "interconnect_gbps": 64.0, "launch_year": 2023, "price_usd": 4000.0, "price_source": "my invoice",
        "price_date": "2024-05", "cloud_usd_per_hour": None, "cloud_source": "not rented", "cloud_date": "2024-05",
    }
    record.update(change)
    return {k: v for k, v in record.items() if v is not DROP}


DROP = object()


def write(path: Path, gpus: list, models: list | None = None) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.dump({"gpus": gpus, "models": models or []}, Dumper=DUMPER, sort_keys=False,
                              allow_unicode=True), encoding="utf-8")
    return path.read_bytes()


def no_copies(path: Path) -> None:
    assert not list(path.parent.glob(path.name + ".corrupt-*")), "the file was renamed aside"


# ---- 1. the table of fields added over time ---------------------------------------------------

def test_every_field_added_since_the_first_user_file_has_a_backfill_row():
    """A field added to the schema without a row here would refuse (or silently default) every
    older entry: the table must grow with the schema."""
    assert set(BACKFILL["gpus"]) - {"usable_memory_source"} == set(GPU_FIELDS) - V1_GPU_FIELDS - DERIVED
    assert set(BACKFILL["models"]) == (set(MODEL_FIELDS) - V1_MODEL_FIELDS - DERIVED) | {"qkv_bias"}


@pytest.mark.parametrize("kind", ["gpus", "models"])
def test_each_backfill_value_is_accepted_and_an_optional_one_is_the_fields_default(kind):
    for name, fill in BACKFILL[kind].items():
        spec = FIELDS[kind][name]
        assert fill.value is None or spec.check(fill.value) == fill.value, name
        if spec.required:
            # a required field filled in is always said, and never with a number (a figure)
            assert fill.note and isinstance(fill.value, str), name
        else:
            assert fill.value == spec.default, name
    assert "not recorded" in USABLE_MEMORY_SOURCE_UNKNOWN
    assert "usable_memory_bytes" not in BACKFILL["gpus"]  # the figure is never invented


# ---- 1. a file written by each earlier version -----------------------------------------------

EXPECTED_IDS = {
    "v0": (["lab-gpu-a", "lab-gpu-b"], []),
    **{v: (["my-workstation-gpu", "my-cloud-gpu"], ["llama-3.2-1b", "qwen2-7b", "mistral-7b-v0.1", "gemma-2b"])
       for v in ("v1", "v2", "v3")},
    "v4": (["my-workstation-gpu", "my-cloud-gpu"],
           ["llama-3.2-1b", "qwen2-7b", "mistral-7b-v0.1", "gemma-2b", "mixtral-8x7b-v0.1"]),
}


@pytest.mark.parametrize("version", list(FILES))
def test_a_file_of_each_earlier_version_loads_every_entry_with_the_fields_filled_in(version, tmp_path):
    path = sample(version, tmp_path)
    before = path.read_bytes()
    loaded = UserCatalog(path, shipped_ids={}).read()
    assert loaded.set_aside == []
    gpu_ids, model_ids = EXPECTED_IDS[version]
    assert [g["id"] for g in loaded.records["gpus"]] == gpu_ids
    assert [m["id"] for m in loaded.records["models"]] == model_ids
    raw = raw_entries(path)
    for kind in ("gpus", "models"):
        for entry, record in zip(raw[kind], loaded.records[kind]):
            for name, fill in BACKFILL[kind].items():
                if name not in entry:  # written before the field existed: read with the table's value
                    assert record[name] == fill.value, (version, entry["id"], name)
            for name, value in entry.items():  # and what the file says is read as it says it
                if name == "release_date" and value == "2000-01-01" or name == "notes" and PLACEHOLDER_NOTE in value:
                    continue
                assert record[name] == value, (version, entry["id"], name)
            if kind == "models":
                assert record["active_params"] == record["params"] or record["num_experts"]  # derived, dense
    assert path.read_bytes() == before  # reading changes nothing on disk


def test_the_first_user_file_reads_its_placeholder_date_as_unknown_with_one_note_per_model(tmp_path):
    path = sample("v1", tmp_path)
    assert path.read_text().count("release_date: '2000-01-01'") == 4  # what b749624 wrote
    loaded = UserCatalog(path, shipped_ids={}).read()
    models = loaded.records["models"]
    assert [m["release_date"] for m in models] == [None] * 4
    assert all(m["notes"].endswith("Release date unknown (a config.json has none).") for m in models)
    assert not any("placeholder" in m["notes"] for m in models)
    notes = loaded.filled["models"]
    assert len(notes) == 4 and loaded.filled["gpus"] == []
    for note, model in zip(notes, models):
        assert "\n" not in note and str(path) in note and f"entry '{model['id']}'" in note
        assert "release_date '2000-01-01' was a placeholder" in note and "read as unknown" in note
    # the layout those models were estimated with when saved (dense Llama, full attention)
    mistral = models[2]
    assert (mistral["sliding_window"], mistral["sliding_window_layers"], mistral["num_experts"]) == (0, 0, 0)
    assert models[1]["qkv_bias"] is True and models[0]["qkv_bias"] is False
    assert models[3]["norms_per_layer"] == 2 and models[3]["tied_embeddings"] is True
    # GPUs from before issue 14: systems and used prices unknown, never guessed
    for g in loaded.records["gpus"]:
        assert all(g[name] is None for name in ("form_factor", "max_per_node", "host_class", "price_used_usd"))


def test_later_versions_keep_what_they_wrote(tmp_path):
    v3 = UserCatalog(sample("v3", tmp_path), shipped_ids={}).read()
    assert v3.filled == {"gpus": [], "models": []}
    first = v3.records["gpus"][0]
    assert (first["form_factor"], first["max_per_node"], first["host_class"], first["price_used_usd"]) == \
        ("pcie", 4, "workstation", 2500.0)
    assert v3.records["models"][0]["release_date"] is None  # 7b9506f on: no date, no placeholder
    v4 = UserCatalog(sample("v4", tmp_path), shipped_ids={}).read()
    mixtral = v4.records["models"][-1]
    assert (mixtral["num_experts"], mixtral["experts_per_token"]) == (8, 2)
    assert mixtral["active_params"] == 12_879_925_248 and mixtral["params"] == 46_702_792_704


def test_a_gpu_without_usable_memory_source_loads_with_a_note_naming_it(tmp_path):
    path = sample("v0", tmp_path)
    loaded = UserCatalog(path, shipped_ids={}).read()
    gpus = loaded.records["gpus"]
    assert [g["usable_memory_source"] for g in gpus] == [USABLE_MEMORY_SOURCE_UNKNOWN] * 2
    assert [g["usable_memory_bytes"] for g in gpus] == [51_527_024_640, 25_753_026_560]  # as written, never made up
    assert len(loaded.filled["gpus"]) == 2
    for note, ident in zip(loaded.filled["gpus"], ("lab-gpu-a", "lab-gpu-b")):
        assert note.startswith(f"{path}: entry '{ident}': usable_memory_source was not in the entry")
        assert USABLE_MEMORY_SOURCE_UNKNOWN in note and "\n" not in note
    # the merged frames: every entry there, the notes in attrs, one warning line for all of them
    copy = Path(shutil.copy(path, tmp_path / "mine.yaml"))
    with pytest.warns(UserCatalogWarning, match=r"2 gpus saved by an older version were read with a field filled in"):
        frame = catalog_frames(store=UserCatalog(copy, shipped_ids={}), kinds=("gpus",))["gpus"]
    assert {"lab-gpu-a", "lab-gpu-b"} <= set(frame.loc[frame["origin"] == "user", "id"])
    assert len(frame.attrs["user_catalog_notes"]) == 2 and frame.attrs["user_catalog_problems"] == []


@pytest.mark.parametrize("version", list(FILES))
def test_a_save_writes_the_filled_in_fields_back_and_changes_no_entry(tmp_path, version):
    path = Path(shutil.copy(FILES[version], tmp_path / "user_catalog.yaml"))
    store = UserCatalog(path, shipped_ids={})
    before = store.read().records
    store.add_gpu(gpu("added-later"))
    after = store.read()
    assert after.filled == {"gpus": [], "models": []} and after.set_aside == []  # upgraded on disk
    assert after.records["gpus"][:-1] == before["gpus"] and after.records["models"] == before["models"]
    assert "2000-01-01" not in path.read_text()


def test_an_import_of_an_older_export_is_upgraded_too(tmp_path):
    store = UserCatalog(tmp_path / "user_catalog.yaml", shipped_ids={})
    assert store.import_yaml(FILES["v0"].read_text()) == {"gpus": ["lab-gpu-a", "lab-gpu-b"], "models": []}
    assert store.load()["gpus"][0]["usable_memory_source"] == USABLE_MEMORY_SOURCE_UNKNOWN


# ---- 2. one bad entry is set aside alone ---------------------------------------------------------

BROKEN = [  # (the broken entry, words its line must hold: the entry, the field, the bad value, what is accepted)
    (gpu("fleet-bad", vendor="nvida"), ["entry 'fleet-bad'", "field 'vendor'", "'nvida'", "nvidia, amd, intel, apple"]),
    (gpu("fleet-bad", memory_gb=-24), ["entry 'fleet-bad'", "field 'memory_gb'", "-24", "must be > 0"]),
    (gpu("fleet-bad", usable_memory_bytes=DROP), ["entry 'fleet-bad'", "field 'usable_memory_bytes'",
                                                  "is required but missing"]),  # a figure: never filled in
    (gpu("fleet-bad", fp4_tflops=9000.0), ["entry 'fleet-bad'", "field 'fp4_tflops'", "unknown field; accepted: id,"]),
    (gpu("fleet-bad", usable_memory_bytes=200 * 2**30), ["entry 'fleet-bad'", "field 'usable_memory_bytes'",
                                                         "more than the card's 24 GB"]),
    (gpu("fleet-bad", name="Old\x01GPU"), ["entry 'fleet-bad'", "field 'name'", "U+0001 (a control character)"]),
    ("just a line of text", ["entry #21", "must be a mapping of fields, got str"]),
    (gpu("fleet-0007"), ["entry 'fleet-0007'", "field 'id'", "duplicate id 'fleet-0007'", "accepted: an id used once"]),
]


@pytest.mark.parametrize("bad, words", BROKEN, ids=["vendor", "memory", "no-usable-bytes", "unknown-field",
                                                     "cross-check", "control-char", "not-a-mapping", "duplicate-id"])
def test_one_bad_entry_is_set_aside_alone_and_kept_in_the_file(tmp_path, bad, words):
    path = tmp_path / "user_catalog.yaml"
    entries = [gpu(f"fleet-{i:04d}") for i in range(20)]
    entries.insert(1234, bad)  # past the end: entry #21
    content = write(path, entries)
    store = UserCatalog(path, shipped_ids={})
    loaded = store.read()
    assert [g["id"] for g in loaded.records["gpus"]] == [f"fleet-{i:04d}" for i in range(20)]
    assert len(loaded.set_aside) == 1
    line = str(loaded.set_aside[0])
    assert "\n" not in line and line.startswith(f"{path}: ")
    for word in words:
        assert word in line, (word, line)
    assert "set aside" in line and "every other entry loaded" in line
    assert path.read_bytes() == content
    no_copies(path)
    # a save keeps the set-aside entry in the file, as it was read; it is named again next time
    store.add_gpu(gpu("fleet-new"))
    assert bad in raw_entries(path)["gpus"]
    again = store.read()
    # (an entry named by its place is now after the 21 that load: a save writes it after them)
    assert [str(s) for s in again.set_aside] == [line.replace("entry #21", "entry #22")]
    assert len(again.records["gpus"]) == 21 and again.records["gpus"][-1]["id"] == "fleet-new"
    store.remove("gpu", "fleet-0001")
    assert bad in raw_entries(path)["gpus"] and len(store.read().records["gpus"]) == 20
    no_copies(path)


def test_a_set_aside_entry_yaml_cannot_write_back_is_kept_in_a_byte_exact_copy(tmp_path, monkeypatch):
    """A lone surrogate (an older version let one in; the pure-Python parser reads its escape):
    it cannot be written back, so the save copies the file first and writes the rest."""
    from catalog import schema
    monkeypatch.setattr(schema, "_CParser", None)
    path = tmp_path / "user_catalog.yaml"
    # as PyYAML's pure-Python emitter writes it (escaped: "Old\\uD800GPU")
    path.write_text(yaml.safe_dump({"gpus": [gpu("kept-a"), gpu("surrogate", name="Old\ud800GPU"),
                                             gpu("control", name="x\x01y")]}, allow_unicode=True), encoding="utf-8")
    content = path.read_bytes()
    store = UserCatalog(path, shipped_ids={})
    assert [s.entry for s in store.read().set_aside] == ["'surrogate'", "'control'"]
    assert store.rejected() == []
    store.add_gpu(gpu("kept-b"))  # no traceback
    [copy] = store.rejected()
    assert copy.name.startswith("user_catalog.yaml.rejected-") and copy.read_bytes() == content
    after = store.read()
    assert [g["id"] for g in after.records["gpus"]] == ["kept-a", "kept-b"]
    assert [s.entry for s in after.set_aside] == ["'control'"]  # the writable one stays in the file
    no_copies(path)


def test_an_entry_with_a_field_written_twice_is_set_aside_alone_and_both_values_are_kept(tmp_path):
    """A hand edit that adds a field the entry already has (YAML takes both; our parser refuses a key twice). It is
    one entry's problem: before, the whole file was renamed .corrupt-<timestamp> and every entry of it left the
    catalog ("the user catalog starts empty"). Its two values cannot both be written back as a mapping, so a save
    first keeps the file byte for byte (.rejected-<timestamp>.yaml), as for an entry YAML cannot hold."""
    path = tmp_path / "user_catalog.yaml"
    write(path, [gpu("kept-a"), gpu("edited"), gpu("kept-b")])
    text = path.read_text(encoding="utf-8")
    at = text.index("- id: edited\n") + len("- id: edited\n")
    path.write_text(text[:at] + "  memory_gb: 48\n" + text[at:], encoding="utf-8")
    content = path.read_bytes()
    line = content.decode().splitlines().index("  memory_gb: 24", content.decode().splitlines().index("- id: edited")) + 1
    store = UserCatalog(path, shipped_ids={})
    loaded = store.read()
    assert [g["id"] for g in loaded.records["gpus"]] == ["kept-a", "kept-b"]
    [aside] = loaded.set_aside
    message = str(aside)
    assert "\n" not in message and message.startswith(f"{path}: ")
    for words in ("entry 'edited'", "field 'memory_gb'", f"appears twice in this entry (again at line {line})",
                  "48 and 24", "accepted: the field once", "set aside", "every other entry loaded"):
        assert words in message, (words, message)
    assert path.read_bytes() == content
    no_copies(path)
    store.add_gpu(gpu("kept-c"))  # a save: the other entries and the new one are written, the file first copied
    [copy] = store.rejected()
    assert copy.read_bytes() == content
    assert [g["id"] for g in store.read().records["gpus"]] == ["kept-a", "kept-b", "kept-c"]
    no_copies(path)


def test_a_key_twice_outside_an_entry_still_keeps_the_whole_file_aside(tmp_path):
    path = tmp_path / "user_catalog.yaml"
    write(path, [gpu("kept-a")])
    path.write_text(path.read_text(encoding="utf-8") + "gpus: []\n", encoding="utf-8")
    with pytest.raises(UserCatalogCorrupt, match="key 'gpus' appears twice"):
        UserCatalog(path, shipped_ids={}).read()


def test_one_bad_entry_among_thousands_leaves_every_other_one_loaded(tmp_path):
    """The issue's case: thousands of saved GPUs and one that no longer validates."""
    path = tmp_path / "user_catalog.yaml"
    entries = [gpu(f"fleet-{i:04d}") for i in range(3000)]
    entries.insert(1234, gpu("fleet-bad", vendor="nvida"))
    content = write(path, entries)
    loaded = UserCatalog(path, shipped_ids={}).read()
    assert [g["id"] for g in loaded.records["gpus"]] == [f"fleet-{i:04d}" for i in range(3000)]
    assert [(s.kind, s.entry, s.error.field) for s in loaded.set_aside] == [("gpus", "'fleet-bad'", "vendor")]
    assert loaded.set_aside[0].raw == entries[1234]
    assert path.read_bytes() == content
    no_copies(path)


def test_set_aside_entries_are_warned_one_line_each_and_the_shipped_catalog_is_whole(tmp_path, gpus):
    path = tmp_path / "user_catalog.yaml"
    write(path, [gpu("mine-a"), gpu("mine-b", vendor="nvida"), gpu("mine-c"), gpu("mine-d", segment="garage")])
    with pytest.warns(UserCatalogWarning) as record:
        frame = catalog_frames(store=UserCatalog(path, shipped_ids={}), kinds=("gpus",))["gpus"]
    lines = [str(w.message) for w in record]
    assert len(lines) == 2
    assert "entry 'mine-b', field 'vendor'" in lines[0] and "'nvida'" in lines[0]
    assert "entry 'mine-d', field 'segment'" in lines[1] and "'garage'" in lines[1]
    assert frame.attrs["user_catalog_problems"] == lines
    assert list(frame.loc[frame["origin"] == "user", "id"]) == ["mine-a", "mine-c"]
    assert len(frame) == len(gpus) + 2


def test_a_file_that_is_not_a_catalog_is_still_kept_aside_whole(tmp_path):
    path = tmp_path / "user_catalog.yaml"
    path.write_bytes(b"gpus: [unclosed\n")
    with pytest.raises(UserCatalogCorrupt) as info:
        UserCatalog(path, shipped_ids={}).read()
    assert info.value.kept_as.read_bytes() == b"gpus: [unclosed\n" and not path.exists()


def test_an_import_is_still_all_or_nothing(tmp_path):
    store = UserCatalog(tmp_path / "user_catalog.yaml", shipped_ids={})
    text = yaml.safe_dump({"gpus": [gpu("ok-1"), gpu("bad-1", vendor="nvida")]})
    with pytest.raises(CatalogError, match=r"entry 'bad-1', field 'vendor'"):
        store.import_yaml(text)
    assert not store.path.exists()


# ---- the command line and the Catalog page ----------------------------------------------------------

def test_the_cli_lists_the_good_entries_and_names_each_set_aside_one_on_stderr(tmp_path):
    path = tmp_path / "user_catalog.yaml"
    write(path, [gpu("cli-good-1"), gpu("cli-bad-1", vendor="nvida"), gpu("cli-good-2"),
                 gpu("cli-bad-2", launch_year=1850), gpu("cli-good-3")])
    content = path.read_bytes()
    run = subprocess.run([sys.executable, "-m", "engine", "catalog", "gpus"], check=False, cwd=ROOT, capture_output=True,
                         text=True, timeout=300, env={**os.environ, ENV_VAR: str(path)})
    assert run.returncode == 0, run.stderr
    listed = run.stdout.split()
    assert listed[-3:] == ["cli-good-1", "cli-good-2", "cli-good-3"] and "cli-bad-1" not in listed
    lines = [line for line in run.stderr.splitlines() if str(path) in line]  # the file's lines, one per entry
    assert len(lines) == 2, run.stderr
    assert lines[0].startswith("warning: ") and "entry 'cli-bad-1', field 'vendor'" in lines[0] and "'nvida'" in lines[0]
    assert "entry 'cli-bad-2', field 'launch_year'" in lines[1] and "1850" in lines[1] and ">= 1990" in lines[1]
    assert "Traceback" not in run.stderr
    assert path.read_bytes() == content
    no_copies(path)


@pytest.mark.usefixtures("clear_streamlit_caches")
def test_the_catalog_page_warns_about_each_set_aside_entry_and_shows_the_others(tmp_path, monkeypatch, gpus):
    path = tmp_path / "planner" / "user_catalog.yaml"
    old = raw_entries(FILES["v0"])["gpus"][0]  # saved without usable_memory_source
    write(path, [gpu("page-good"), gpu("page-bad", vendor="nvida"), old, gpu("page-worse", memory_gb=-1)])
    content = path.read_bytes()
    monkeypatch.setenv(ENV_VAR, str(path))
    at = AppTest.from_file(str(ROOT / "dashboard.py"), default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("2 entries could not be loaded and were set aside" in t.value.replace("\\", "") for t in at.toast)
    at.switch_page("pages/catalog_browser.py").run()
    assert not at.exception, [e.value for e in at.exception]
    shown = [w.value.replace("\\", "") for w in at.warning]
    listing = [w for w in shown if "could not be loaded and were set aside" in w]
    assert len(listing) == 1, shown
    body = listing[0]
    assert "entry 'page-bad', field 'vendor': must be one of nvidia, amd, intel, apple; got 'nvida'" in body
    assert "entry 'page-worse', field 'memory_gb': must be > 0, got -1" in body
    assert "page-good" not in body and "lab-gpu-a" not in body
    notes = [i.value.replace("\\", "") for i in at.info]
    assert any("entry 'lab-gpu-a': usable_memory_source was not in the entry" in n for n in notes), notes
    ids = set(at.dataframe[0].value["id"])
    assert {"page-good", "lab-gpu-a"} <= ids and not {"page-bad", "page-worse"} & ids
    assert len(ids) == len(gpus) + 2
    assert path.read_bytes() == content
    no_copies(path)
