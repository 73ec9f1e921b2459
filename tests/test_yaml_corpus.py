"""Malformed catalog YAML (tests/data/bad_yaml/, one document per file) is refused with one line
that names the file, and the entry and field where there is one — both when it replaces a
shipped catalog file (catalog.db.load_records) and when a user imports it
(catalog.store.UserCatalog.import_yaml), which must then write nothing.

A file named gpus-*.yaml replaces catalog/gpus.yaml, models-*.yaml replaces catalog/models.yaml.
The documents are the small valid entries in GOOD_GPUS / GOOD_MODELS below with one defect
each (the control test proves the entries are valid without it).
"""

import shutil
from pathlib import Path

import pytest

from catalog import CatalogError, load_records
from catalog.schema import MAX_YAML_BYTES
from catalog.store import UserCatalog

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "catalog"
CORPUS = Path(__file__).resolve().parent / "data" / "bad_yaml"
PWNED = Path("/tmp/llm-planner-yaml-pwned")  # what the python/object tags would create

GOOD_GPUS = (CORPUS / "gpus-negative-memory.yaml").read_text().replace("memory_gb: -24\n", "memory_gb: 24\n")
GOOD_MODELS = (CORPUS / "models-negative-layers.yaml").read_text().replace("num_layers: -32", "num_layers: 32")

# file -> words the one-line message must contain (besides the file's name)
EXPECTED = {
    "gpus-bad-id.yaml": ["entry 'Test GPU'", "field 'id'", "lowercase"],
    "gpus-bad-price-date.yaml": ["entry 'test-gpu'", "field 'price_date'", "'2022-13'"],
    "gpus-bad-vendor.yaml": ["entry 'test-gpu'", "field 'vendor'", "'nvida'", "nvidia"],
    "gpus-billion-laughs.yaml": ["line 7", "expands to more than", "aliases"],
    "gpus-binary-tag.yaml": ["line 3", "tag '!!binary' is not allowed"],
    "gpus-bool-as-text.yaml": ["entry 'test-gpu'", "field 'unified_memory'", "true or false", "'no'"],
    "gpus-deep-nesting.yaml": ["line 18", "nested deeper than"],
    "gpus-duplicate-id.yaml": ["entry 'test-gpu'", "field 'id'", "duplicate id"],
    "gpus-duplicate-key.yaml": ["line 7", "key 'memory_gb' appears twice"],
    "gpus-empty.yaml": ["is empty", "expected a mapping"],
    "gpus-entries-not-a-list.yaml": ["field 'gpus'", "must be a list of entries", "dict"],
    "gpus-entry-not-a-mapping.yaml": ["entry #1", "must be a mapping of fields", "str"],
    "gpus-fractional-bytes.yaml": ["entry 'test-gpu'", "field 'usable_memory_bytes'", "whole number", "25769803776.5"],
    "gpus-inf-power.yaml": ["entry 'test-gpu'", "field 'tdp_w'", "inf"],
    "gpus-many-aliases.yaml": ["line 3", "more than 100 aliases"],
    "gpus-memory-as-text.yaml": ["entry 'test-gpu'", "field 'memory_gb'", "must be a number", "'lots'"],
    "gpus-missing-bandwidth.yaml": ["entry 'test-gpu'", "field 'bandwidth_gbps'", "required but missing"],
    "gpus-multiple-documents.yaml": ["line 27", "single document"],
    "gpus-nan-memory.yaml": ["entry 'test-gpu'", "field 'memory_gb'", "nan"],
    "gpus-negative-memory.yaml": ["entry 'test-gpu'", "field 'memory_gb'", "> 0", "-24"],
    "gpus-not-utf8.yaml": ["not UTF-8", "0xe9"],
    "gpus-null-name.yaml": ["entry 'test-gpu'", "field 'name'", "required but empty"],
    "gpus-overflowing-float.yaml": ["entry 'test-gpu'", "field 'memory_gb'", "inf"],
    "gpus-python-name.yaml": ["line 1", "tag '!!python/name:os.system' is not allowed"],
    "gpus-python-object-apply.yaml": ["line 3", "tag '!!python/object/apply:os.system' is not allowed"],
    "gpus-python-object-new.yaml": ["line 1", "tag '!!python/object/new:subprocess.Popen' is not allowed"],
    "gpus-recursive-alias.yaml": ["line 1", "alias *a", "itself"],
    "gpus-syntax-error.yaml": ["not valid YAML", "line 4"],
    "gpus-top-level-list.yaml": ["must be a mapping", "got list"],
    "gpus-undefined-alias.yaml": ["line 1", "alias *nothing", "not defined"],
    "gpus-unknown-field.yaml": ["entry 'test-gpu'", "field 'colour'", "unknown field"],
    "gpus-unknown-top-level-key.yaml": ["field 'extras'", "unknown top-level key"],
    "gpus-usable-above-marketed.yaml": ["entry 'test-gpu'", "field 'usable_memory_bytes'", "more than the card's 24 GB"],
    "models-absurd-layers.yaml": ["entry 'test-model'", "field 'num_layers'", "<= 1000", "100000"],
    "models-absurd-vocab.yaml": ["entry 'test-model'", "field 'vocab_size'", "20000000"],
    "models-hidden-as-text.yaml": ["entry 'test-model'", "field 'hidden_size'", "whole number", "'4096'"],
    "models-id-with-line-break.yaml": ["field 'id'", "'test\\nmodel'"],
    "models-impossible-date.yaml": ["entry 'test-model'", "field 'release_date'", "'2023-02-30'"],
    "models-kv-heads-not-a-divisor.yaml": ["entry 'test-model'", "field 'num_kv_heads'", "divide", "got 7"],
    "models-name-too-long.yaml": ["entry 'test-model'", "field 'name'", "at most 120 characters"],
    "models-negative-layers.yaml": ["entry 'test-model'", "field 'num_layers'", "-32"],
    "models-params-absurd.yaml": ["entry 'test-model'", "field 'params'", "<= 1e+14"],
    "models-params-mismatch.yaml": ["entry 'test-model'", "field 'params'", "6,738,415,616", "6,738,415,617"],
    "models-python-tuple-tag.yaml": ["line 8", "tag '!!python/tuple' is not allowed"],
    "models-qkv-bias-not-bool.yaml": ["entry 'test-model'", "field 'qkv_bias'", "true or false"],
    "models-tied-not-bool.yaml": ["entry 'test-model'", "field 'tied_embeddings'", "true or false", "'nope'"],
    "models-unquoted-impossible-date.yaml": ["not valid YAML", "day is out of range"],
}


