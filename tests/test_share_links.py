"""Share links: every URL key the column table declares (engine/columns.py Sidebar, app/state.py FIELDS) as a new
user shares and edits it. A valid value reaches the sidebar and comes back in the URL; a bad one is named with what
is accepted, never raises, and leaves every other key of the link as the user wrote it. A URL number reads as the
command line reads the same column's flag (engine/columns.py read_number)."""

import argparse

import pytest

from engine import columns
from planner import cli
from tests.test_pages import open_app, shown

pytestmark = pytest.mark.usefixtures("clear_streamlit_caches")


def _params(at) -> dict:
    return {k: at.query_params.get(k) for k in at.query_params.keys()}


def _notes(at) -> list[str]:
    return [shown(w.value) for w in at.warning if "ignored" in w.value]


# a non-default value of every sidebar URL key (training and serving in two links: each task hides the other's fields)
TRAIN_LINK = {"model": "llama-2-7b", "method": "qlora", "train_precision": "fp16", "optimizer": "galore_adamw",
              "galore_rank": "64", "batch": "3", "seq": "1024", "grad_checkpointing": "0", "lora_rank": "32",
              "lora_targets": "q_proj,k_proj,o_proj", "lora_dropout_pct": "5", "base_precision": "nf4_nodq",
              "zero": "2", "offload": "optimizer", "gpus": "4", "headroom_pct": "20", "allow_long_context": "1",
              "gpu": "a100-80gb-sxm", "recipe": "unsloth", "loss": "chunked", "units": "GB",
              "infer_precisions": "fp32,bf16,fp16,int8,int4,nf4,fp8,nvfp4,mxfp4,q8_0,q6_k,q5_k_m,q4_k_m,q4_0,q3_k_m,"
                                  "q2_k,mxfp4_moe"}
INFER_LINK = {"model": "gemma-2-9b", "task": "infer", "infer_precision": "int4", "kv_precision": "fp8",
              "kv_policy": "full", "batch": "8", "seq": "4096", "gpu": "l4"}


@pytest.mark.parametrize("link", [TRAIN_LINK, INFER_LINK], ids=["train", "infer"])
def test_a_link_with_every_sidebar_key_comes_back_whole(link):
    """Every key reaches the settings and comes back in the URL the page writes; the shown widgets hold it. A list of
    every inference precision (95 characters) was cut at 80 characters before it was read, and refused."""
    from app.state import FIELDS, _as_param
    at = open_app("pages/overview.py", link)
    assert not _notes(at), _notes(at)
    settings = at.session_state["settings"]
    assert {k: _as_param(FIELDS[k], settings[k]) for k in link} == link
    assert _params(at) == link
    assert at.selectbox(key="w_model").value == link["model"] and at.number_input(key="w_batch").value == int(link["batch"])
    assert at.selectbox(key="w_gpu").value == link["gpu"]


# texts a URL number may carry, as a new user types them: other scripts' digits, decimals, exponents, blanks
NUMBER_TEXTS = ("３", "٣", "4.0", "1e1", "4.5", "abc", "", "nan", "inf", "-1", " 4 ", "2.0", "0")


@pytest.mark.parametrize("key", ["batch", "seq", "lora_rank", "freeze_layers", "galore_rank", "zero"])
def test_a_url_number_is_read_as_the_cli_reads_the_flag(key):
    """The URL's int() took '３' (a full-width digit) as 3, which the CLI refuses (ASCII digits only), and refused
    '4.0' and '1e1', which the CLI takes: each text is now accepted by both or by neither, with the same value, and
    a refusal names the text and the range in the CLI's words."""
    from app.state import FIELDS, _parse
    col = next(c for c in columns.SCENARIO for sb in c.sidebar if sb.key == key)
    field = FIELDS[key]
    assert (field.low, field.high) == (col.low, col.high) or field.options == tuple(range(col.low, col.high + 1))
    parse_flag = cli._column_parser(col)
    for text in NUMBER_TEXTS:
        try:
            want = parse_flag(text)
        except argparse.ArgumentTypeError:
            want = None
        if want is None:
            with pytest.raises(ValueError) as info:
                _parse(field, text)
            message = str(info.value)
            assert f"{key}={text!r} ignored; accepted: " + col.accepted_text() in message, message
            if not text.strip().isascii():
                assert message.endswith("(ASCII digits)"), message
        else:
            assert _parse(field, text) == want, (key, text)


