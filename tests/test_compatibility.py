"""Compatibility rules (issue 14): data in catalog/gpus.yaml, applied by engine/compat.py;
an incompatible combination is never a fit, on the CLI or in the planner's configurations."""

import json

import pandas as pd
import pytest
import yaml

from catalog import default_catalog
from engine.compat import check
from engine.scenarios import DEFAULTS
from planner import planning
from tests.conftest import ROOT
from tests.clirun import run_cli


def run(*args):
    return run_cli(*args)  # `python -m engine *args`, in this process (tests/clirun.py)


GPUS = pd.DataFrame({"id": ["old", "new", "mac"], "vendor": ["nvidia", "nvidia", "apple"],
                     "architecture": ["volta", "ampere", "apple-m3"]})
RULES = pd.DataFrame([
    {"id": "bf16", "columns": "precision", "values": "bf16", "multi_gpu": False, "architectures": "volta",
     "vendors": "", "severity": "incompatible", "note": "no bf16"},
    {"id": "multi", "columns": "", "values": "", "multi_gpu": True, "architectures": "", "vendors": "apple",
     "severity": "incompatible", "note": "one device"},
    {"id": "hint", "columns": "task", "values": "train", "multi_gpu": False, "architectures": "volta",
     "vendors": "", "severity": "note", "note": "slower attention"},
])


def test_check_applies_each_rule_to_its_rows_only():
    frame = pd.DataFrame({"gpu": ["old", "old", "new", "mac", "mac", "nowhere"],
                          "precision": ["bf16", "fp16", "bf16", "bf16", "bf16", "bf16"],
                          "task": ["train", "infer", "train", "infer", "infer", "train"],
                          "gpus": [1, 1, 1, 1, 2, 1]})
    out = check(frame, GPUS, RULES)
    assert out["compatible"].tolist() == [False, True, True, True, False, True]
    assert out["compatibility_notes"].iloc[0] == ["incompatible: no bf16", "note: slower attention"]
    assert out["compatibility_notes"].iloc[1] == []
    assert out["compatibility_notes"].iloc[4] == ["incompatible: one device"]


def test_every_shipped_rule_has_a_source_and_a_date_and_every_gpu_an_architecture():
    doc = yaml.safe_load((ROOT / "catalog" / "gpus.yaml").read_text())
    assert len(doc["compatibility"]) >= 4
    for rule in doc["compatibility"]:
        assert rule["source"].strip() and rule["date"], rule["id"]
    for g in doc["gpus"]:
        assert g.get("architecture"), g["id"]


