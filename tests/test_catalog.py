"""The catalog: shipped YAML is complete and valid; malformed YAML is refused with file, entry and field."""

import shutil
from pathlib import Path

import pytest
import yaml

from catalog import Catalog, CatalogError, load_records

SHIPPED = Path(__file__).resolve().parent.parent / "catalog"

# Cards the source articles name, and the rest of the reference table.
REQUIRED_GPUS = {
    "rtx-3060-12gb", "rtx-3090", "rtx-4090", "rtx-5090", "rtx-a6000", "rtx-6000-ada", "l4", "l40s", "a10",
    "v100-32gb", "a100-40gb-sxm", "a100-80gb-sxm", "a100-80gb-pcie", "h100-pcie-80gb", "h100-sxm-80gb",
    "h100-nvl-94gb", "h200-sxm-141gb", "b200-180gb", "gh200-96gb", "mi250x", "mi300x", "mi325x", "gaudi3",
}


def test_catalog_has_at_least_24_gpus_and_14_models(gpus, models):
    assert len(gpus) >= 24
    assert len(models) >= 14
    assert REQUIRED_GPUS <= set(gpus["id"])
    assert any(gpus["vendor"] == "apple") and any(gpus["vendor"] == "amd")


# Issue 25 item 6: the models people run in 2026, each with its config and exact count (the
# loader checks the count), and the vision-language ones with their vision tower's parameters.
ISSUE_25_MODELS = {
    "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-14b", "qwen3-32b", "gemma-3-1b", "gemma-3-4b", "gemma-3-12b",
    "phi-4", "phi-4-mini", "mistral-small-3.1-24b", "mistral-small-3.2-24b", "deepseek-r1-distill-qwen-7b",
    "deepseek-r1-distill-qwen-14b", "deepseek-r1-distill-qwen-32b", "deepseek-r1-distill-llama-8b",
    "deepseek-r1-distill-llama-70b", "llama-3.2-11b-vision", "qwen2.5-vl-7b",
}
# checkpoints with a vision encoder: params is the language model, vision_params the rest
VISION_LANGUAGE = {"gemma-3-4b", "gemma-3-12b", "gemma-3-27b", "mistral-small-3.1-24b", "mistral-small-3.2-24b",
                   "qwen2.5-vl-7b", "llama-3.2-11b-vision", "llama-4-scout", "llama-4-maverick"}


@pytest.fixture(scope="module")
def model_entries():
    # the YAML itself (cheap): what is written, before any loader default
    return {m["id"]: m for m in yaml.load((SHIPPED / "models.yaml").read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["models"]}


def test_catalog_holds_the_2026_models(model_entries, models):
    assert len(model_entries) >= 50
    assert ISSUE_25_MODELS <= set(model_entries), sorted(ISSUE_25_MODELS - set(model_entries))
    assert set(models["id"]) == set(model_entries)  # every one validated (its count reproduced) and loaded


def test_every_vision_language_model_has_its_vision_params_with_a_source(model_entries):
    for ident in VISION_LANGUAGE:
        entry = model_entries[ident]
        assert isinstance(entry.get("vision_params"), int) and entry["vision_params"] > 0, ident
        # the checkpoint total it was taken from is named next to it
        assert "vision_params: the checkpoint's" in entry["notes"], ident
    for ident, entry in model_entries.items():
        if entry.get("vision_params"):
            assert ident in VISION_LANGUAGE, ident
        if "(language model" in entry["name"]:
            assert entry.get("vision_params", 0) > 0, ident


def test_every_shipped_model_has_its_release_date(models):
    # the schema lets a config.json model go without one; the shipped catalog always states it
    assert models["release_date"].notna().all()
    assert models["release_date"].astype(str).str.match(r"^\d{4}-\d\d-\d\d$").all()


def test_every_price_has_a_source_and_date(gpus):
    for col in ("price_source", "price_date", "cloud_source", "cloud_date", "usable_memory_source"):
        assert gpus[col].str.len().min() > 0, col
    assert gpus["price_date"].str.match(r"^\d{4}-\d\d$").all()


def test_usable_memory_is_at_most_the_marketed_size(gpus):
    # the vendor's "80 GB" cards expose about 80 GiB; never far more than the marketed figure
    assert (gpus["usable_memory_bytes"] <= gpus["memory_gb"] * 2**30 * 1.01).all()
    assert (gpus["usable_memory_bytes"] > 0).all()


def test_h100_160g_is_two_cards_not_one(cat, gpus):
    aliases = cat.aliases().set_index("alias")
    assert aliases.loc["H100-160G", "count"] == 2
    assert aliases.loc["H100-160G", "gpu"] in set(gpus["id"])
    assert not (gpus["memory_gb"] == 160).any()


def test_references_point_at_catalog_models(cat, models):
    refs = cat.references()
    assert len(refs) >= 20
    assert set(r["model"] for r in refs["scenario"]) <= set(models["id"])
    assert set(refs["kind"]) <= {"measured", "estimate", "claim"}


def test_queries_are_parameterized(cat):
    row = cat.query("gpu_by_id", ["h100-sxm-80gb"])
    assert list(row["id"]) == ["h100-sxm-80gb"]
    assert cat.query("gpu_by_id", ["'; DROP TABLE gpus; --"]).empty
    assert len(cat.gpus()) >= 24  # still there


@pytest.fixture
def tree(tmp_path):
    for name in ("gpus.yaml", "models.yaml", "references.yaml"):
        shutil.copy(SHIPPED / name, tmp_path / name)
    return tmp_path


def _replace(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, count))


