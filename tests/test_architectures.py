"""Issue 15: mixture-of-experts, sliding-window / interleaved attention and latent attention (MLA).

The Done-when figures: Mixtral 8x7B from its published config.json gives 46,702,792,704
parameters and 12,879,925,248 active; Gemma 2 9B at 8,192 tokens keeps 1.96875 GiB of bf16 KV
cache windowed and 2.625 GiB full; DeepSeek-V3's latent KV is (512 + 64) x 61 x 2 bytes per
token; the shipped catalog lists at least 30 models."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from catalog.user import model_from_config_file
from engine import estimate
from engine.params import architecture_counts
from tests.clirun import run_cli

DATA = Path(__file__).resolve().parent / "data" / "good_configs"
ROOT = Path(__file__).resolve().parent.parent
GIB = 2**30


def _cli(*args):
    """`python -m engine *args`, in this process (tests/clirun.py), as a finished process's fields."""
    code, out, err = run_cli(*args)
    return SimpleNamespace(returncode=code, stdout=out, stderr=err)


def _estimate(name, **scenario):
    record = model_from_config_file(DATA / name)
    models = pd.DataFrame([record])
    row = {"model": record["id"], "task": "infer", "precision": "bf16", "batch": 1, **scenario}
    return estimate(pd.DataFrame([row]), models).iloc[0], record