def test_bad_link_values_are_named_and_the_rest_of_the_link_is_kept():
    """A 3,000-character model id was repeated whole in the sidebar's note; an unknown card in serve_cards was not
    named (the whole list was shown), nor the card it meant; a mistyped key (Batch) was dropped from the URL with no
    word. Each is now one note naming the text (clipped) and what is accepted, and the link's other keys stay."""
    keep = {"batch": "3", "gpu": "rtx-3090", "units": "GB"}
    at = open_app("pages/serving.py", {**keep, "model": "x" * 3000, "serve_cards": "rtx-4090,RTX-3060-12GB",
                                       "Seq": "4096", "serve_users": "３"})
    assert not at.exception
    notes = _notes(at)
    (model,) = [n for n in notes if n.startswith("model=")]
    assert len(model) < 300 and "(3,000 characters)" in model and "accepted: a catalog model id" in model
    (cards,) = [n for n in notes if n.startswith("serve_cards=")]
    assert "'RTX-3060-12GB' not in the catalog" in cards and "did you mean 'rtx-3060-12gb'" in cards
    (key,) = [n for n in notes if n.startswith("Seq=")]
    assert "'Seq' is not a dashboard setting" in key and "did you mean 'seq'" in key
    (users,) = [n for n in notes if n.startswith("serve_users=")]
    assert "accepted: a whole number from 1 to 4,096 (ASCII digits)" in users
    assert _params(at) == keep


def test_a_link_to_a_saved_user_gpu_opens_it(tmp_path, monkeypatch, cat):
    """A GPU of the user's catalog file is a catalog id for a link as for the CLI; in another case the link names
    the id it meant; before it is saved the link says what is accepted and keeps the rest."""
    from catalog.store import ENV_VAR, UserCatalog
    from tests.test_pages import _gpu_record
    path = tmp_path / "user_catalog.yaml"
    monkeypatch.setenv(ENV_VAR, str(path))
    at = open_app(query={"gpu": "my-card-42gb", "batch": "2"})
    (note,) = _notes(at)
    assert note.startswith("gpu='my-card-42gb' ignored; accepted: a catalog gpu id") and _params(at) == {"batch": "2"}
    UserCatalog(path, shipped_ids={"gpus": set(cat.gpus()["id"]), "models": set(cat.models()["id"])}).add_gpu(
        _gpu_record("my-card-42gb", "My card 42GB"))
    at = open_app(query={"gpu": "my-card-42gb", "batch": "2"})
    assert not _notes(at) and at.selectbox(key="w_gpu").value == "my-card-42gb"
    assert _params(at) == {"gpu": "my-card-42gb", "batch": "2"}
    at = open_app(query={"gpu": "My-Card-42GB", "batch": "2"})
    (note,) = _notes(at)
    assert "did you mean 'my-card-42gb'?" in note and _params(at) == {"batch": "2"}


def test_the_budget_pages_buy_vs_rent_fields_are_the_clis_and_survive_a_page_switch_and_a_link():
    """Utilisation, PUE, electricity and resale were typed again on the Budget page (electricity up to $10/kWh where
    --usd-per-kwh takes 100, resale up to 95% where --resale-fraction takes < 1) and were widget state only: a page
    switch put them back at their defaults, and a link did not carry them. Their bounds and defaults are now the
    column table's, and they live in the shared settings (URL keys utilization_pct, pue, usd_per_kwh, resale_pct)."""
    from app.state import FIELDS
    for key, name in (("pue", "pue"), ("usd_per_kwh", "usd_per_kwh")):
        col, parse_flag = columns.SCENARIO_BY_NAME[name], cli._column_parser(columns.SCENARIO_BY_NAME[name])
        assert (FIELDS[key].low, FIELDS[key].high, FIELDS[key].default) == (col.low, col.high, col.default)
        assert parse_flag(str(col.high)) == col.high
    assert FIELDS["resale_pct"].high == 99 and FIELDS["utilization_pct"].default == 100
    at = open_app("pages/budget.py")
    at.number_input(key="bp_kwh").set_value(25.0).run()  # an island's price: the CLI takes it
    at.number_input(key="bp_pue").set_value(1.5).run()
    at.slider(key="bp_util").set_value(50).run()
    at.slider(key="bp_resale").set_value(97).run()
    assert not at.exception
    link = _params(at)
    assert link == {"usd_per_kwh": "25", "pue": "1.5", "utilization_pct": "50", "resale_pct": "97"}

    def shown_values(app):
        return (app.number_input(key="bp_kwh").value, app.number_input(key="bp_pue").value,
                app.slider(key="bp_util").value, app.slider(key="bp_resale").value)
    at.switch_page("pages/overview.py").run()
    at.switch_page("pages/budget.py").run()
    assert shown_values(at) == (25.0, 1.5, 50, 97)
    assert shown_values(open_app("pages/budget.py", link)) == (25.0, 1.5, 50, 97)
    bad = open_app("pages/budget.py", {"usd_per_kwh": "101", "pue": "0.5", "condition": "used"})
    notes = _notes(bad)
    assert any(n.startswith("usd_per_kwh='101' ignored; accepted: a price in $/kWh >= 0 and <= 100") for n in notes)
    assert any(n.startswith("pue='0.5' ignored; accepted: a power usage effectiveness >= 1 and <= 5") for n in notes)
    assert _params(bad) == {"condition": "used"} and shown_values(bad) == (0.13, 1.0, 100, 0)