CASES = [
    # (file, old text, new text, words the message must contain)
    ("gpus.yaml", "memory_gb: 24\n", "memory_gb: -24\n", ["gpus.yaml", "entry 'rtx-3090'", "'memory_gb'", "-24"]),
    ("gpus.yaml", "memory_gb: 24\n", "memory_gb: lots\n", ["gpus.yaml", "'memory_gb'", "number"]),
    ("gpus.yaml", "  - id: rtx-4090\n", "  - id: rtx-4090\n    colour: red\n", ["entry 'rtx-4090'", "'colour'", "unknown field"]),
    ("gpus.yaml", "  - id: rtx-4090\n", "  - id: rtx-3090\n", ["entry 'rtx-3090'", "duplicate"]),
    ("gpus.yaml", "vendor: nvidia\n", "vendor: nvida\n", ["'vendor'", "nvida", "nvidia"]),
    ("gpus.yaml", "unified_memory: false\n", "unified_memory: 'no'\n", ["'unified_memory'", "true or false"]),
    ("models.yaml", "    hidden_size: 4096\n", "    hidden_size: 4097\n", ["models.yaml", "entry 'llama-1-7b'", "'params'"]),
    ("models.yaml", "    num_layers: 32\n", "", ["entry 'llama-1-7b'", "'num_layers'", "missing"]),
    ("models.yaml", "    tied_embeddings: false\n", "    tied_embeddings: nope\n", ["'tied_embeddings'"]),
    ("models.yaml", "    num_kv_heads: 8\n", "    num_kv_heads: 7\n", ["'num_kv_heads'", "divide"]),
    ("models.yaml", "models:\n", "models: !!python/object/apply:os.system ['echo hi']\n", ["models.yaml", "YAML"]),
    ("models.yaml", "models:\n", "modles:\n", ["models.yaml", "'modles'"]),
    ("references.yaml", "    scenario:\n      model: ", "    scenario:\n      model: llama-99b\n      x_model: ", ["references.yaml", "scenario"]),
]


@pytest.mark.parametrize("file, old, new, words", CASES)
def test_malformed_yaml_is_refused_naming_file_entry_and_field(tree, file, old, new, words):
    _replace(tree / file, old, new)
    with pytest.raises(CatalogError) as info:
        load_records(tree)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)


def test_yaml_tags_cannot_construct_objects(tree):
    (tree / "gpus.yaml").write_text("gpus: !!python/object/new:os.system [echo pwned]\n")
    with pytest.raises(CatalogError, match="gpus.yaml"):
        load_records(tree)


def test_unparseable_yaml_names_line(tree):
    (tree / "models.yaml").write_text("models:\n  - id: x\n   bad indent: [\n")
    with pytest.raises(CatalogError, match=r"models\.yaml: is not valid YAML at line \d+"):
        load_records(tree)


def test_database_is_rebuilt_when_yaml_changes(tree, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_PLANNER_BUILD_DIR", str(tmp_path / "build"))
    first = Catalog(tree)
    n = len(first.gpus())
    first.close()
    text = (tree / "gpus.yaml").read_text()
    start = text.index("  - id: l4\n")
    end = text.index("  - id:", start + 5)
    (tree / "gpus.yaml").write_text(text[:start] + text[end:])
    second = Catalog(tree)
    assert len(second.gpus()) == n - 1
    assert second.path != first.path
    second.close()
