"""The user catalog (catalog/store.py): custom GPUs and models persist, are validated exactly like
the shipped YAML, are never lost to a crash, a concurrent writer or a corrupt file, and can
never touch the shipped catalog."""

import csv
import io
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import duckdb
import pandas as pd
import pytest
import yaml

from catalog import Catalog, CatalogError
from catalog.store import ENV_VAR, UserCatalog, UserCatalogCorrupt, UserCatalogWarning, merged_frames, user_catalog_path
from catalog.user import model_from_config_file
from engine import estimate
from planner.report import to_csv

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = Path(__file__).resolve().parent / "data" / "good_configs"
HOSTILE = "'; DROP TABLE gpus; --"


def gpu_record(ident="my-gpu", name="My GPU 24GB", memory_gb=24):
    return {
        "id": ident, "name": name, "vendor": "nvidia", "segment": "workstation", "memory_gb": memory_gb,
        "usable_memory_bytes": memory_gb * 2**30, "usable_memory_source": "nvidia-smi memory.total",
        "memory_type": "GDDR6", "unified_memory": False, "bandwidth_gbps": 960.0, "bf16_tflops": 150.0,
        "fp16_tflops": 150.0, "fp32_tflops": None, "int8_tops": None, "fp8_tflops": None, "tdp_w": 300.0,
        "interconnect": "PCIe 4.0 x16", "interconnect_gbps": 64.0, "launch_year": 2023, "price_usd": 4000.0,
        "price_source": "my invoice", "price_date": "2024-05", "cloud_usd_per_hour": None,
        "cloud_source": "not rented", "cloud_date": "2024-05",
    }


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "planner" / "user_catalog.yaml"))
    return UserCatalog()


def test_the_test_suite_never_uses_the_home_catalog():
    assert os.environ[ENV_VAR]
    assert user_catalog_path() != Path("~/.llm-planner/user_catalog.yaml").expanduser()


def test_the_path_comes_from_the_environment(store, tmp_path):
    assert store.path == tmp_path / "planner" / "user_catalog.yaml"
    assert store.load() == {"gpus": [], "models": []}
    assert not store.path.parent.exists()  # reading creates nothing


def test_added_entries_persist_and_round_trip_through_export_and_import(store, tmp_path):
    gpu = store.add_gpu(gpu_record())
    qwen = store.add_model(model_from_config_file(CONFIGS / "qwen2-7b.json"))
    again = UserCatalog(store.path).load()  # a fresh reader sees exactly what was stored
    assert again == {"gpus": [gpu], "models": [qwen]}
    assert again["models"][0]["qkv_bias"] is True and again["models"][0]["params"] == 7_615_616_512
    text = store.export_yaml()
    assert yaml.safe_load(text)["gpus"][0]["id"] == "my-gpu"
    other = UserCatalog(tmp_path / "other.yaml", shipped_ids={})
    assert other.import_yaml(text) == {"gpus": ["my-gpu"], "models": [qwen["id"]]}
    assert other.load() == again


def test_a_record_from_a_dataframe_row_is_accepted(store, gpus):
    row = gpus.set_index("id").loc["rtx-4090"].to_dict()  # numpy numbers, NaN for the empty ones
    stored = store.add_gpu({**row, "id": "rtx-4090-mine"})
    assert type(stored["usable_memory_bytes"]) is int and stored["usable_memory_bytes"] == int(row["usable_memory_bytes"])
    assert UserCatalog(store.path).load()["gpus"][0]["id"] == "rtx-4090-mine"