def test_the_corpus_has_at_least_20_documents_and_an_expectation_for_each():
    files = {p.name for p in CORPUS.iterdir()}
    assert len(files) >= 20
    assert files == set(EXPECTED)


def test_the_entries_are_valid_without_their_defect(tmp_path):
    store = UserCatalog(tmp_path / "user.yaml", shipped_ids={})
    assert store.import_yaml(GOOD_GPUS) == {"gpus": ["test-gpu"], "models": []}
    assert store.import_yaml(GOOD_MODELS) == {"gpus": [], "models": ["test-model"]}


@pytest.fixture
def tree(tmp_path):
    for name in ("gpus.yaml", "models.yaml", "references.yaml"):
        shutil.copy(SHIPPED / name, tmp_path / name)
    return tmp_path


def _check(message: str, file_label: str, words: list[str]) -> None:
    assert "\n" not in message and "\r" not in message, message
    assert len(message) < 1200, message
    assert file_label in message, message
    for word in words:
        assert word in message, (word, message)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_shipped_file_replaced_by_a_bad_document_is_refused(tree, name):
    target = "gpus.yaml" if name.startswith("gpus-") else "models.yaml"
    shutil.copy(CORPUS / name, tree / target)
    PWNED.unlink(missing_ok=True)
    with pytest.raises(CatalogError) as info:
        load_records(tree)
    _check(str(info.value), target, EXPECTED[name])
    assert not PWNED.exists()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_an_imported_bad_document_is_refused_and_nothing_is_written(tmp_path, name):
    path = tmp_path / "user.yaml"
    store = UserCatalog(path, shipped_ids={})
    store.import_yaml(GOOD_MODELS.replace("test-model", "kept-model"))
    before = path.read_bytes()
    PWNED.unlink(missing_ok=True)
    with pytest.raises(CatalogError) as info:
        store.import_yaml((CORPUS / name).read_bytes())
    _check(str(info.value), "imported YAML", EXPECTED[name])
    assert path.read_bytes() == before
    assert [m["id"] for m in store.load()["models"]] == ["kept-model"]
    assert not PWNED.exists()


def test_an_oversized_document_is_refused_before_parsing(tree, tmp_path):
    big = GOOD_GPUS + "# " + "x" * MAX_YAML_BYTES + "\n"
    (tree / "gpus.yaml").write_text(big)
    with pytest.raises(CatalogError, match=r"gpus\.yaml: is [\d,]+ bytes; a catalog file is at most"):
        load_records(tree)
    with pytest.raises(CatalogError, match=r"imported YAML: is [\d,]+ bytes"):
        UserCatalog(tmp_path / "user.yaml", shipped_ids={}).import_yaml(big)
    assert not (tmp_path / "user.yaml").exists()


def test_a_document_that_is_fine_but_uses_a_few_aliases_is_accepted(tmp_path):
    # anchors are plain YAML; only their number and expansion are bounded
    text = GOOD_GPUS.replace("price_source: launch list price", "price_source: &src launch list price")
    text = text.replace("cloud_source: example on-demand quote", "cloud_source: *src")
    store = UserCatalog(tmp_path / "user.yaml", shipped_ids={})
    store.import_yaml(text)
    gpu = store.load()["gpus"][0]
    assert gpu["cloud_source"] == gpu["price_source"] == "launch list price"
