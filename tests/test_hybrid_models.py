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
# ... and the vision tower + merger of the multimodal ones (Qwen3_5ForConditionalGeneration's and
# Qwen3_5MoeForConditionalGeneration's `visual` parameters; the rest of each is the text model above)
TRANSFORMERS_VISION = {"qwen3-next-80b-a3b.json": 0, "qwen3.5-27b.json": 460_730_096, "qwen3.5-35b-a3b.json": 446_571_248}


@pytest.fixture(scope="module")
def cat():
    c = default_catalog()
    return c.models(), c.gpus()


@pytest.mark.parametrize("name", sorted(TRANSFORMERS_COUNTS))
def test_a_hybrid_config_counts_what_transformers_builds(name):
    record = model_from_config_file(DATA / name)
    params, linear = TRANSFORMERS_COUNTS[name]
    assert (record["params"], record["linear_attention_layers"]) == (params, linear)
    assert record.get("vision_params", 0) == TRANSFORMERS_VISION[name]
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
    """max_batch and max_seq of hybrid rows fit, and one more does not (the state of each sequence counted), with
    eager attention's seq x seq scores too (whose longest context first counted the state twice: 58 of 180 random
    rows one token short, found by a random check of 400 rows)."""
    models, gpus = cat
    frame = pd.concat([_infer("qwen3-next-80b-a3b", batch=b, seq=s, gpus=g, attention=a)
                       for b, s, g in ((1, 4096, 1), (4, 16_384, 1), (16, 2048, 2), (2, 65_536, 2))
                       for a in ("auto", "eager")], ignore_index=True)
    res = estimate(frame, models, gpus)
    mb, ms = res["max_batch"].to_numpy(int), res["max_seq"].to_numpy(int)
    some, longer = mb >= 1, ms >= 1  # (eager scores of 16,384 and 65,536 tokens hold no batch on these cards)
    assert some.sum() >= 6 and longer.sum() >= 6
    at = estimate(frame[some].assign(batch=mb[some]), models, gpus)["fits"].to_numpy(bool)
    more = estimate(frame[some].assign(batch=mb[some] + 1), models, gpus)["fits"].to_numpy(bool)
    assert at.all() and not more.any()
    short = longer & (ms < 262_144)
    at_s = estimate(frame[longer].assign(seq=ms[longer]), models, gpus)["fits"].to_numpy(bool)
    more_s = estimate(frame[short].assign(seq=ms[short] + 1), models, gpus)["fits"].to_numpy(bool)
    assert at_s.all() and short.sum() >= 4 and not more_s.any()
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


def test_training_the_gated_deltanet_hybrids_is_estimated_and_tables_say_so(cat):
    """Qwen3-Next's and (since the hybrid probe) Qwen3.5's MoE model's training is modelled
    (tests/test_hybrid_training_accuracy.py): estimated with peft's adapters as it places them, a figure in tables. (The
    hybrids still refused, Nemotron-H and Falcon-H1, are Mamba2 ones: tests/test_mamba2_models.py.)"""
    models, gpus = cat
    row = estimate(pd.DataFrame([{"model": "qwen3-next-80b-a3b", "gpu": "h100-sxm-80gb", "task": "train",
                                  "method": "lora", "lora_targets": "all-linear", "lora_rank": 16}]), models, gpus).iloc[0]
    # peft's adapters on every expert (measured: tests/data/measured_hybrid_training.csv)
    assert row["trainable_params"] == 3_443_233_536 and np.isfinite(row["peak_bytes"])
    code, out, err = run_cli("estimate", "--model", "qwen3-next-80b-a3b", "--gpu", "h100-sxm-80gb", "--method", "lora")
    assert code == 0 and "Traceback" not in err
    moe = model_from_config_file(DATA / "qwen3.5-35b-a3b.json")
    both = pd.concat([models, pd.DataFrame([moe])], ignore_index=True)
    row = estimate(pd.DataFrame([{"model": moe["id"], "gpu": "h100-sxm-80gb", "task": "train", "method": "lora",
                                  "lora_targets": "all-linear", "lora_rank": 16}]), both, gpus).iloc[0]
    # peft 0.21.2 converts none of qwen3_5_moe's experts: the hybrid probe's measured count
    assert row["trainable_params"] == 22_477_440 and np.isfinite(row["peak_bytes"])
    code, out, err = run_cli("estimate", "--model-config", str(DATA / "qwen3.5-35b-a3b.json"), "--gpu",
                             "h100-sxm-80gb", "--method", "lora")
    assert code == 0 and "not modelled" not in err and "Traceback" not in err
    sc = planning.expand({"task": "train", "method": "lora"}, model=[moe["id"], "qwen3-next-80b-a3b", "llama-3.1-8b"],
                         gpu=["h100-sxm-80gb"])
    conf = planning.configurations(sc, both, gpus)
    assert "✗ not modelled" not in conf["label"].tolist() and conf["label"].iloc[2] == "1"