@pytest.mark.parametrize("change, words", [
    ({"memory_gb": -24}, ["new GPU: entry 'my-gpu', field 'memory_gb'", "-24"]),
    ({"usable_memory_bytes": 10**13}, ["field 'usable_memory_bytes'", "more than the card's"]),
    ({"vendor": "nvida"}, ["field 'vendor'", "'nvida'"]),
    ({"colour": "red"}, ["field 'colour'", "unknown field"]),
    ({"id": "My GPU"}, ["field 'id'", "lowercase"]),
    ({"price_date": "May 2024"}, ["field 'price_date'", "YYYY-MM"]),
    ({"name": " "}, ["field 'name'", "must not be empty"]),
    ({"price_date": "2099-01"}, ["field 'price_date'", "'2099-01' is in the future"]),
    ({"cloud_date": "2099-12"}, ["field 'cloud_date'", "in the future"]),
    ({"price_used_usd": 100.0, "price_used_date": "2099", "price_used_source": "x"},
     ["field 'price_used_date'", "in the future"]),
])
def test_an_invalid_gpu_is_refused_like_the_shipped_yaml_and_nothing_is_written(store, change, words):
    with pytest.raises(CatalogError) as info:
        store.add_gpu({**gpu_record(), **change})
    for word in words:
        assert word in str(info.value)
    assert not store.path.exists()


def test_an_invalid_model_is_refused(store):
    record = model_from_config_file(CONFIGS / "llama-2-7b.json")
    with pytest.raises(CatalogError, match=r"field 'params': the architecture gives 6,738,415,616"):
        store.add_model({**record, "params": record["params"] + 1})
    assert not store.path.exists()


def test_shipped_ids_cannot_be_reused(store):
    with pytest.raises(CatalogError, match=r"'rtx-4090' is the id of a shipped GPU"):
        store.add_gpu(gpu_record("rtx-4090"))
    with pytest.raises(CatalogError, match=r"'llama-2-7b' is the id of a shipped model"):
        store.import_yaml(yaml.safe_dump({"models": [{**model_from_config_file(CONFIGS / "llama-2-7b.json"), "id": "llama-2-7b"}]}))
    assert not store.path.exists()


def test_an_existing_id_is_replaced_only_when_asked(store):
    store.add_gpu(gpu_record())
    with pytest.raises(CatalogError, match="already in your user catalog"):
        store.add_gpu(gpu_record(name="Renamed"))
    store.add_gpu(gpu_record(name="Renamed"), replace=True)
    assert [g["name"] for g in store.load()["gpus"]] == ["Renamed"]


def test_a_model_saved_from_the_hub_keeps_its_revision_through_reload_and_export(store, tmp_path):
    """Issue 25 item 5: the dashboard saves a resolved model with its source and revision (the commit)."""
    record = {**model_from_config_file(CONFIGS / "llama-2-7b.json"), "id": "org-llama",
              "source": "Hugging Face Hub org/llama@" + "a" * 40}
    store.add_model({**record, "revision": "a" * 40})
    (saved,) = UserCatalog(store.path, shipped_ids={}).load()["models"]
    assert (saved["revision"], saved["source"]) == ("a" * 40, record["source"])
    assert UserCatalog(tmp_path / "copy.yaml", shipped_ids={}).import_yaml(store.export_yaml()) == {
        "gpus": [], "models": ["org-llama"]}
    assert "revision" not in merged_frames()["models"].columns  # the frames keep the shipped columns
    with pytest.raises(CatalogError, match="field 'revision'"):
        store.add_model({**record, "id": "org-llama-2", "revision": "x\n"})


def test_remove_takes_out_only_your_own_entries(store):
    store.add_gpu(gpu_record("a-gpu"))
    store.add_gpu(gpu_record("b-gpu"))
    assert store.remove("gpu", "a-gpu")["id"] == "a-gpu"
    assert [g["id"] for g in store.load()["gpus"]] == ["b-gpu"]
    with pytest.raises(CatalogError, match="has no GPU 'zzz'; your gpus: b-gpu"):
        store.remove("gpu", "zzz")
    with pytest.raises(CatalogError, match="is a shipped GPU"):
        store.remove("gpus", "rtx-4090")
    with pytest.raises(CatalogError, match="kind 'cpu' is not accepted"):
        store.remove("cpu", "b-gpu")