def test_a_link_never_drops_a_count_or_weights_the_page_does_not_list_unsaid():
    """serve_gpus took any whole number from 1 to 8 and infer_max_gpus 1 to 64, but their pages list 1, 2, 4, 8
    (... 64): a link with serve_gpus=3 opened the page at 1 GPU and dropped the key with no word (infer_max_gpus=3
    opened at 8). Weights another engine runs (llama.cpp with fp8) fell back to the default as silently. Each is
    now named with what is accepted, and the link's other keys stay."""
    at = open_app("pages/serving.py", {"serve_gpus": "3", "serve_users": "8"})
    assert any(n == "serve_gpus='3' ignored; accepted: 1, 2, 4, 8" for n in _notes(at)), _notes(at)
    assert _params(at) == {"serve_users": "8"} and at.selectbox(key="srv_gpus").value == 1
    at = open_app("pages/serving.py", {"serve_gpus": "4"})
    assert not _notes(at) and at.selectbox(key="srv_gpus").value == 4 and _params(at) == {"serve_gpus": "4"}
    at = open_app("pages/inference.py", {"infer_max_gpus": "3", "task": "infer"})
    assert any(n.startswith("infer_max_gpus='3' ignored; accepted: 1, 2, 4, 8, 16") for n in _notes(at)), _notes(at)
    assert _params(at) == {"task": "infer"} and at.selectbox(key="inf_max_gpus").value == 8
    at = open_app("pages/serving.py", {"serve_engine": "llama.cpp", "serve_weights": "fp8", "serve_users": "8"})
    (note,) = _notes(at)
    assert note.startswith("serve_weights='fp8' ignored: the llama.cpp engine does not run it; accepted with "
                           "serve_engine=llama.cpp: auto, q8_0"), note
    assert _params(at) == {"serve_engine": "llama.cpp", "serve_users": "8"}
    at = open_app("pages/serving.py", {"serve_engine": "llama.cpp", "serve_weights": "q5_k_m"})
    assert not _notes(at) and at.selectbox(key="srv_precision_gguf").value == "q5_k_m"


def test_cost_per_fits_training_tokens_stop_at_the_clis_limit():
    """The field (billions) had no upper bound: 1e12 billions replaced the page with the engine's refusal in tokens
    ('tokens 1e+21 is not accepted'). Its bound and default are now --tokens' (engine/columns.py), in billions."""
    tokens = columns.SCENARIO_BY_NAME["tokens"]
    at = open_app("pages/cost_per_fit.py")
    field = at.number_input(key="cf_tokens")
    assert (field.max, field.value) == (tokens.high / 1e9, tokens.default / 1e9)
    field.set_value(field.max).run()
    assert not at.exception and not at.error


