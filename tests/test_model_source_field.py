"""Issue 25 item 5: the sidebar's "model from Hugging Face or a file" field (app/model_source.py).

No network: a Hub cache is built on disk (tests/test_checkpoints.py fake_cache: refs/main and a
snapshot with config.json and a safetensors header) and read with HF_HUB_OFFLINE=1; the GGUF and
safetensors files are the tiny ones of tests/test_checkpoints.py (headers, sparse data)."""

import pytest
from streamlit.testing.v1 import AppTest

from catalog.store import ENV_VAR, UserCatalog
from tests.conftest import ROOT
from tests.test_checkpoints import COMMIT, fake_cache, hf_tensors, llama_params, write_config, write_gguf, write_safetensors
from tests.test_pages import shown, table

DASHBOARD = str(ROOT / "dashboard.py")
HUB_ID = "tiny-org/Tiny-Llama"

pytestmark = pytest.mark.usefixtures("clear_streamlit_caches")


@pytest.fixture
def offline(tmp_path, monkeypatch):
    import streamlit.testing.v1.app_test as app_test_module
    from streamlit.runtime.scriptrunner.script_cache import ScriptCache

    cache = ScriptCache()  # each script compiled once per test, as a server does (not once per run)
    monkeypatch.setattr(app_test_module, "ScriptCache", lambda: cache)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "user_catalog.yaml"))
    fake_cache(tmp_path / "hf", HUB_ID)
    return tmp_path


def _open(page: str, query: dict | None = None) -> AppTest:
    at = AppTest.from_file(DASHBOARD, default_timeout=60)
    if query:
        at.query_params.update(query)
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _enter(at: AppTest, text: str) -> AppTest:
    at.text_input(key="w_model_source").input(text).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_hub_id_a_gguf_and_a_safetensors_folder_join_the_models_with_exact_params(offline):
    gguf = write_gguf(offline / "tiny-Q8_0.gguf")
    folder = offline / "st-model"
    folder.mkdir()
    write_config(folder, _name_or_path="tiny/st-llama")
    write_safetensors(folder / "model.safetensors", hf_tensors())
    at = _open("pages/catalog_browser.py")
    for text, ident, source in ((HUB_ID, "tiny-org-tiny-llama", f"Hugging Face Hub {HUB_ID}@{COMMIT}"),
                                (str(gguf), "tiny-llama", f"GGUF file {gguf}"),
                                (str(folder), "tiny-st-llama", f"safetensors {folder}")):
        _enter(at, text)
        assert not at.error, [e.value for e in at.error]
        row = table(at, 1).set_index("id").loc[ident]  # the Catalog page's Models table
        assert row["Parameters (exact)"] == llama_params()
        assert row["Source"].startswith(source) and "parameters from the checkpoint header" in row["Source"]
        assert row["Origin"].startswith("the sidebar's")
        assert at.selectbox(key="w_model").value == ident  # selected for every page
        said = shown(at.sidebar.caption[0].value)
        assert f"{llama_params():,}** parameters (exact), from the checkpoint header" in said
        # the URL keeps the text only, never the resolved row
        assert dict(at.query_params)["model_source"] in (text, [text])
        assert not any(str(llama_params()) in str(v) or COMMIT in str(v) for v in dict(at.query_params).values())
        if ident == "tiny-org-tiny-llama":  # saved with its source and revision: there at the next start
            at.button(key="model_source_save").click().run()
            assert not at.exception and not at.error
            saved = UserCatalog(offline / "user_catalog.yaml", shipped_ids={}).load()["models"]
            assert [(m["id"], m["revision"], m["params"]) for m in saved] == [(ident, COMMIT, llama_params())]
            assert saved[0]["source"].startswith(source)
            assert table(at, 1).set_index("id").loc[ident, "Origin"] == "saved in your catalog file"
    # the next start loads it like every saved entry (catalog_frames: the dashboard's and the CLI's one path)
    from catalog.store import catalog_frames
    models = catalog_frames(kinds=("models",))["models"].set_index("id")
    assert models.loc["tiny-org-tiny-llama", "params"] == llama_params()
    assert models.loc["tiny-org-tiny-llama", "origin"] == "user"
    # the same resolver without a page: a config.json alone is the config arithmetic, said so; an id
    # the shipped catalog uses gets the format as a suffix (the shipped model is never replaced)
    from app.model_source import resolve_now
    config_only = resolve_now(str(folder / "config.json"), frozenset())
    assert config_only["row"]["params"] == llama_params() and config_only["info"]["weights_source"] == "config"
    assert "parameters from the config arithmetic" in config_only["row"]["source"]
    assert resolve_now(str(gguf), frozenset({"tiny-llama"}))["row"]["id"] == "tiny-llama-gguf"


def test_a_bad_source_is_one_message_naming_it_and_keeps_every_other_input(offline):
    (offline / "notes.txt").write_text("not a model")
    hostile = offline / "hostile.safetensors"
    hostile.write_bytes((10**15).to_bytes(8, "little") + b"{}")  # a header length far past the file
    at = _open("pages/catalog_browser.py", {"model_source": "other/missing", "batch": "3", "gpu": "h100-sxm-80gb"})
    for bad, said in (("other/missing", "model other/missing: has no config.json"),  # from the URL
                      (str(hostile), f"{hostile}: is not a safetensors file: its first 8 bytes give a header of")):
        if bad != "other/missing":
            _enter(at, bad)
        assert [shown(e.value).count(said) for e in at.error] == [1], [e.value for e in at.error]
        assert at.text_input(key="w_model_source").value == bad  # the text stays in the field
        assert at.number_input(key="w_batch").value == 3 and at.selectbox(key="w_gpu").value == "h100-sxm-80gb"
        assert at.selectbox(key="w_model").value == "llama-3-8b"
    # the same messages without a page: a file that is not a model; a text that is neither a path nor
    # a Hub id (both accepted forms named); a gated repo is tests/test_checkpoints.py's (the resolver's text)
    from app.model_source import resolve_now
    said = resolve_now(str(offline / "notes.txt"), frozenset())["error"]
    assert said.startswith(f"{offline / 'notes.txt'}: is not a model file; accepted: a GGUF")
    said = resolve_now("no-such-thing", frozenset())["error"]
    assert said.startswith("no-such-thing: does not exist; accepted: a GGUF") and "ORG/NAME" in said


def test_the_serving_pages_commands_name_the_sidebars_gguf_file(offline):
    """`serve --model-file F.gguf` names F in its command line; the Serving page's commands for the same model from the
    sidebar's field named a catalog download (tiny-llama-Q8_0.gguf) the user does not have."""
    (offline / "my dir").mkdir()
    gguf = write_gguf(offline / "my dir" / "tiny-Q8_0.gguf")  # (a space: the path is quoted for the shell)
    at = _open("pages/serving.py", {"serve_engine": "llama.cpp", "serve_context": "256"})
    _enter(at, str(gguf))
    assert not at.error, [e.value for e in at.error]
    commands = list(at.dataframe[-1].value["Command"])
    assert commands and all(f"-m '{gguf}'" in cmd for cmd in commands), commands[:2]
    assert not any("tiny-llama-Q8_0.gguf" in cmd for cmd in commands)