def test_mixtral_cli_gives_the_published_total_and_active_counts():
    out = _cli("estimate", "--model-config", str(DATA / "mixtral-8x7b-v0.1.json"), "--task", "infer", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["params"] == 46_702_792_704
    assert data["active_params"] == 12_879_925_248
    text = _cli("estimate", "--model-config", str(DATA / "mixtral-8x7b-v0.1.json"), "--task", "infer")
    assert "12,879,925,248" in text.stdout and "46,702,792,704" in text.stdout


def test_mixtral_counts_by_hand():
    # per layer: attention 4096 x (4096 + 2 x 1024) + 4096 x 4096, 8 experts of 3 x 4096 x 14336,
    # a router 8 x 4096, two norms; embedding and lm_head 32000 x 4096 each, a final norm
    attn, expert, router, norms = 2 * 4096 * 4096 + 2 * 4096 * 1024, 3 * 4096 * 14336, 8 * 4096, 2 * 4096
    outside = 2 * 32000 * 4096 + 4096
    record = model_from_config_file(DATA / "mixtral-8x7b-v0.1.json")
    assert record["params"] == outside + 32 * (attn + 8 * expert + router + norms)
    assert record["active_params"] == outside + 32 * (attn + 2 * expert + router + norms)


@pytest.mark.parametrize("name, active", [
    # published active counts: OpenAI's gpt-oss model card (3.61B active: lm_head counted, the
    # embedding not) and Qwen's card (3.3B); ours count the embedding too, like Mixtral's 12.9B
    ("gpt-oss-20b.json", 3_608_307_264 + 201_088 * 2_880),
    ("qwen3-30b-a3b.json", 3_353_032_704),
])
def test_active_counts(name, active):
    assert model_from_config_file(DATA / name)["active_params"] == active


def test_deepseek_v3_active_count_is_the_published_37b():
    record = model_from_config_file(DATA / "deepseek-v3.json")
    assert round(record["params"] / 1e9) == 671 and round(record["active_params"] / 1e9, 0) in (37, 38)


def test_gemma_2_9b_kv_cache_windowed_and_full():
    windowed, _ = _estimate("gemma-2-9b.json", seq=8192, kv_policy="windowed")
    full, _ = _estimate("gemma-2-9b.json", seq=8192, kv_policy="full")
    default, _ = _estimate("gemma-2-9b.json", seq=8192)
    # the rule's default (issue 28): an estimate's inference row is a transformers prefill, which keeps
    # every layer's K/V at full length; a GGUF precision runs on llama.cpp, whose SWA cache keeps the window
    assert default["kv_policy"] == "full" and default["kv_cache_bytes"] == full["kv_cache_bytes"]
    gguf, _ = _estimate("gemma-2-9b.json", seq=8192, precision="q4_k_m")
    assert gguf["kv_policy"] == "windowed" and gguf["kv_cache_bytes"] == windowed["kv_cache_bytes"]
    # windowed: llama.cpp's SWA cache, the 4,096 window + -ub 512 padded to 256 = 4,608 cells a sliding layer
    # (llama-kv-cache-iswa.cpp): 21 x (8,192 + 4,608) x 8 x 256 x 2 x 2 bytes
    assert windowed["kv_cache_bytes"] / GIB == 2.05078125
    assert full["kv_cache_bytes"] / GIB == 2.625
    assert full["peak_bytes"] - windowed["peak_bytes"] > (2.625 - 2.05078125) * GIB  # the peak follows
    # inside the window, the policies agree
    short_w, _ = _estimate("gemma-2-9b.json", seq=4096)
    short_f, _ = _estimate("gemma-2-9b.json", seq=4096, kv_policy="full")
    assert short_w["kv_cache_bytes"] == short_f["kv_cache_bytes"] == 42 * 2 * 8 * 256 * 2 * 4096


def test_gemma_2_9b_cli_kv_policy():
    for policy, gib in (("windowed", 2.05078125), ("full", 2.625), ("auto", 2.625)):
        out = _cli("estimate", "--model-config", str(DATA / "gemma-2-9b.json"), "--task", "infer", "--seq", "8192",
                   "--kv-policy", policy, "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["kv_cache_bytes"] / GIB == gib
    bad = _cli("estimate", "--model-config", str(DATA / "gemma-2-9b.json"), "--task", "infer", "--kv-policy", "paged")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "kv_policy" in bad.stderr


def test_deepseek_v3_latent_kv_per_token():
    for policy in ("windowed", "latent"):
        row, _ = _estimate("deepseek-v3.json", seq=1000, kv_policy=policy)
        assert row["kv_cache_bytes"] == (512 + 64) * 61 * 2 * 1000
    full, _ = _estimate("deepseek-v3.json", seq=1000, kv_policy="full")  # per-head k (128 x 192) and v (128 x 128)
    assert full["kv_cache_bytes"] == 61 * 128 * (192 + 128) * 2 * 1000
    # the latent is not split by tensor parallel (every rank keeps it), pipeline stages split layers
    tp8, _ = _estimate("deepseek-v3.json", seq=1000, gpus=8, tp=8, pp=1, kv_policy="latent")
    assert tp8["kv_cache_bytes"] == (512 + 64) * 61 * 2 * 1000


def test_moe_decode_reads_the_active_weights_only():
    from catalog.shipped import shipped_catalog
    gpus = shipped_catalog().gpus()
    gpu = "h100-sxm-80gb" if "h100-sxm-80gb" in set(gpus["id"]) else gpus["id"].iloc[0]
    record = model_from_config_file(DATA / "mixtral-8x7b-v0.1.json")
    models = pd.DataFrame([record])
    sc = pd.DataFrame([{"model": record["id"], "task": "infer", "precision": "int4", "batch": 1, "seq": 1024,
                        "gpu": gpu, "gpus": 8}])
    row = estimate(sc, models, gpus).iloc[0]
    dense = models.assign(active_params=record["params"])
    # the same model as if every expert ran: decode reads all the weights, so it is slower
    as_dense = estimate(sc, dense.assign(num_experts=0, experts_per_token=0, expert_intermediate_size=0,
                                         intermediate_size=8 * 14336), gpus).iloc[0]
    assert as_dense["params"] == row["params"]
    assert row["weights_bytes"] == pytest.approx(as_dense["weights_bytes"], rel=1e-3)  # every expert resident
    assert row["decode_tokens_per_s"] > 2 * as_dense["decode_tokens_per_s"]  # reads 12.9 of 46.7B


def test_catalog_lists_at_least_30_models_with_active_counts():
    out = _cli("catalog", "models", "--json")
    assert out.returncode == 0, out.stderr
    models = json.loads(out.stdout)
    models = models["models"] if isinstance(models, dict) else models
    assert len(models) >= 30
    by_id = {m["id"]: m for m in models}
    moe = [m for m in models if m.get("num_experts")]
    assert len(moe) >= 6
    assert all(m["active_params"] < m["params"] for m in moe)
    dense = [m for m in models if not m.get("num_experts")]
    assert all(m["active_params"] == m["params"] for m in dense)
    assert by_id["mixtral-8x7b"]["active_params"] == 12_879_925_248


def test_every_catalog_model_count_is_derived_exactly():
    from catalog.shipped import shipped_catalog
    models = shipped_catalog().models()
    for _, m in models.iterrows():
        counts = architecture_counts(m.to_dict())
        assert int(counts["total"]) == m["params"], m["id"]


def test_older_records_without_the_new_fields_still_estimate_the_same():
    record = model_from_config_file(DATA / "llama-2-7b.json")
    old = {k: record[k] for k in ("id", "name", "family", "hidden_size", "intermediate_size", "num_layers",
                                  "num_heads", "num_kv_heads", "head_dim", "vocab_size", "max_context",
                                  "tied_embeddings", "params")}
    sc = pd.DataFrame([{"model": record["id"], "task": "infer", "precision": "bf16", "seq": 4096},
                       {"model": record["id"], "task": "train", "method": "lora", "seq": 512}])
    a = estimate(sc, pd.DataFrame([old]))
    b = estimate(sc, pd.DataFrame([record]))
    pd.testing.assert_series_equal(a["peak_bytes"], b["peak_bytes"])
    assert (a["active_params"] == a["params"]).all()


@pytest.mark.parametrize("model, gpu, seq, attention", [
    # (gemma-2-9b on a 48 GB card: its 18.5 GB of bf16 weights leave a 24 GB card no batch on the safe side)
    ("gemma-2-9b", "rtx-a6000", 8192, "flash"), ("gemma-2-2b", "rtx-4090", 8192, "flash"),
    # (gpt-oss with flash attention, as vLLM or transformers' vllm-flash-attn3 kernel run it: under
    # transformers' default it attends eagerly, and 65,536 tokens of 64 heads' scores fit no card)
    ("gpt-oss-20b", "h100-sxm-80gb", 65536, "flash"),
    # Gemma 2 under transformers' default (eager: the prefill's batch x heads x seq x seq scores, the
    # attention phase): the largest batch is solved with the quadratic term at the row's seq
    ("gemma-2-9b", "h100-sxm-80gb", 8192, "auto"), ("gemma-2-2b", "rtx-4090", 4096, "auto")])
def test_windowed_largest_batch_is_the_one_that_fits(model, gpu, seq, attention):
    from catalog import default_catalog
    cat = default_catalog()
    models, gpus = cat.models(), cat.gpus()
    base = dict(model=model, task="infer", precision="bf16", seq=seq, gpu=gpu, allow_long_context=True,
                attention=attention, kv_policy="windowed")
    most = int(estimate(pd.DataFrame([base]), models, gpus).iloc[0]["max_batch"])
    assert most >= 1
    rows = estimate(pd.DataFrame([{**base, "batch": most}, {**base, "batch": most + 1}]), models, gpus)
    assert rows["fits"].tolist() == [True, False]


def test_sweep_takes_kv_policy_and_reports_active_params(tmp_path):
    out = tmp_path / "r.csv"
    done = _cli("sweep", "--out", str(out), "--models", "gemma-2-9b,mixtral-8x7b", "--task", "infer", "--seq", "8192",
                "--kv-policy", "full")
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(out, comment="#")
    assert set(frame["kv_policy"]) == {"full"}
    mixtral = frame[frame["model"] == "mixtral-8x7b"]
    assert (mixtral["active_params"] == 12_879_925_248).all() and (mixtral["params"] == 46_702_792_704).all()
    gemma = frame[frame["model"] == "gemma-2-9b"]
    assert (gemma["kv_cache_bytes"] == 2.625 * GIB).all()


def test_expert_parallel_places_whole_experts():
    record = model_from_config_file(DATA / "deepseek-v3.json")
    models = pd.DataFrame([record])
    base = {"model": record["id"], "task": "infer", "precision": "int4", "seq": 1024, "gpus": 8, "pp": 1}
    rows = estimate(pd.DataFrame([{**base, "tp": 8}, {**base, "tp": 1, "ep": 8}, {**base, "tp": 1}, {**base, "tp": 8, "ep": 8}]),
                    models)
    tp8, ep8, whole, both = rows["weights_bytes"].tolist()
    experts = 58 * 256 * 3 * 7168 * 2048  # 58 MoE layers x 256 experts x (gate, up, down)
    assert experts == pytest.approx(0.975 * record["params"], rel=0.01)
    # ep 8 keeps an eighth of the experts and every other weight whole; tp 8 an eighth of all
    assert ep8 == pytest.approx(whole - experts * 4.25 / 8 * 7 / 8, rel=1e-12)
    assert tp8 == pytest.approx(whole / 8, rel=1e-12) and both == pytest.approx(tp8, rel=1e-12)
    assert (rows["ep"] == [1, 8, 1, 8]).all()
    with pytest.raises(ValueError, match="ep 2 is not accepted"):
        estimate(pd.DataFrame([{**base, "tp": 4, "ep": 2}]), models)
    # a dense model's ep is 1 (engine/rules.py)
    dense = model_from_config_file(DATA / "llama-2-7b.json")
    row = estimate(pd.DataFrame([{"model": dense["id"], "task": "infer", "gpus": 8, "tp": 1, "ep": 8}]),
                   pd.DataFrame([dense])).iloc[0]
    assert row["ep"] == 1


def test_expert_parallel_full_training_splits_expert_states_and_needs_ep_gpus():
    record = model_from_config_file(DATA / "qwen3-30b-a3b.json")
    models = pd.DataFrame([record])
    base = {"model": record["id"], "task": "train", "method": "full", "precision": "bf16", "seq": 512, "gpus": 8,
            "tp": 1, "pp": 1}
    rows = estimate(pd.DataFrame([base, {**base, "ep": 8}]), models)
    plain, ep8 = rows.iloc[0], rows.iloc[1]
    share = 1 - (48 * 128 * 3 * 2048 * 768) / record["params"] * 7 / 8
    assert ep8["weights_bytes"] < plain["weights_bytes"]
    assert ep8["optimizer_bytes"] == pytest.approx(plain["optimizer_bytes"] * share, rel=1e-12)
    from catalog import default_catalog
    gpus = default_catalog().gpus()
    fit = estimate(pd.DataFrame([{**base, "ep": 8, "gpu": "h100-sxm-80gb"}]), models, gpus).iloc[0]
    assert fit["gpus_needed"] >= 8


def test_cli_ep_flag_and_bad_ep_in_one_line():
    good = _cli("estimate", "--model", "deepseek-v3", "--task", "infer", "--precision", "int4", "--gpus", "8",
                "--tp", "1", "--ep", "8", "--json")
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["ep"] == 8
    bad = _cli("estimate", "--model", "deepseek-v3", "--task", "infer", "--gpus", "8", "--tp", "4", "--ep", "2")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "ep 2" in bad.stderr


def test_the_gpus_needed_with_expert_parallel_is_a_count_the_engine_takes(models, gpus):
    """gpus_needed (check's 'fits on N (--gpus N)', estimate's 'GPUs needed') of a row with ep > 1 was a count
    check_combinations refuses for that ep: training's data-parallel ranks with no regard to ep (mixtral-8x7b full
    ZeRO-3 at ep 2 on H100s: 5), serving a power of two whose tensor parallel is not the ep (ep 2 on 8 GPUs is tp 8;
    the counts that take it, ep x stages, are mostly not powers of two).
    Every count it gives past the row's own is now one the engine takes at that ep, and holds the row: estimated
    again at it (as `--gpus N` would: training keeps its tp, pp and cp, serving splits anew), in one call that a
    refused row would fail."""
    rows = []
    for model in ("mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-20b"):
        for gpu in ("h100-sxm-80gb", "rtx-4090"):
            for ep in (2, 4):
                for method, tp, cp in (("full", 1, 1), ("lora", 1, 1), ("full", 2, 1), ("full", 1, 2)):
                    rows.append({"model": model, "gpu": gpu, "task": "train", "method": method, "zero": 3,
                                 "grad_checkpointing": True, "gpus": ep * cp, "tp": tp, "pp": 1, "cp": cp, "ep": ep})
                rows.append({"model": model, "gpu": gpu, "task": "infer", "gpus": ep, "tp": 0, "pp": 0, "ep": ep})
    # Llama 4 Scout's 40 heads: at ep 8, 16 GPUs split tp 8 x pp 2 (a serving count past ep that takes it)
    rows += [{"model": "llama-4-scout", "gpu": gpu, "task": "infer", "gpus": 8, "tp": 0, "pp": 0, "ep": 8}
             for gpu in ("rtx-4090", "l4")]
    frame = pd.DataFrame(rows)
    res = estimate(frame, models, gpus)
    needed = res["gpus_needed"].to_numpy(dtype=float)
    more = np.isfinite(needed) & (needed > res["gpus"].to_numpy())
    assert more.sum() >= 20  # (most rows need more GPUs than ep: the check is not vacuous)
    again = frame[more].assign(gpus=needed[more].astype(int))
    serving = again["task"] == "infer"
    again.loc[serving, ["tp", "pp"]] = 0
    again = estimate(again, models, gpus)  # (ValueError where a count is refused)
    assert again["fits"].all(), again.loc[~again["fits"], ["model", "gpu", "task", "method", "gpus", "ep"]]
    # expert parallel as given: a training count is a whole number of pp x lcm(tp x cp, ep), a serving one splits by
    # tp = ep (engine/scenarios.py ep_accepted)
    step = again["pp"] * np.lcm(again["tp"] * again["cp"], again["ep"])
    assert ((again["gpus"] % step == 0) | serving.to_numpy()).all()
    assert serving.sum() >= 2 and (again.loc[serving.to_numpy(), "tp"] == again.loc[serving.to_numpy(), "ep"]).all()
    # serving at ep 2 with 32 heads: 4 GPUs split tp 4 (refused), 8 tp 8; the fewest that take it and hold Mixtral
    # 8x7B in bf16 on 24 GB cards are 6, tp 2 x 3 stages (the solver said 8)
    mixtral = res[(res["model"] == "mixtral-8x7b") & (res["gpu"] == "rtx-4090") & (res["task"] == "infer")
                  & (res["ep"] == 2)].iloc[0]
    assert mixtral["gpus_needed"] == 6


@pytest.mark.parametrize("model, gpu, precision, batch, seq", [
    ("gemma-2-9b", "rtx-3090", "bf16", 1, 30000), ("gemma-3-27b", "rtx-5090", "q4_k_m", 4, 9000)])
def test_windowed_longest_context_fits_and_one_more_does_not(model, gpu, precision, batch, seq):
    """kv_policy windowed, asked at a length past the window: the longest context is solved in both regimes from
    the phases' terms (executor _windowed_longest via _quad_limits). Before 2026-12-05 the row's own length's
    saving leaked into it: Gemma 2 9B bf16 on an RTX 3090 said 8,766 tokens where 7,027 is the longest that fits
    (44 of 3,000 random windowed rows said a length that did not fit)."""
    from catalog import default_catalog
    cat = default_catalog()
    models, gpus = cat.models(), cat.gpus()
    base = dict(model=model, task="infer", precision=precision, batch=batch, seq=seq, gpu=gpu, attention="flash",
                kv_policy="windowed", allow_long_context=True)
    longest = int(estimate(pd.DataFrame([base]), models, gpus).iloc[0]["max_seq"])
    rows = estimate(pd.DataFrame([{**base, "seq": longest}, {**base, "seq": longest + 1}]), models, gpus)
    assert rows["fits"].tolist() == [True, False]


def test_freeze_trains_the_last_layers_as_they_are_where_dense_layers_sit_among_the_experts(models):
    """Freeze tuning trains the last k decoder layers. Llama 4 Maverick alternates dense (16,384 wide) and MoE layers
    (interleave_moe_layer_step 2: its last layer is MoE) and DeepSeek-V3 has 3 dense layers first, so k times the mean
    layer is wrong for both (DeepSeek-V3 k = 2: 21.9B where 23.0B train, the fifth loops probe's freeze row -0.58%).
    The figures are transformers 5.24's: Llama4ForCausalLM built on the meta device from the catalog's fields, the
    parameters of model.layers[-k:]; DeepSeek-V3's from the loops harness's row (tests/data/measured_loops.csv), plus
    the two routers' 256 e_score_correction_bias values each, a buffer in transformers that the catalog counts."""
    rows = [dict(model="llama-4-maverick", task="train", method="freeze", freeze_layers=k) for k in (1, 2, 3)]
    rows.append(dict(model="deepseek-v3", task="train", method="freeze", freeze_layers=2))
    rows.append(dict(model="deepseek-v3", task="train", method="freeze", freeze_layers=61))
    got = estimate(pd.DataFrame(rows), models)["trainable_params"].tolist()
    assert got[:3] == [16_295_536_640, 16_610_119_680, 32_905_656_320]
    assert got[3] == 23_014_572_032 + 2 * 256
    # every layer: the whole model less the embedding, the output layer and the final norm
    m = models.set_index("id").loc["deepseek-v3"]
    assert got[4] == m["params"] - 2 * m["vocab_size"] * m["hidden_size"] - m["hidden_size"]