def test_the_serving_search_refuses_a_context_beyond_the_models_as_serve_does():
    """`serve --max-model-len 16384` refuses Llama 3 8B (context 8,192) unless --allow-long-context; the Serving page's
    cheapest search at a 16,384-token context listed configurations, their commands with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1,
    whatever the sidebar's "Allow sequences beyond a model's context" said. Both now ask planner/serving.py
    check_model_len."""
    import pandas as pd
    from planner.serving import check_model_len
    models = pd.DataFrame([{"id": "m", "max_context": 8192}])
    check_model_len("m", 8192, models)
    check_model_len("m", 16384, models, allow_long_context=True)
    with pytest.raises(ValueError, match="max-model-len 16,384 is longer than m's context of 8,192 tokens; accepted: 1 "
                                         "to 8,192"):
        check_model_len("m", 16384, models)
    at = open_app("pages/serving.py", {"model": "llama-3-8b", "serve_context": "16384"})
    assert not at.exception
    (error,) = [shown(e.value) for e in at.error]
    assert error.startswith("Context per user 16,384 is longer than llama-3-8b's context of 8,192 tokens") and \
        "Allow sequences beyond a model's context" in error
    assert not any("VLLM_ALLOW_LONG_MAX_MODEL_LEN" in str(v) for d in at.dataframe for v in d.value.get("Command", []))
    # the page's own default (8,192) on a shorter-context model is the model's context, said so, not an error
    at = open_app("pages/serving.py", {"model": "llama-2-7b"})
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("4,096 tokens, the model's whole context" in shown(c.value) for c in at.caption)
    assert len(at.dataframe[-1].value) > 0
    at = open_app("pages/serving.py", {"model": "llama-3-8b", "serve_context": "16384", "allow_long_context": "1"})
    assert not at.error
    assert all(str(v).startswith("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 ") for v in at.dataframe[-1].value["Command"])


def test_the_readme_names_the_dashboards_default_where_it_is_not_the_flags():
    """The README's column table put a URL key beside the flag's default: method full, ZeRO 0, checkpointing off,
    where a link without the key opens LoRA, ZeRO 3, checkpointing on. The key's cell now says the dashboard's."""
    from planner import columns_doc
    rows = {line.split(" | ")[0][3:-1]: line.split(" | ") for line in columns_doc.scenario_table().splitlines()[2:]}
    assert rows["method"][2] == "`method` (dashboard: lora)" and rows["method"][3] == "full"
    assert rows["zero"][2] == "`zero` (dashboard: 3)" and rows["grad_checkpointing"][2].endswith("(dashboard: on)")
    assert rows["headroom"][2] == "`headroom_pct`" and rows["lora_targets"][2] == "`lora_targets`"  # the same default
    assert rows["utilization"][2] == "`utilization_pct`" and rows["task"][2] == "`task`"


def test_a_removed_session_gpu_leaves_the_link():
    """A card added on the Catalog page, chosen on the Serving page and removed again stayed in the URL's
    serve_cards on every other page: a link copied there named a card the one who opened it did not have."""
    from tests.test_pages import _fill_gpu
    at = open_app("pages/catalog_browser.py")
    _fill_gpu(at, "my-card-42gb", "My card 42GB")
    at.switch_page("pages/serving.py").run()
    at.multiselect(key="srv_cards").set_value(["my-card-42gb", "rtx-4090"]).run()
    assert _params(at)["serve_cards"] == "my-card-42gb,rtx-4090"
    at.switch_page("pages/catalog_browser.py").run()
    at.button(key="remove_gpu_my-card-42gb").click().run()
    at.switch_page("pages/overview.py").run()
    assert not at.exception and _params(at).get("serve_cards") == "rtx-4090"