def test_cli_bf16_on_v100_is_not_compatible_and_never_fits():
    code, out, err = run("estimate", "--model", "llama-3.2-1b", "--method", "full", "--precision", "bf16",
                         "--gpu", "v100-32gb", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["compatible"] is False and data["fits"] is False
    assert any("bf16" in n for n in data["compatibility_notes"])
    code, out, err = run("estimate", "--model", "llama-3.2-1b", "--method", "full", "--precision", "amp_fp16",
                         "--gpu", "v100-32gb", "--json")
    data = json.loads(out)
    assert data["compatible"] is True  # fp16 is what a V100 runs; only notes remain
    code, out, err = run("estimate", "--model", "llama-3.2-1b", "--method", "full", "--precision", "bf16",
                         "--gpu", "rtx-3090", "--json")
    data = json.loads(out)
    assert data["compatible"] is True and data["compatibility_notes"] == []


@pytest.mark.parametrize("gpu", ["t4", "v100-32gb"])
def test_quantized_inference_on_a_card_without_bf16_keeps_an_fp16_kv_cache_and_runs(gpu):
    """A T4 (Colab's card) or V100 serving int4 / nf4 / int8 / GGUF weights was called incompatible:
    the KV 'auto' rule gave their cache bf16. Their stacks keep fp16 activations (bitsandbytes loads in
    fp16, GPTQ/AWQ kernels run in fp16, llama.cpp's cache is f16): same bytes, and the card runs it."""
    bytes_by_kv = {}
    for precision in ("int4", "nf4", "int8", "q4_k_m"):
        code, out, err = run("estimate", "--model", "llama-3.1-8b", "--task", "infer", "--precision", precision,
                             "--gpu", gpu, "--json")
        assert code == 0, err
        data = json.loads(out)
        assert data["kv_precision"] == "fp16", precision
        assert data["compatible"] is True and data["fits"] is True, (precision, data["compatibility_notes"])
        code, out, err = run("estimate", "--model", "llama-3.1-8b", "--task", "infer", "--precision", precision,
                             "--kv-precision", "bf16", "--gpu", gpu, "--json")
        bf16 = json.loads(out)
        assert bf16["compatible"] is False  # asked for bf16 by name: still refused
        bytes_by_kv[precision] = (data["kv_cache_bytes"], bf16["kv_cache_bytes"])
    assert all(a == b > 0 for a, b in bytes_by_kv.values()), bytes_by_kv
    # bf16 weights keep a bf16 cache: still refused on these cards, and an FP8 checkpoint's cache stays bf16
    code, out, err = run("estimate", "--model", "llama-3.1-8b", "--task", "infer", "--precision", "bf16",
                         "--gpu", gpu, "--json")
    data = json.loads(out)
    assert data["kv_precision"] == "bf16" and data["compatible"] is False
    assert any("Turing" in n and "Volta" in n for n in data["compatibility_notes"])
    code, out, err = run("estimate", "--model", "llama-3.1-8b", "--task", "infer", "--precision", "fp8",
                         "--gpu", "h100-sxm-80gb", "--json")
    assert json.loads(out)["kv_precision"] == "bf16"


def test_cli_text_says_why_not_compatible():
    code, out, err = run("estimate", "--model", "llama-2-70b", "--task", "infer", "--precision", "int8",
                         "--gpu", "apple-m3-ultra-512gb")
    assert code == 0, err
    assert "NOT COMPATIBLE" in out and "bitsandbytes" in out


def test_planner_never_offers_an_incompatible_configuration():
    cat = default_catalog()
    frame = planning.expand(dict(task="train", method="qlora", precision="bf16", grad_checkpointing=True),
                            model=["llama-3.2-1b"], gpu=["apple-m3-ultra-512gb", "rtx-3090"])
    conf = planning.configurations(frame, cat.models(), cat.gpus())
    mac, nv = conf.iloc[0], conf.iloc[1]
    assert not mac["compatible"] and not mac["fits_within"] and mac["label"] == "✗ incompatible"
    assert mac["memory_used_fraction"] < 0.5  # memory alone would have fitted: the rule refuses it
    assert nv["compatible"] and nv["fits_within"]


def test_headroom_default_is_ten_percent_on_the_library_and_the_cli():
    assert DEFAULTS["headroom"] == 0.1
    code, out, err = run("estimate", "--model", "llama-2-7b", "--task", "infer", "--gpu", "rtx-4090", "--json")
    assert json.loads(out)["headroom"] == 0.1
    code, out, err = run("estimate", "--model", "llama-2-7b", "--task", "infer", "--gpu", "rtx-4090",
                         "--headroom", "0", "--json")
    assert json.loads(out)["headroom"] == 0


# ---- the newer architectures (issue 14): named by the rules, sourced ------------------------

NEW_ARCHITECTURES = ("apple-m2", "apple-m4", "rdna3", "rdna3.5", "cdna4", "blackwell-gb10")


def _names(text):
    return {t.strip() for t in str(text or "").split(",") if t.strip()}


def test_every_newer_architecture_is_named_by_a_rule_or_its_vendor():
    doc = yaml.safe_load((ROOT / "catalog" / "gpus.yaml").read_text())
    by_arch = {g["architecture"]: g["vendor"] for g in doc["gpus"]}
    for arch in NEW_ARCHITECTURES:
        assert arch in by_arch, arch  # a catalog card has it
        hits = [r["id"] for r in doc["compatibility"]
                if arch in _names(r.get("architectures")) or by_arch[arch] in _names(r.get("vendors"))]
        assert hits, arch


@pytest.mark.parametrize("args, gpu, fragment", [
    (("--method", "qlora"), "amd-ryzen-ai-max-395-128gb", "bitsandbytes' AMD ROCm backend"),
    (("--task", "infer", "--kv-precision", "fp8"), "rx-7900-xtx", "no FP8 tensor cores"),
    (("--task", "infer", "--kv-precision", "fp8"), "apple-m4-max-128gb", "no FP8 tensor cores"),
    (("--task", "infer"), "rx-7900-xtx", "Triton backend"),
    (("--task", "infer", "--gpus", "2"), "nvidia-dgx-spark", "ConnectX-7"),
    (("--task", "infer", "--gpus", "2"), "amd-ryzen-ai-max-395-128gb", "no GPU-to-GPU link"),
])
def test_cli_names_the_newer_architectures_notes(args, gpu, fragment):
    code, out, err = run("estimate", "--model", "llama-3.2-1b", *args, "--gpu", gpu, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert any(fragment in n for n in data["compatibility_notes"]), data["compatibility_notes"]


def test_mini_pcs_are_whole_computers_with_their_own_host_class():
    doc = yaml.safe_load((ROOT / "catalog" / "gpus.yaml").read_text())
    hosts = {h["id"]: h for h in doc["hosts"]}
    gpus = {g["id"]: g for g in doc["gpus"]}
    assert hosts["mini-pc"]["usd_per_node"] == 0 and hosts["mini-pc"]["source"] and hosts["mini-pc"]["date"]
    for card in ("nvidia-dgx-spark", "amd-ryzen-ai-max-395-128gb"):
        assert gpus[card]["host_class"] == "mini-pc"  # not the Mac Studio class
    from catalog import default_catalog
    from planner import procurement
    cat = default_catalog()
    out = procurement.system_costs(pd.DataFrame({"gpu": ["nvidia-dgx-spark", "amd-ryzen-ai-max-395-128gb"],
                                                 "gpus": [1, 1]}), cat.gpus(), cat.hosts(), "new")
    assert out["host_class"].tolist() == ["mini-pc", "mini-pc"]
    assert out["cost_usd"].tolist() == [gpus["nvidia-dgx-spark"]["price_usd"],
                                        gpus["amd-ryzen-ai-max-395-128gb"]["price_usd"]]
    assert out["host_source"].str.contains("Framework Desktop").all()


def test_only_multi_gpu_rules_hold_on_several_gpus_only_and_the_check_matches_a_row_by_row_reading():
    """only_multi_gpu: the values count on more than one GPU only (layer-wise GaLore under a
    distributed launch); the grouped check reads each row as a plain loop over rules would."""
    rules = pd.concat([RULES, pd.DataFrame([{
        "id": "layerwise", "columns": "optimizer", "values": "galore_adamw_layerwise", "multi_gpu": False,
        "only_multi_gpu": True, "architectures": "", "vendors": "nvidia", "severity": "incompatible",
        "note": "single process"}])], ignore_index=True)
    frame = pd.DataFrame({"gpu": ["new", "new", "new", "old", "mac"],
                          "precision": ["fp16", "fp16", "fp16", "bf16", "bf16"],
                          "task": ["train"] * 5,
                          "optimizer": pd.Categorical(["galore_adamw_layerwise", "galore_adamw_layerwise", "adamw",
                                                       "galore_adamw_layerwise", "galore_adamw_layerwise"]),
                          "gpus": [1, 2, 2, 4, 2]})
    out = check(frame, GPUS, rules)
    assert out["compatible"].tolist() == [True, False, True, False, False]
    assert out["compatibility_notes"].tolist() == [
        [], ["incompatible: single process"], [],
        ["incompatible: no bf16", "incompatible: single process", "note: slower attention"],
        ["incompatible: one device"]]
    # each row's notes are its own list (a caller appending to one changes no other)
    out["compatibility_notes"].iloc[0].append("x")
    assert out["compatibility_notes"].iloc[2] == []


def test_shipped_rules_refuse_layerwise_galore_on_several_gpus_and_bitsandbytes_optimizers_on_a_mac():
    cat = default_catalog()
    gpus, rules = cat.gpus(), cat.compatibility()
    mac = gpus.loc[gpus["vendor"] == "apple", "id"].iloc[0]
    frame = pd.DataFrame({"gpu": ["h100-sxm-80gb", "h100-sxm-80gb", "h100-sxm-80gb", mac, mac],
                          "optimizer": ["galore_adamw_layerwise", "galore_adamw_8bit_layerwise", "galore_adamw",
                                        "lion_32bit", "adamw"],
                          "gpus": [1, 2, 2, 1, 1]})
    assert check(frame, gpus, rules)["compatible"].tolist() == [True, False, True, False, True]


def test_one_card_holds_it_only_where_the_rules_let_that_card_run_it():
    """The Overview's 'cards that hold it alone', the Inference table's smallest single GPU and its speed on the
    chosen card counted a card the rules refuse (FP8 weights on a T4: the smallest GPU was the T4, at 20.5 tokens/s,
    beside 'T4: ✗ incompatible'). A QA pass over the pages found it."""
    cat = default_catalog()
    models, gpus = cat.models(), cat.gpus()
    table = planning.inference_table(models, gpus, ["llama-3-8b"], ["bf16", "fp8", "int4"], 8192, 1, "t4")
    by = table.set_index("precision")
    arch = gpus.set_index("id")["architecture"].str.lower()
    for p in ("bf16", "fp8"):
        assert by.loc[p, "card_label"] == "✗ incompatible" and not by.loc[p, "card_fits"]
        assert by.loc[p, "smallest_gpu"] != "t4" and arch[by.loc[p, "smallest_gpu"]] not in ("volta", "turing")
        assert pd.isna(by.loc[p, "card_decode_tokens_per_s"])
    assert by.loc["int4", "card_fits"] and by.loc["int4", "card_decode_tokens_per_s"] > 0
    frame = planning.expand(dict(task="infer", precision="bf16", seq=4096), model=["llama-3.2-1b"], gpu=list(gpus["id"]))
    conf = planning.configurations(frame, models, gpus)
    refused = conf[~conf["compatible"].to_numpy(dtype=bool)]
    assert len(refused) >= 2 and not refused["one_gpu_fits"].any()  # the T4 and V100 hold 1B's bytes, not its bf16
    assert conf.loc[conf["compatible"].to_numpy(dtype=bool), "one_gpu_fits"].sum() > 30


def test_the_single_scenario_rows_carry_the_rules_verdict():
    cat = default_catalog()
    models, gpus = cat.models(), cat.gpus()
    sc = {**DEFAULTS, "model": "llama-3.2-1b", "task": "infer", "precision": "bf16", "seq": 4096, "gpu": "t4"}
    from engine import estimate
    raw = estimate(pd.DataFrame([sc]), models, gpus)
    row = planning.with_compatibility(raw, gpus).iloc[0]
    assert not row["compatible"] and raw.iloc[0]["fits"]  # its bytes fit the card; the card does not run bf16
    assert row["fits"] is False and any("bf16" in n for n in row["compatibility_notes"])
    part = planning.breakdown(sc, models, gpus, [1024], [1])["row"]
    assert not part["fits"] and not part["compatible"]
    ok = planning.with_compatibility(estimate(pd.DataFrame([{**sc, "precision": "int4"}]), models, gpus), gpus).iloc[0]
    assert ok["compatible"] and ok["fits"] and not any(n.startswith("incompatible") for n in ok["compatibility_notes"])


def test_the_columns_read_are_all_a_verdict_needs():
    """planning.configurations asks the rules once, over a frame of columns_read alone (its ~160 columns otherwise):
    the verdict of the shipped rules over a sweep is the same from those columns as from the whole frame."""
    from engine.compat import columns_read
    rules = default_catalog().compatibility()
    read = columns_read(rules)
    assert {"gpu", "gpus", "precision"} <= read
    assert columns_read(None) == {"gpu", "gpus"}
    cat = default_catalog()
    gpus = cat.gpus()
    plan = {"train": {"task": "train", "method": "full", "seq": 1024, "batch": 1},
            "serve": {"task": "infer", "precision": "int4", "seq": 1024, "batch": 1}}
    frame = planning.configurations(planning.plans_frame(plan, model=list(cat.models()["id"][:6]),
                                                         gpu=list(gpus["id"])), cat.models(), gpus, max_gpus=4)
    whole = check(frame, gpus, rules)
    narrow = check(frame[[c for c in frame.columns if c in read]], gpus, rules)
    assert not whole["compatible"].all()  # (some rule refuses some row: the comparison means something)
    pd.testing.assert_frame_equal(whole, narrow)