def test_import_validates_every_entry_before_writing(store):
    store.add_gpu(gpu_record("kept-gpu"))
    before = store.path.read_bytes()
    bad_model = {**model_from_config_file(CONFIGS / "gemma-2b.json"), "num_layers": -1}
    doc = yaml.safe_dump({"gpus": [gpu_record("new-gpu")], "models": [bad_model]})
    with pytest.raises(CatalogError, match="field 'num_layers'"):
        store.import_yaml(doc)
    assert store.path.read_bytes() == before
    assert [g["id"] for g in store.load()["gpus"]] == ["kept-gpu"]


@pytest.mark.parametrize("content", [
    b"gpus: [unclosed\n",
    b"\xff\xfe not text",
    # (valid YAML with one invalid entry is not corrupt: that entry alone is set aside, the file
    # kept as it is: tests/test_user_catalog_schema.py)
    b"- just\n- a list\n",
])
def test_a_corrupt_file_is_kept_aside_reported_and_never_overwritten(store, content):
    store.path.parent.mkdir(parents=True)
    store.path.write_bytes(content)
    with pytest.raises(UserCatalogCorrupt) as info:
        store.load()
    message = str(info.value)
    assert "\n" not in message and str(store.path) in message and "kept as" in message
    kept = info.value.kept_as
    assert kept.name.startswith("user_catalog.yaml.corrupt-") and kept.read_bytes() == content
    assert store.quarantined() == [kept]
    assert not store.path.exists()
    assert store.load() == {"gpus": [], "models": []}
    store.add_gpu(gpu_record())  # a new catalog starts; the kept copy is untouched
    assert kept.read_bytes() == content
    assert [g["id"] for g in store.load()["gpus"]] == ["my-gpu"]


def test_a_write_to_a_corrupt_file_keeps_it_aside_first(store):
    store.path.parent.mkdir(parents=True)
    store.path.write_bytes(b"models: {{{")
    with pytest.raises(UserCatalogCorrupt):
        store.add_gpu(gpu_record())
    assert store.quarantined()[0].read_bytes() == b"models: {{{"
    assert not store.path.exists()


def test_a_corrupt_user_file_never_stops_the_shipped_catalog(store, gpus):
    store.path.parent.mkdir(parents=True)
    store.path.write_bytes(b"gpus: !!python/object/apply:os.system ['echo hi']\n")
    cat = Catalog()
    try:
        with pytest.warns(UserCatalogWarning, match="not allowed"):
            merged = cat.gpus(include_user=True)
        assert len(merged) == len(gpus) and set(merged["origin"]) == {"shipped"}
        assert len(merged.attrs["user_catalog_problems"]) == 1
        assert len(store.quarantined()) == 1
    finally:
        cat.close()


def test_a_failed_write_leaves_the_old_file_whole(store, monkeypatch):
    store.add_gpu(gpu_record("first-gpu"))
    before = store.path.read_bytes()

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("catalog.store.os.replace", crash)
    # one line naming the file (a CatalogError, as the callers catch), the OSError kept as the cause
    with pytest.raises(CatalogError, match=r"user_catalog\.yaml: cannot be written: No space left on device") as info:
        store.add_gpu(gpu_record("second-gpu"))
    assert isinstance(info.value.__cause__, OSError) and info.value.errno == 28
    monkeypatch.undo()
    assert store.path.read_bytes() == before
    assert sorted(p.name for p in store.path.parent.iterdir()) == ["user_catalog.yaml", "user_catalog.yaml.lock"]


def test_concurrent_threads_lose_no_entry(store):
    errors = []

    def writer(t):
        try:
            own = UserCatalog(store.path, shipped_ids={})
            for i in range(5):
                own.add_gpu(gpu_record(f"gpu-t{t}-{i}"))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ids = {g["id"] for g in store.load()["gpus"]}
    assert ids == {f"gpu-t{t}-{i}" for t in range(8) for i in range(5)}