def test_page_level_controls_survive_a_page_switch_and_a_link():
    """The Feasibility, Evidence and Catalog pages' own controls (families, largest count, GPU filters; kind, metric,
    'only outside', searches; the catalog's search and open tab) were widget state only: a page switch put them back
    at their defaults and a link did not carry them. They are now declared once (app/state.py PAGE_FIELDS) and kept
    in the settings and the URL like the sidebar's."""
    at = open_app("pages/feasibility.py")
    at.multiselect(key="fm_family").set_value(["llama-2", "gemma"]).run()
    at.selectbox(key="fm_max_gpus").set_value(16).run()
    at.multiselect(key="fm_vendor").set_value(["nvidia"]).run()
    at.slider(key="fm_memory").set_value((16.0, 96.0)).run()
    at.session_state["fm_details_open"] = True  # the lazy details section, opened
    at.run()
    at.switch_page("pages/inference.py").run()
    at.session_state["inf_article_open"] = True
    at.run()
    at.switch_page("pages/evidence.py").run()
    at.checkbox(key="ev_outside").check().run()
    at.text_input(key="ev_search").input("llama").run()
    at.multiselect(key="sv_engine").set_value(["vllm", "sglang"]).run()
    at.switch_page("pages/catalog_browser.py").run()
    at.text_input(key="cat_search").input("h100").run()
    at.session_state["catalog_tab"] = "Models"
    at.run()
    assert not at.exception
    link = _params(at)
    assert link == {"feas_families": "llama-2,gemma", "feas_max_gpus": "16", "feas_vendors": "nvidia",
                    "feas_memory_gb": "16,96", "feas_details": "1", "infer_article": "1", "ev_outside": "1", "ev_search": "llama", "sv_engines": "vllm,sglang",
                    "catalog_search": "h100", "catalog_tab": "models"}

    def feasibility(app):
        app.switch_page("pages/feasibility.py").run()
        return (app.multiselect(key="fm_family").value, app.selectbox(key="fm_max_gpus").value,
                app.multiselect(key="fm_vendor").value, app.multiselect(key="fm_segment").value,
                app.slider(key="fm_memory").value, len(app.dataframe))  # (2 tables: the details open)

    def inference(app):
        app.switch_page("pages/inference.py").run()
        return any("article" in str(d.value.columns.tolist()) for d in app.dataframe)

    def evidence(app):
        app.switch_page("pages/evidence.py").run()
        return (app.checkbox(key="ev_outside").value, app.text_input(key="ev_search").value,
                app.multiselect(key="sv_engine").value, len(app.multiselect(key="ev_kind").value))

    def catalog(app):
        app.switch_page("pages/catalog_browser.py").run()
        return app.text_input(key="cat_search").value, app.session_state["catalog_tab"]

    want = ((["llama-2", "gemma"], 16, ["nvidia"], ["apple", "consumer", "datacenter", "workstation"], (16.0, 96.0), 2),
            True, (True, "llama", ["vllm", "sglang"], 3), ("h100", "Models"))
    for app in (at, open_app(query=link)):  # switched away and back; a new session from the link
        assert (feasibility(app), inference(app), evidence(app), catalog(app)) == want
        assert not app.exception and _params(app) == link
    # what the page shows follows: the matrix's rows are the two families' models only
    from app.data import display_names, merged_frames
    models = merged_frames()[0]
    names = display_names(models)
    at.switch_page("pages/feasibility.py").run()
    assert list(at.dataframe[0].value["Model"]) == [names[i] for i in models[models["family"].isin(["llama-2", "gemma"])]["id"]]


def test_the_budget_and_cost_per_fit_pages_controls_survive_a_page_switch_and_a_link():
    """The Budget page's workloads, largest count, 'a bit more', one purchase and GPU filters, and Cost per fit's
    workloads, largest count, families and GPU filters were widget state only: lost on a page switch, not in a link."""
    at = open_app("pages/budget.py")
    at.multiselect(key="bp_plans").set_value(["LoRA", "Serve INT8"]).run()
    at.selectbox(key="bp_max_gpus").set_value(8).run()
    at.slider(key="bp_stretch").set_value(100).run()
    at.checkbox(key="bp_one").uncheck().run()
    at.multiselect(key="bp_vendor").set_value(["nvidia"]).run()
    at.switch_page("pages/cost_per_fit.py").run()
    at.multiselect(key="cf_plans").set_value(["QLoRA"]).run()
    at.selectbox(key="cf_max_gpus").set_value(4).run()
    at.multiselect(key="cf_family").set_value(["llama-3"]).run()
    assert not at.exception
    link = _params(at)
    assert link == {"budget_plans": "LoRA,Serve INT8", "budget_max_gpus": "8", "budget_stretch": "100",
                    "budget_one": "0", "budget_vendors": "nvidia", "cpf_plans": "QLoRA", "cpf_max_gpus": "4",
                    "cpf_families": "llama-3"}

    def pages(app):
        app.switch_page("pages/budget.py").run()
        budget = (app.multiselect(key="bp_plans").value, app.selectbox(key="bp_max_gpus").value,
                  app.slider(key="bp_stretch").value, app.checkbox(key="bp_one").value, app.multiselect(key="bp_vendor").value)
        app.switch_page("pages/cost_per_fit.py").run()
        return budget, (app.multiselect(key="cf_plans").value, app.selectbox(key="cf_max_gpus").value,
                        app.multiselect(key="cf_family").value)

    want = ((["LoRA", "Serve INT8"], 8, 100, False, ["nvidia"]), (["QLoRA"], 4, ["llama-3"]))
    for app in (at, open_app(query=link)):  # switched away and back; a new session from the link
        assert pages(app) == want
        assert not app.exception and _params(app) == link


