"""Hybrid linear-attention models (Qwen3-Next, Qwen3.5): Gated DeltaNet layers that keep a fixed state per
sequence instead of a KV cache, beside full-attention layers (catalog/user.py, engine/params.py,
engine/components.py kv_state, engine/executor.py RowTerms.kv_saving)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from catalog import default_catalog
from catalog.schema import CatalogError
from catalog.user import model_from_config, model_from_config_file
from engine import estimate
from planner import planning
from tests.clirun import run_cli

DATA = Path(__file__).parent / "data" / "hybrid_configs"

# Counted by transformers 5.24.0's own classes built on the meta device from these configs
# (benchmarks/check_hybrid_counts.py, torch 2.13.0 CPU): Qwen3NextForCausalLM, Qwen3_5ForCausalLM (the text model of
# Qwen3.5-27B), Qwen3_5MoeForCausalLM (of Qwen3.5-35B-A3B); and the layers their config classes make linear.
TRANSFORMERS_COUNTS = {"qwen3-next-80b-a3b.json": (79_674_391_296, 36), "qwen3.5-27b.json": (26_895_998_464, 48),
                       "qwen3.5-35b-a3b.json": (34_660_610_688, 30)}


@pytest.fixture(scope="module")
def cat():
    c = default_catalog()
    return c.models(), c.gpus()


@pytest.mark.parametrize("name", sorted(TRANSFORMERS_COUNTS))
def test_a_hybrid_config_counts_what_transformers_builds(name):
    record = model_from_config_file(DATA / name)
    params, linear = TRANSFORMERS_COUNTS[name]
    assert (record["params"], record["linear_attention_layers"]) == (params, linear)
    assert record["attention_output_gate"] and record["qk_norm"]
    assert "Gated DeltaNet" in record["notes"]


def test_the_catalogs_qwen3_next_is_its_config(cat):
    """The shipped entry and its Hub config.json read by the importer give the same architecture."""
    models, _ = cat
    entry = models.set_index("id").loc["qwen3-next-80b-a3b"]
    record = model_from_config_file(DATA / "qwen3-next-80b-a3b.json")
    for key in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "vocab_size", "num_experts",
                "experts_per_token", "expert_intermediate_size", "shared_intermediate_size", "linear_attention_layers",
                "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                "linear_conv_kernel_dim", "params"):
        assert entry[key] == record[key], key
    assert entry["active_params"] == 3_874_929_408  # "3B activated": transformers' routed 10 + shared expert


def test_layer_types_and_bad_values_are_read_or_refused():
    cfg = json.loads((DATA / "qwen3-next-80b-a3b.json").read_text())
    listed = {**cfg, "layer_types": ["linear_attention", "full_attention"] * 24}
    assert model_from_config(listed)["linear_attention_layers"] == 24
    with pytest.raises(CatalogError, match="layer_types.*'sliding_attention'.*accepted: linear_attention, full_attention"):
        model_from_config({**cfg, "layer_types": ["sliding_attention"] + ["linear_attention"] * 47})
    with pytest.raises(CatalogError, match="linear_num_value_heads"):
        model_from_config({**cfg, "linear_num_value_heads": 24})  # not a multiple of the 16 key heads


def _infer(model, **kw):
    return pd.DataFrame([{"model": model, "gpu": "h100-sxm-80gb", "task": "infer", "precision": "int4", **kw}])


def test_the_kv_cache_is_the_full_layers_and_a_state_per_sequence(cat):
    """Qwen3-Next 80B-A3B: 12 full-attention layers keep K and V of 2 heads of 256 per token (16-bit), the 36 Gated
    DeltaNet layers per sequence what transformers 5.24 keeps (read from its cache after a forward of a small
    Qwen3NextForCausalLM in bf16: LinearAttentionLayer conv_states (batch, 2 x 16 x 128 + 32 x 128, 4) in bf16 and
    recurrent_states (batch, 32, 128, 128) in float32)."""
    models, gpus = cat
    kv_token = 12 * 2 * 2 * 256 * 2
    state = 36 * ((2 * 16 * 128 + 32 * 128) * 4 * 2 + 32 * 128 * 128 * 4)
    for batch, seq in ((1, 4096), (3, 10_000), (8, 32_768)):
        row = estimate(_infer("qwen3-next-80b-a3b", batch=batch, seq=seq), models, gpus).iloc[0]
        assert row["kv_cache_bytes"] == kv_token * batch * seq + state * batch
        assert row["kv_cache_context_bytes"] == row["kv_cache_bytes"]
    # a dense model of the same attention without the linear layers keeps K/V on all 48
    like = models.set_index("id").loc[["qwen3-next-80b-a3b"]].reset_index()
    like = like.assign(id="no-linear", linear_attention_layers=0, linear_num_key_heads=0, linear_num_value_heads=0,
                       linear_key_head_dim=0, linear_value_head_dim=0, linear_conv_kernel_dim=0)
    row = estimate(_infer("no-linear", batch=2, seq=4096), pd.concat([models, like], ignore_index=True), gpus).iloc[0]
    assert row["kv_cache_bytes"] == 48 * 2 * 2 * 256 * 2 * 2 * 4096


def test_the_largest_batch_and_longest_context_hold_the_state(cat):
    """max_batch and max_seq of hybrid rows fit, and one more does not (the state of each sequence counted)."""
    models, gpus = cat
    frame = pd.concat([_infer("qwen3-next-80b-a3b", batch=b, seq=s, gpus=g)
                       for b, s, g in ((1, 4096, 1), (4, 16_384, 1), (16, 2048, 2), (2, 65_536, 2))], ignore_index=True)
    res = estimate(frame, models, gpus)
    mb, ms = res["max_batch"].to_numpy(int), res["max_seq"].to_numpy(int)
    assert (mb >= 1).all() and (ms >= 1).all()
    at = estimate(frame.assign(batch=mb), models, gpus)["fits"].to_numpy(bool)
    more = estimate(frame.assign(batch=mb + 1), models, gpus)["fits"].to_numpy(bool)
    assert at.all() and not more.any()
    short = ms < 262_144
    at_s = estimate(frame.assign(seq=ms), models, gpus)["fits"].to_numpy(bool)
    more_s = estimate(frame[short].assign(seq=ms[short] + 1), models, gpus)["fits"].to_numpy(bool)
    assert at_s.all() and short.any() and not more_s.any()
    # the state is what a longer context does not grow: at the row's batch it lowers max_seq by state x b / (KV a token)
    alone = res.iloc[0]
    assert alone["max_seq"] < estimate(frame.iloc[[0]].assign(batch=1), models, gpus).iloc[0]["max_seq"] + 1


def test_a_hybrid_row_gives_the_same_answer_alone_and_in_a_frame(cat):
    models, gpus = cat
    frame = pd.concat([_infer(m, batch=b, seq=s, gpus=g, precision=p)
                       for m in ("qwen3-next-80b-a3b", "qwen3-30b-a3b", "mistral-7b")
                       for b, s, g, p in ((1, 4096, 1, "int4"), (8, 8192, 2, "bf16"), (2, 32_768, 4, "fp8"))],
                      ignore_index=True)
    res = estimate(frame, models, gpus)
    for i in range(len(frame)):
        one = estimate(frame.iloc[[i]].reset_index(drop=True), models, gpus).iloc[0]
        for col in res.columns:
            a, b = res[col].iloc[i], one[col]
            assert a == b or (pd.isna(a) and pd.isna(b)) or (isinstance(a, list) and a == b), (i, col, a, b)


def test_training_a_hybrid_model_is_refused_and_tables_say_so(cat):
    models, gpus = cat
    with pytest.raises(ValueError, match="qwen3-next-80b-a3b has linear-attention .* not modelled yet; accepted for "
                                         "this model: --task infer, and `serve`"):
        estimate(pd.DataFrame([{"model": "qwen3-next-80b-a3b", "gpu": "h100-sxm-80gb", "task": "train",
                                "method": "lora"}]), models, gpus)
    code, out, err = run_cli("estimate", "--model", "qwen3-next-80b-a3b", "--gpu", "h100-sxm-80gb", "--method", "lora")
    assert code == 2 and "not modelled yet" in err and "Traceback" not in err
    sc = planning.expand({"task": "train", "method": "lora"}, model=["qwen3-next-80b-a3b", "llama-3.1-8b"],
                         gpu=["h100-sxm-80gb"])
    conf = planning.configurations(sc, models, gpus)
    assert conf["label"].tolist()[0] == "✗ not modelled" and not conf["fits_within"].iloc[0]
    assert conf["label"].iloc[1] == "1"
    code, out, err = run_cli("sweep", "--models", "qwen3-next-80b-a3b,llama-3.1-8b", "--gpu-ids", "h100-sxm-80gb",
                             "--method", "lora")
    assert code == 0 and "left out qwen3-next-80b-a3b: training a model with linear-attention" in err
    assert "qwen3-next-80b-a3b" not in out and "llama-3.1-8b" in out


def test_serving_a_hybrid_model_through_estimate_fits_where_the_weights_and_states_do(cat):
    """At 4 bits on one H100 the 80B model's 43 GB of weights leave room for requests whose state (78 MB each)
    and full-layer KV (24 KiB a token) fit: 4,096-token requests at batch 8 fit, at a batch that needs more than the
    card does not."""
    models, gpus = cat
    ok = estimate(_infer("qwen3-next-80b-a3b", batch=8, seq=4096), models, gpus).iloc[0]
    assert ok["fits"] and ok["weights_bytes"] == pytest.approx(43.24e9, rel=0.01)
    big = estimate(_infer("qwen3-next-80b-a3b", batch=int(ok["max_batch"]) + 1, seq=4096), models, gpus).iloc[0]
    assert not big["fits"] and np.isfinite(big["peak_bytes"])