def test_concurrent_processes_lose_no_entry(store):
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from catalog.store import UserCatalog; from tests.test_user_catalog import gpu_record;"
        "s = UserCatalog(sys.argv[2], shipped_ids={});"
        "[s.add_gpu(gpu_record(f'gpu-p{sys.argv[3]}-{i}')) for i in range(5)]"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(ROOT), str(store.path), str(p)], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for p in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    ids = {g["id"] for g in store.load()["gpus"]}
    assert ids == {f"gpu-p{p}-{i}" for p in range(4) for i in range(5)}


def test_hostile_names_are_stored_and_shown_verbatim_and_the_shipped_tables_stay_intact(store, gpus, models):
    store.add_gpu(gpu_record("sql-gpu", HOSTILE))
    store.add_model({**model_from_config_file(CONFIGS / "llama-2-7b.json"), "id": "sql-model", "name": HOSTILE})
    assert store.load()["gpus"][0]["name"] == HOSTILE and store.load()["models"][0]["name"] == HOSTILE

    cat = Catalog()
    try:
        merged = cat.gpus(include_user=True)
        assert merged.loc[merged["id"] == "sql-gpu", "name"].tolist() == [HOSTILE]
        assert cat.models(include_user=True).set_index("id").loc["sql-model", "name"] == HOSTILE
        rows = list(csv.reader(io.StringIO(to_csv(merged[["id", "name"]]))))
        assert ["sql-gpu", HOSTILE] in rows  # a quote is not a formula start: shown as typed
        assert cat.query("gpu_by_id", [HOSTILE]).empty
        with pytest.raises(duckdb.Error):  # sessions hold a read-only connection
            cat._con.execute("DROP TABLE gpus")
    finally:
        cat.close()
    fresh = Catalog()
    try:
        assert len(fresh.gpus()) == len(gpus) and len(fresh.models()) == len(models)
        assert "sql-gpu" not in set(fresh.gpus()["id"]) and "origin" not in fresh.gpus().columns
    finally:
        fresh.close()


def test_user_models_join_the_merged_frames_and_the_engine_uses_them(store, models):
    qwen = store.add_model(model_from_config_file(CONFIGS / "qwen2-7b.json"))
    store.add_gpu(gpu_record("my-gpu", memory_gb=24))
    frames = merged_frames()
    merged_models, merged_gpus = frames["models"], frames["gpus"]
    assert len(merged_models) == len(models) + 1
    row = merged_models.set_index("id").loc[qwen["id"]]
    assert row["origin"] == "user" and bool(row["qkv_bias"]) and row["params"] == 7_615_616_512
    assert merged_models["params"].dtype == models["params"].dtype
    out = estimate(pd.DataFrame([{"model": qwen["id"], "task": "infer", "precision": "bf16", "seq": 512,
                                  "gpu": "my-gpu"}]), merged_models, merged_gpus)
    assert out["weights_bytes"].iloc[0] == 2 * 7_615_616_512
    assert out["usable_bytes"].iloc[0] == 24 * 2**30
    # with no headroom, "fits" means the whole peak (runtime overhead included) is within the card
    assert bool(out["fits"].iloc[0]) == (out["peak_bytes"].iloc[0] <= 24 * 2**30)


def test_a_user_id_that_a_newer_shipped_catalog_takes_is_reported_not_merged(store, gpus):
    UserCatalog(store.path, shipped_ids={}).add_gpu(gpu_record("rtx-4090", "My old 4090 entry"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        merged = merged_frames()["gpus"]
    assert (merged["id"] == "rtx-4090").sum() == 1
    assert merged.set_index("id").loc["rtx-4090", "origin"] == "shipped"
    assert any("shipped catalog now has this id" in str(w.message) for w in caught)