def test_bad_page_level_values_in_a_link_are_named_and_the_rest_is_kept():
    """A family the catalog lacks, a count the page does not list, a range backwards or a tab that does not exist:
    each named with what is accepted, the control's valid values and the link's other keys kept."""
    at = open_app("pages/feasibility.py", {"feas_families": "llama-2,lama-3", "feas_max_gpus": "3",
                                           "feas_memory_gb": "96,16", "ev_search": "llama", "batch": "3"})
    assert not at.exception
    notes = [shown(w.value) for w in at.warning]
    assert any(n.startswith("feas_families='llama-2,lama-3': 'lama-3' left out, not among this page's choices; "
                            "accepted: a comma list of ") and "did you mean 'llama-3'" in n for n in notes), notes
    assert any(n.startswith("feas_max_gpus='3' ignored; accepted: 1, 2, 4, 8, 16, 32, 64") for n in notes), notes
    assert any(n.startswith("feas_memory_gb='96,16' ignored; accepted: two numbers low,high") for n in notes), notes
    assert at.multiselect(key="fm_family").value == ["llama-2"] and at.selectbox(key="fm_max_gpus").value == 8
    assert _params(at) == {"feas_families": "llama-2", "ev_search": "llama", "batch": "3"}
    # every vendor again, one taken out and put back last: the default (no list of them all in the link)
    vendors = at.multiselect(key="fm_vendor")
    vendors.set_value(list(vendors.options[1:]) + list(vendors.options[:1])).run()
    assert "feas_vendors" not in _params(at)
    at = open_app("pages/catalog_browser.py", {"catalog_tab": "model", "catalog_search": "x" * 300, "units": "GB"})
    notes = _notes(at)
    assert any(n.startswith("catalog_tab='model' ignored; accepted: gpus, models, references")
               and n.endswith("did you mean 'models' or 'add_model'?") for n in notes), notes
    assert any(n.startswith("catalog_search='xxx") and "(300 characters) ignored; accepted: one line of text, at most "
               "200 characters" in n for n in notes), notes
    assert at.session_state["catalog_tab"] == "GPUs" and _params(at) == {"units": "GB"}


def test_every_page_level_control_is_drawn_as_declared():
    """Each page control of app/state.py FIELDS (those with a widget key) is on its page with the declared default,
    and a number's bounds are the declared ones (the Serving page typed 1-4096, 256-131072, ... a second time)."""
    from app.state import FIELDS
    declared = {f.widget: f for f in FIELDS.values() if f.widget}
    assert len(declared) == len([f for f in FIELDS.values() if f.widget])  # one widget key, one field
    at = open_app(query={"task": "infer"})
    found = {}
    for page in ("pages/serving.py", "pages/inference.py", "pages/feasibility.py", "pages/evidence.py",
                 "pages/catalog_browser.py", "pages/budget.py", "pages/cost_per_fit.py"):
        at.switch_page(page).run()
        assert not at.exception and _params(at) == {"task": "infer"}, page  # nothing written but the link's
        for kind in ("number_input", "selectbox", "multiselect", "checkbox", "slider", "text_input"):
            for widget in at.get(kind):
                if widget.key in declared:
                    options = list(getattr(widget, "options", []))
                    found[widget.key] = (getattr(widget, "min", None), getattr(widget, "max", None), widget.value,
                                         options)
    # (the tabs and the lazy sections: test_page_level_controls_survive_...)
    assert set(declared) - set(found) == {"catalog_tab", "fm_details_open", "inf_article_open"}
    for key, (low, high, value, options) in found.items():
        f = declared[key]
        if f.kind in ("int", "number"):
            assert (low, high, value) == (f.low, f.high, f.default), key
        elif f.kind in ("choice", "bool", "text"):
            assert value == f.default, key
        elif f.kind == "range":
            assert value == (low, high), key
        elif f.default is None:  # every choice the page lists
            assert len(value) == len(options) > 0, key
        else:
            assert tuple(value) == f.default, key


def test_a_pages_csv_records_its_own_filters_not_another_pages(downloads):
    """The Feasibility matrix's CSV recorded its largest count and families but not its GPU filters (its columns);
    the settings dump would have carried every other page's filters (Evidence's search) into every CSV."""
    from tests.test_pages import parse_csv
    at = open_app("pages/feasibility.py", {"feas_vendors": "nvidia", "feas_memory_gb": "16,96", "ev_search": "llama"})
    settings, _ = parse_csv(downloads(at.download_button[0]))
    assert {k: settings[k] for k in ("feas_vendors", "feas_segments", "feas_memory_gb", "feas_max_gpus")} == {
        "feas_vendors": "nvidia", "feas_segments": "all", "feas_memory_gb": "16,96", "feas_max_gpus": "8"}
    assert "ev_search" not in settings and "catalog_tab" not in settings