def test_serving_a_hybrid_model_through_estimate_fits_where_the_weights_and_states_do(cat):
    """At 4 bits on one H100 the 80B model's 43 GB of weights leave room for requests whose state (78 MB each)
    and full-layer KV (24 KiB a token) fit: 4,096-token requests at batch 8 fit, at a batch that needs more than the
    card does not."""
    models, gpus = cat
    ok = estimate(_infer("qwen3-next-80b-a3b", batch=8, seq=4096), models, gpus).iloc[0]
    assert ok["fits"] and ok["weights_bytes"] == pytest.approx(43.24e9, rel=0.01)
    big = estimate(_infer("qwen3-next-80b-a3b", batch=int(ok["max_batch"]) + 1, seq=4096), models, gpus).iloc[0]
    assert not big["fits"] and np.isfinite(big["peak_bytes"])


def _serve_json(*args):
    code, out, err = run_cli("serve", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_vllm_pages_a_hybrid_model_as_its_start_up_log_says():
    """vLLM 0.10.2, Qwen3-Next 80B-A3B at TP 2 (catalog/serving_measurements.yaml, its log): from the logged 'Available
    KV cache memory: 44.59 GiB' the allocation written out from vLLM's source gives the log's other lines. Per GPU a
    Gated DeltaNet layer's mamba page is a (4 - 1) x 8,192 / 2 bf16 conv state and a 16 x 128 x 128 bf16 temporal state
    (548,864 B); a full-attention layer's token 2 x 1 x 256 x 2 = 1,024 B; so the block is 16 x ceil(548,864 / 16,384)
    = 544 tokens ('Setting attention block size to 544 tokens'); 12 full and 36 linear layers make groups of 12 (one
    full, three linear), a page of 544 x 1,024 B per layer; pages = 44.59 GiB / (557,056 x 12) = 7,162; a request of
    262,144 tokens takes 482 + 3 pages: 14.77x, and 7,162 // 4 x 544 = 973,760 tokens ('GPU KV cache size')."""
    kv = int(44.59 * 2**30)
    d = _serve_json("--model", "qwen3-next-80b-a3b", "--gpu", "h200-sxm-141gb", "--gpus", "2", "--engine", "vllm",
                    "--max-model-len", "262144", "--engine-version", "0.10", "--kv-cache-memory-bytes", str(kv))
    assert d["num_gpu_blocks"] == np.floor(kv / (544 * 1024 * 12)) == 7162
    assert d["max_concurrency"] == pytest.approx(7162 / (np.ceil(262144 / 544) + 3)) and round(d["max_concurrency"], 2) == 14.77
    assert d["num_gpu_blocks"] // 4 * 544 == 973_760


def test_vllm_keeps_qwen35s_temporal_state_in_float32():
    """vLLM 0.19.0, Qwen3.5-27B (vllm-project/vllm issue #40691: 'GPU KV cache size: 290,864 tokens', 'Maximum
    concurrency for 32,768 tokens per request: 33.04x', at --max-num-seqs 16): the config's mamba_ssm_dtype float32
    makes a mamba page 3 x 10,240 x 2 + 48 x 128 x 128 x 4 = 3,207,168 B, the block 16 x ceil(3,207,168 / 65,536) =
    784 tokens (4 KV heads of 256 a token: 4,096 B); 16 full and 48 linear layers: groups of 16, a request of 32,768
    takes 42 + 3 pages. The log's 290,864 tokens are 1,487 pages (1,487 // 4 x 784), which give its 33.04x."""
    per_page_group = 784 * 4096 * 16
    kv = 1487 * per_page_group + per_page_group // 2  # a KV budget of 1,487 and a half pages
    d = _serve_json("--model-file", str(DATA / "qwen3.5-27b.json"), "--gpu", "h200-sxm-141gb", "--engine", "vllm",
                    "--max-model-len", "32768", "--max-num-seqs", "16", "--kv-cache-memory-bytes", str(kv))
    assert d["num_gpu_blocks"] == 1487 and d["num_gpu_blocks"] // 4 * 784 == 290_864
    assert round(d["max_concurrency"], 2) == 33.04


def test_sglang_splits_the_budget_between_its_mamba_and_kv_pools():
    """SGLang (mamba_utils.py mamba_cache_per_req, handle_max_mamba_cache): a request's states per GPU are 36 x (3 x
    8,192 / 2 x 2 B + 32 / 2 x 128 x 128 x 4 B); 0.9 / 1.9 of the budget buys that many of them, the rest holds the 12
    full layers' tokens at 1,024 B a layer; running requests at most a third of the Mamba pool's."""
    d = _serve_json("--model", "qwen3-next-80b-a3b", "--gpu", "h200-sxm-141gb", "--gpus", "2", "--engine", "sglang",
                    "--max-model-len", "32768")
    rest = d["budget_bytes"] - d["weights_gpu_bytes"] - d["non_torch_bytes"]
    per_req = 36 * (3 * 4096 * 2 + 16 * 128 * 128 * 4)
    mamba = np.floor(rest * 0.9 / 1.9 / per_req)
    tokens = np.floor((rest - mamba * per_req) / (12 * 1024))
    assert d["kv_cache_bytes_available"] == pytest.approx(tokens * 12 * 1024)
    assert d["max_concurrency"] == pytest.approx(min(tokens / 32768, np.floor(mamba / 3)))


def test_engines_that_do_not_run_hybrid_models_are_refused_by_name():
    for args, accepted in ((("--engine", "exllamav2", "--precision", "int4"), "accepted: vllm, sglang, transformers"),
                           (("--engine", "exllamav3"), "engine 'exllamav3' is not accepted for qwen3-next-80b-a3b"),
                           (("--engine", "vllm", "--engine-version", "0.9"), "vLLM runs Gated DeltaNet models from 0.10.2"),
                           (("--engine", "sglang", "--draft-model", "qwen3-0.6b"), "draft-model 'qwen3-0.6b' is not accepted")):
        code, out, err = run_cli("serve", "--model", "qwen3-next-80b-a3b", "--gpu", "h200-sxm-141gb", "--gpus", "2",
                                 "--max-model-len", "8192", *args)
        assert code == 2 and accepted in err and "Traceback" not in err, err


def test_a_hybrid_prefill_holds_what_transformers_holds(cat):
    """Qwen3-Next 80B-A3B's whole prefill measured on fake tensors (transformers 5.24 without flash-linear-attention,
    benchmarks/check_hybrid_counts.py --prefill; none of these rows fitted: the Gated DeltaNet layer's coefficients come
    from single-layer runs of other sizes). The tensors' peak within 0.1%, and the part beside the weights (the KV
    cache, the states and the largest layer's working set) never more than 2% under and at most 3% over (the working
    set is each part's larger of the MoE layer's and the Gated DeltaNet layer's, an upper bound of the form the
    GPUs-needed solver divides over tensor-parallel degrees: +1.6% to +2.0% here); before the layer's working set was
    counted, that part was 22-24% under."""
    models, gpus = cat
    measured = pd.read_csv(Path(__file__).parent / "data" / "measured_hybrid_prefill.csv")
    frame = measured.assign(gpu="h200-sxm-141gb", task="infer", precision="bf16")[["model", "gpu", "task", "precision",
                                                                                   "batch", "seq"]]
    res = estimate(frame, models, gpus, fragmentation=0, context_bytes=0, cublas_bytes=0)
    assert (res["weights_bytes"].to_numpy() == measured["param_bytes"].to_numpy()).all()
    peak_err = res["peak_bytes"].to_numpy() / measured["peak_bytes"].to_numpy() - 1
    rest_err = (res["peak_bytes"] - res["weights_bytes"]).to_numpy() / measured["activation_bytes"].to_numpy() - 1
    assert (np.abs(peak_err) < 0.001).all(), peak_err
    assert (rest_err > -0.02).all() and (rest_err < 0.03).all(), rest_err


def test_the_recommended_count_for_a_hybrid_model_is_the_fewest_that_holds_it(cat):
    """Regression (property search seed 6219836229449706979): Qwen3-Next served in NF4, 16 x 4,096 tokens, on an L40S
    and an A40 was recommended 4 GPUs where 2 hold it. The Gated DeltaNet layer's working set was the larger of it and
    the MoE layer's, which is not of the form the GPUs-needed solver divides over each tensor-parallel degree
    (rank-held + split / tp); each part the larger of the two is. (Asked in int4 since bitsandbytes' NF4 leaves a
    mixture of experts' fused experts in 16-bit under transformers 5.x, engine/constants.py: 8 GPUs there.)"""
    models, gpus = cat
    ask = {"task": "infer", "precision": "int4", "batch": 16, "seq": 4096, "kv_precision": "auto", "kv_policy": "full",
           "allow_long_context": True}
    sc = planning.expand(ask, model=["qwen3-next-80b-a3b"], gpu=["l40s", "a40"])
    conf = planning.configurations(sc, models, gpus, max_gpus=8)
    assert conf["gpus"].tolist() == [2, 2] and conf["fits_within"].all()
    one = estimate(planning.with_defaults(sc).assign(gpus=1, tp=1, pp=1), models, gpus)
    assert not one["fits"].any() and (one["gpus_needed"] == 2).all()
    half = estimate(planning.with_defaults(sc).assign(gpus=1), models, gpus)
    assert not half["fits"].any()


def test_a_hybrid_request_leaves_its_neighbours_answers_alone(cat):
    """Regression (serve property search seed 3594620428401273736): beside a Qwen3-Next request, a transformers plan of
    gpt-oss-20b lost its eager attention's scores (the hybrid block reused the name of the heads' column), 553 GB of
    activation peak alone, 2.7 GB in the frame. Each request's answer is its own in any frame."""
    import engine.serving as S
    models, gpus = cat
    gpt = {"model": "gpt-oss-20b", "gpu": "h100-sxm-80gb", "engine": "transformers", "precision": "bf16",
           "max_model_len": 32768, "gpus": 2, "max_num_seqs": 64}
    nxt = {"model": "qwen3-next-80b-a3b", "gpu": "h100-sxm-80gb", "engine": "transformers", "precision": "bf16",
           "max_model_len": 4096, "gpus": 2}
    both = S.serve(pd.DataFrame([gpt, nxt]), models, gpus)
    for i, req in enumerate((gpt, nxt)):
        alone = S.serve(pd.DataFrame([req]), models, gpus).iloc[0]
        for col in ("activation_peak_bytes", "kv_cache_bytes_available", "max_concurrency", "concurrency"):
            assert both[col].iloc[i] == alone[col], (req["model"], col)
