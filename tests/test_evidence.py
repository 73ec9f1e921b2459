"""The evidence table: every published reference beside our estimate, and every large gap explained."""

import re
from pathlib import Path

import numpy as np
import pytest

from planner.evidence import evidence_table
from tests.test_cli import run


@pytest.fixture(scope="module")
def table(cat, models, gpus):
    return evidence_table(cat.references(), models, gpus)


def test_every_reference_gets_a_row_with_its_source(cat, table):
    assert len(table) == len(cat.references())
    assert table["source"].str.len().min() > 0


def test_every_difference_over_ten_percent_is_explained(table):
    big = table[~(table["error_pct"].abs() <= 10)]
    assert len(big) > 0  # the articles' claims do disagree with the engine
    unexplained = big[big["explanation"].str.len() == 0]
    assert unexplained.empty, unexplained[["id", "error_pct"]]
    assert not big["explanation"].str.startswith("no explanation").any()


def test_exact_published_figures_are_reproduced(table):
    rows = table.set_index("id")
    # llama.cpp's file sizes for Llama 3.1 8B, and the 16 bytes/param rule for 13B
    for rid in ("llamacpp-llama31-8b-fp16-size", "llamacpp-llama31-8b-q8-0-size",
                "llamacpp-llama31-8b-q4-k-m-size", "a000-13b-model-states-16bpp"):
        assert abs(rows.loc[rid, "error_pct"]) <= 1.0, rid


def test_llama_paper_gpu_hours_within_fifteen_percent(table):
    rows = table[table["id"].str.startswith("llama-paper-")]
    assert len(rows) == 4
    assert np.all(rows["error_pct"].abs() <= 15)


def test_cli_prints_the_table():
    code, out, err = run("evidence")
    assert code == 0, err
    assert "torchtune-llama31-8b-full-4090" in out and "error_pct" in out


def test_adapter_bytes_metric_is_the_adapters_trainable_parameters_in_their_dtype(table, models, gpus):
    """The QLoRA paper's 26 MB is an adapter size: compared as adapter_bytes, not as weights_bytes
    (which holds the 4-bit base model too)."""
    import pandas as pd
    from engine.estimate import estimate
    from planner.evidence import _adapter_bytes
    row = table.set_index("id").loc["qlora-paper-llama-7b-lora-params"]
    assert row["metric"] == "adapter_bytes" and row["kind"] == "estimate"
    # LLaMA 7B by hand: r=64 on q, k, v, o (4096 -> 4096) and gate, up, down (4096 <-> 11008), 32 layers
    per_layer = 4 * 64 * (4096 + 4096) + 3 * 64 * (4096 + 11008)
    assert row["estimate"] == pytest.approx(32 * per_layer * 2 / 1e6, abs=1e-3)  # bf16 adapters, MB
    sc = dict(model="llama-1-7b", task="train", method="qlora", precision="bf16", lora_rank=64, lora_targets="all",
              batch=1, seq=512, grad_checkpointing=True)
    out = estimate(pd.DataFrame([dict(sc, adapter_dtype="fp32"), dict(sc, adapter_dtype="bf16"),
                                 dict(sc, method="full")]), models, gpus)
    got = _adapter_bytes(out)
    assert got[0] == 32 * per_layer * 4 and got[1] == 32 * per_layer * 2  # peft's fp32 / bf16
    assert np.isnan(got[2])  # full fine-tuning has no adapters


def test_torchtune_8bit_adamw_row_is_torchaos_optimizer_and_saves_its_states(cat, table):
    """The README's '+ 8-bit AdamW' row runs torchao's AdamW8bit (its setup_note: bitsandbytes' paged
    states would not be in torch's statistics). Against the row before it (fused AdamW, bf16 states,
    every other switch the same) the estimate drops by exactly the states' difference, by hand from
    torchao's layout: Llama 3.2 3B's 3,212,749,824 values, 175,104 of them in norm weights of 3072."""
    refs = cat.references().set_index("id")
    ao, fused = (refs.loc[f"torchtune-llama32-3b-flags-{r}", "scenario"]
                 for r in ("adamw-8bit", "activation-offload"))
    assert ao["optimizer"] == "adamw_8bit_torchao" and fused["optimizer"] == "adamw_fused"
    assert {k: v for k, v in ao.items() if k != "optimizer"} == {k: v for k, v in fused.items() if k != "optimizer"}
    n, norms = 3_212_749_824, 175_104
    saving = n * 2 * 2 - ((n - norms) * (2 + 2 * 4 / 256) + norms * 2 * 2)  # bf16 exp_avg + exp_avg_sq -> 8-bit
    rows = table.set_index("id")
    drop = rows.loc["torchtune-llama32-3b-flags-activation-offload", "estimate"] - rows.loc[
        "torchtune-llama32-3b-flags-adamw-8bit", "estimate"]
    assert drop == pytest.approx(saving / 2**30, abs=1e-3)  # 5.890 GiB (estimates in GiB to 3 decimals)


# ---- issue 28: each memory figure on its own counter ---------------------------------------------

# the keys `evidence --json` had before issue 28 (a contract: every one stays, in this order)
OLD_JSON_KEYS = ("id", "kind", "metric", "reference", "estimate", "unit", "error_pct", "recipe", "explanation",
                 "model", "per_gpu", "within_10pct", "within_15pct", "source", "url", "setup_note", "estimate_note")
PHASES = ("forward", "loss_backward", "backward", "backward_end", "optimizer", "prefill", "logits", "attention")


def test_the_counters_are_the_engines_columns_taken_apart(models, gpus):
    """A hand-made one-GPU and a two-GPU (ZeRO-3) row: the tensors' peak is the largest phase; the
    reserved counter adds the allocator's fragmentation share and the cuBLAS workspace (both inside
    PyTorch's caching allocator) but not the CUDA context nor NCCL's buffers; the process counter is
    everything (engine/constants.py, engine/components.py runtime_overhead); both add the freed blocks
    the allocator still holds above the tensors' peak (allocator_cached_bytes)."""
    import pandas as pd
    import engine.constants as C
    from engine.estimate import estimate
    from planner.evidence import _metric_values, reserved_peak_bytes
    sc = dict(model="llama-3.2-3b", task="train", method="lora", precision="bf16", batch=4, seq=768, gpu="l40s")
    out = estimate(pd.DataFrame([dict(sc, gpus=1), dict(sc, method="full", gpus=2, zero=3)]), models, gpus)
    tensors = out[[f"{p}_phase_bytes" for p in PHASES]].max(axis=1, skipna=True).to_numpy()
    # the dropped bf16 logits' block (2 bytes x 4 x 768 tokens x Llama 3.2's 128,256 entries), reserved
    # at the loss backward: what it adds above the tensors' peak (tests/test_allocator_cache.py)
    cached = np.maximum(out["loss_backward_phase_bytes"].to_numpy() + 2.0 * 4 * 768 * 128_256 - tensors, 0.0)
    assert cached[0] > 0  # the loss backward is the LoRA row's peak
    reserved = tensors * (1 + C.FRAGMENTATION_FRACTION) + C.CUBLAS_WORKSPACE_BYTES
    np.testing.assert_allclose(reserved_peak_bytes(out), reserved + cached, rtol=1e-12)
    process = reserved + C.CUDA_CONTEXT_BYTES + np.array([0.0, C.NCCL_BYTES])
    np.testing.assert_allclose(out["peak_bytes"], process, rtol=1e-12)
    metrics = pd.Series(["allocated_peak_bytes", "reserved_peak_bytes"])
    np.testing.assert_allclose(_metric_values(out, metrics), [tensors[0], reserved[1] + cached[1]], rtol=1e-12)
    same = _metric_values(out, pd.Series(["process_peak_bytes", "peak_bytes"]))
    np.testing.assert_allclose(same, [out["peak_bytes"].iloc[0] + cached[0], out["peak_bytes"].iloc[1]], rtol=1e-12)
    # optimum's counter: torch's allocated peak (the cuBLAS workspace is an allocation) + what lives
    # outside PyTorch's reserve (the CUDA context, NCCL); no allocator cache
    ext = tensors + C.CUBLAS_WORKSPACE_BYTES + C.CUDA_CONTEXT_BYTES + np.array([0.0, C.NCCL_BYTES])
    np.testing.assert_allclose(_metric_values(out, pd.Series(["alloc_ext_peak_bytes"] * 2)), ext, rtol=1e-12)


def test_every_measured_memory_peak_names_its_counter(cat, table):
    from planner.evidence import COUNTERS, MEASURED_PEAK_METRICS, MEMORY_METRICS
    refs = cat.references()
    measured = refs[(refs["kind"] == "measured") & refs["metric"].isin(MEMORY_METRICS)]
    assert len(measured) >= 50
    # a measured peak says which counter it was read from; bare peak_bytes is for estimates and claims
    assert not (measured["metric"] == "peak_bytes").any(), list(measured.loc[measured["metric"] == "peak_bytes", "id"])
    assert set(MEASURED_PEAK_METRICS) <= set(measured["metric"])  # all three counters have real runs
    rows = table[table["metric"].isin(MEMORY_METRICS)]
    assert (rows["counter"] == rows["metric"].map(COUNTERS)).all() and (rows["counter"].str.len() > 0).all()
    assert (table["source_kind"] == "published").all()  # the shipped references; a user's runs say "user"
    # each new real run says where it came from and what our scenario could not express
    new = measured[measured["metric"].isin(("reserved_peak_bytes", "process_peak_bytes", "alloc_ext_peak_bytes"))]
    assert new["url"].str.startswith("https://").all() and (new["setup_note"].str.len() > 200).all()


def test_memory_hit_rate_and_worst_underestimate_are_counted_as_documented():
    import pandas as pd
    from planner.evidence import memory_hit_rate, memory_summary, worst_underestimate
    t = pd.DataFrame({"id": list("abcdef"), "kind": ["measured"] * 5 + ["claim"],
                      "metric": ["reserved_peak_bytes", "process_peak_bytes", "weights_bytes", "allocated_peak_bytes",
                                 "decode_tokens_per_s", "peak_bytes"],
                      "error_pct": [3.0, -12.0, -16.0, 15.0, -40.0, -90.0]})
    # memory figures of measured rows only: a, b, c, d (e is a speed, f a claim)
    assert memory_hit_rate(t) == (3, 4)
    assert worst_underestimate(t) == ("c", -16.0)
    assert memory_summary(t).startswith("measured memory figures within +-15%: 3 of 4 (75%); worst underestimate -16.0% (c), "
                                        "2 under by more than 10%;")  # b and c
    assert memory_summary(t).endswith("not met")
    assert worst_underestimate(t[t["error_pct"] >= 0]) == ("", 0.0)


def test_the_shipped_memory_figures_hit_rate(table):
    from planner.evidence import memory_hit_rate, memory_rows
    hits, total = memory_hit_rate(table)
    rows = memory_rows(table)
    assert total == len(rows) >= 54 and hits == int((rows["error_pct"].abs() <= 15).sum())
    # every figure outside the target (more than 15% off, or under by more than 10%) says why
    off = rows[(rows["error_pct"].abs() > 15) | (rows["error_pct"] < -10)]
    assert (off["explanation"].str.len() > 80).all(), list(off.loc[off["explanation"].str.len() <= 80, "id"])


def test_evidence_json_keeps_every_old_key_and_appends_the_counter():
    import json
    from planner.evidence import EVIDENCE_JSON_KEYS
    assert EVIDENCE_JSON_KEYS[:len(OLD_JSON_KEYS)] == OLD_JSON_KEYS
    assert EVIDENCE_JSON_KEYS[len(OLD_JSON_KEYS):] == ("counter", "source_kind", "safe_estimate")
    code, out, err = run("evidence", "--json")
    assert code == 0, err
    rows = json.loads(out)
    # (planner/cli.py's print_json adds schema_version after them)
    assert all(list(r)[:len(EVIDENCE_JSON_KEYS)] == list(EVIDENCE_JSON_KEYS) for r in rows)
    peft = next(r for r in rows if r["id"] == "peft-metamathqa-llama32-3b-lora-r32")
    assert peft["metric"] == "reserved_peak_bytes" and peft["counter"].startswith("torch.cuda.max_memory_reserved")


def test_readme_states_the_real_run_figures_the_code_computes():
    from catalog import default_catalog
    from planner.evidence import README_BEGIN, README_END, evidence_table, readme_sentence
    cat = default_catalog()
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    start = text.index(README_BEGIN) + len(README_BEGIN)
    assert text[start:text.index(README_END)] == readme_sentence(evidence_table(cat.references(), cat.models(), cat.gpus()))


def test_a_measured_run_is_never_called_fits_when_its_measured_peak_does_not_fit():
    """Issue 28's target: wherever a published run's measured memory per GPU is more than its GPU's
    usable memory (any counter: each is at most the whole process), our verdict for the same scenario is
    'does not fit'. Every published run here ran (none exceeds its card today: 0 of 53), so this guards the
    rows to come (new references, a user's own runs); the published runs that OOMed (Unsloth's context
    tables) are checked in tests/test_stacks.py."""
    import pandas as pd

    from catalog import default_catalog
    from engine import estimate
    from planner.evidence import UNIT_FACTORS, memory_rows
    cat = default_catalog()
    refs, gpus = cat.references(), cat.gpus()
    table = memory_rows(evidence_table(refs, cat.models(), gpus))
    chosen = refs.set_index("id").loc[table["id"]]
    scen = pd.DataFrame(list(chosen["scenario"]))
    has_gpu = scen.get("gpu", pd.Series("", index=scen.index)).fillna("").astype(str).ne("").to_numpy()
    per_gpu = chosen["per_gpu"].to_numpy(dtype=bool)
    keep = has_gpu & per_gpu
    assert keep.sum() >= 20
    scen = scen[keep].reset_index(drop=True)
    scen["allow_long_context"] = True
    scen["recipe"] = chosen["recipe"].fillna("hf").replace("", "hf").to_numpy()[keep]
    out = estimate(scen, cat.models(), gpus)
    measured = table["reference"].to_numpy()[keep] * table["unit"].map(UNIT_FACTORS).to_numpy(dtype=float)[keep]
    usable = out["usable_bytes"].to_numpy(dtype=float)
    over = measured > usable
    fits = out["fits"].to_numpy(dtype=bool, na_value=False)
    assert not (over & fits).any(), table["id"].to_numpy()[keep][over & fits]


# ---- issue 27: torchtitan's published runs and the MXFP4 checkpoints as files -------------------

def test_torchtitans_published_tables_are_all_in_on_the_reserved_counter(cat, table):
    """benchmarks/llama3_h100_202412_torchtitan.md: every row of tables 1-6 (3 + 4 + 3 + 2 + 2 + 4 = 18)
    and Trainy's two H200 rows, and (the seventh round) nvfp4.md's BF16 row and PR #996's two, each under the
    torchtitan recipe on max_reserved (torchtitan's reserved_bytes.all.peak). The 8B CP rows hold 32,768 tokens per GPU whatever cp (our estimate is the
    same in all four); the 405B rows name FSDP under a pipeline keeping the stage gathered (modelled since
    issue 27), and every row more than 15% off says why at length."""
    refs = cat.references().set_index("id")
    # (torchao's float8 benchmarks are torchtitan runs too: the same recipe and counter, checked below)
    torchao = table[table["id"].str.startswith("torchao-llama3-8b-")].set_index("id")
    assert len(torchao) == 7 and set(refs.loc[torchao.index, "recipe"]) == {"torchtitan"}
    assert set(torchao["metric"]) == {"reserved_peak_bytes"}
    assert (torchao.loc[torchao["error_pct"].abs() > 15, "explanation"].str.len() > 100).all()
    rows = table[table["id"].str.contains("torchtitan") & ~table["id"].str.startswith("torchao-")].set_index("id")
    assert len(rows) == 23
    later = ["torchtitan-nvfp4-doc-llama3-8b-bf16-fsdp4", "torchtitan-pr996-llama3-8b-8k-ce-fp32",
             "torchtitan-pr996-llama3-8b-8k-chunked-ce"]
    assert set(later) <= set(rows.index) and (rows.loc[later, "error_pct"].abs() <= 10).all()
    assert set(refs.loc[rows.index, "recipe"]) == {"torchtitan"} and set(rows["metric"]) == {"reserved_peak_bytes"}
    cp = [f"torchtitan-llama31-8b-cp{c}-{32 * c}k-8gpu" for c in (1, 2, 4, 8)]
    assert [refs.loc[r, "scenario"]["seq"] // refs.loc[r, "scenario"]["cp"] for r in cp] == [32768] * 4
    assert rows.loc[cp, "estimate"].nunique() == 1
    big = rows[rows["error_pct"].abs() > 15]
    assert (big["explanation"].str.len() > 200).all()
    pp = rows[rows.index.str.contains("405b")]
    assert len(pp) == 6 and refs.loc[pp.index, "explanation"].str.contains("reshard_after_forward").all()


def test_gpt_oss_mxfp4_files_are_their_layouts_bytes(table):
    """llama.cpp's MXFP4_MOE (experts MXFP4, the rest Q8_0) and Ollama's BF16 + MXFP4 GGUFs of gpt-oss,
    as their load logs print them, and vLLM's two loads of the MXFP4 checkpoint under `mxfp4`."""
    rows = table.set_index("id")
    for rid in ("llamacpp-gpt-oss-120b-mxfp4-moe-gguf-size", "ollama-gpt-oss-120b-mxfp4-bf16-gguf-size",
                "bartowski-gpt-oss-20b-mxfp4-gguf-size"):
        assert abs(rows.loc[rid, "error_pct"]) <= 1.0, rid
    vllm = rows.loc[["vllm-gpt-oss-120b-h100-weights-v0-14", "vllm-gpt-oss-120b-h100-weights-marlin"], "error_pct"]
    assert ((vllm < 0) & (vllm > -10)).all()  # vLLM pads the expert tensors for its kernels


def test_docs_state_the_fsdp1_rows_errors_the_code_computes(table):
    """docs/evidence.md's section on FSDP1's flat parameters quotes each of its ten rows' error after the change; the
    figures come from this table (python -m planner.evidence), so they cannot drift from the engine."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "evidence.md").read_text()
    section = text[text.index("## FSDP1's flat parameters"):]
    section = section[:section.index("\n## ")]
    err = table.set_index("id")["error_pct"]
    rows = {"dlrover full": [f"dlrover-atorch-llama2-7b-full-fsdp-{n}gpu" for n in (8, 16, 32, 64)],
            "dlrover LoRA": [f"dlrover-atorch-llama2-7b-lora-fsdp-{n}gpu" for n in (8, 16, 32, 64)],
            "llama-recipes PR #41": ["llama-recipes-pr41-llama2-7b-lora-fsdp4-active",
                                     "llama-recipes-pr41-llama2-7b-lora-fsdp4-reserved"]}
    for label, ids in rows.items():
        line = next(ln for ln in section.splitlines() if ln.startswith(f"| {label}"))
        after = line.rstrip(" |").rsplit("|", 1)[1]
        assert re.findall(r"-?\d+\.\d%", after) == [f"{err[i]:.1f}%" for i in ids], (label, after)


def test_docs_state_the_no_sync_rows_errors_the_code_computes(table):
    """docs/evidence.md's section on gradient accumulation under no_sync quotes its six rows' errors after the change."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "evidence.md").read_text()
    section = text[text.index("## Gradient accumulation under FSDP's no_sync"):]
    section = section[:section.index("\n## ")]
    err = table.set_index("id")["error_pct"]
    rows = {"LitGPT LoRA Llama 2 7B": [f"litgpt-rt-fsdp-llama2-7b-lora-mb{b}-2xa100-40gb" for b in (1, 2, 4)],
            "LitGPT LoRA Llama 2 13B": ["litgpt-rt-fsdp-llama2-13b-lora-mb1-4xa100-40gb"],
            "LitGPT config_hub": ["litgpt-hub-llama2-7b-full-4xa100", "litgpt-hub-gemma-2b-full-4xa10g"]}
    for label, ids in rows.items():
        line = next(ln for ln in section.splitlines() if ln.startswith(f"| {label}"))
        after = line.rstrip(" |").rsplit("|", 1)[1]
        assert re.findall(r"[-+]?\d+\.\d%", after) == [f"{err[i]:+.1f}%" for i in ids], (label, after)



def test_every_published_fsdp1_run_lies_under_its_safe_figure_on_its_own_counter(cat, table):
    """engine/margins.py FSDP1_RESERVE_HIGH_PCT: FSDP1's per-stream reserve is not in the point estimate (the
    reserved and active rows of llama-recipes are 24% to 29% under it), but the verdicts' safe figure takes it:
    every published run under `--flat-params on|mixed` but one (named below) lies at or under the estimate on its own
    counter plus the safe margin, and the same scenarios under FSDP2 (flat_params off) or DeepSpeed's ZeRO-3 get no such allowance."""
    import pandas as pd

    from engine import estimate
    from planner.evidence import UNIT_FACTORS
    refs = cat.references().set_index("id")
    ids = [rid for rid, r in refs.iterrows() if r["scenario"].get("flat_params") in ("on", "mixed")]
    assert len(ids) >= 27
    rows = refs.loc[ids]
    scen = pd.DataFrame(list(rows["scenario"])).assign(allow_long_context=True)
    scen["recipe"] = rows["recipe"].fillna("hf").replace("", "hf").to_numpy()
    out = estimate(scen, cat.models(), cat.gpus())
    margin = (out["safe_peak_bytes"] - out["peak_bytes"]).to_numpy()
    shown = table.set_index("id").loc[ids]
    factor = shown["unit"].map(UNIT_FACTORS).to_numpy(dtype=float)
    safe = shown["estimate"].to_numpy(dtype=float) * factor + margin
    reference = shown["reference"].to_numpy(dtype=float) * factor
    # but one: Answer.AI's 7B QLoRA at 1 x 512, whose reserved counter starts after FSDP1's init left 3.72 GiB
    # reserved before any batch (the doc's reserved_after_model_wrap, against the ~2.0 GiB of tensors), a loading
    # residue this allowance is not about (its explanation: not modelled)
    assert list(shown.index[safe < reference]) == ["answerai-llama2-7b-qlora-bs1-512-2x3090"]
    # the reserved / active rows the allowance is for are under the point estimate by more than 20%
    assert (shown.loc[shown.index.str.contains("reserved|active") & shown.index.str.startswith("llama-recipes-i"),
                      "error_pct"] < -20).all()
    off = estimate(scen.assign(flat_params="off"), cat.models(), cat.gpus())
    ds = estimate(scen.assign(recipe="deepspeed"), cat.models(), cat.gpus())
    tensors = (out["peak_bytes"] - out["runtime_overhead_bytes"]).to_numpy()
    assert ((off["safe_peak_bytes"] - off["peak_bytes"]).to_numpy() < 0.2 * tensors).all()
    assert ((ds["safe_peak_bytes"] - ds["peak_bytes"]).to_numpy() < 0.2 * (ds["peak_bytes"] - ds["runtime_overhead_bytes"])).all()


def test_the_safe_figure_is_the_verdicts_on_the_references_own_counter(cat, table):
    """safe_estimate (JSON key, the Evidence page's 'Ours, safe'): for a memory peak with a GPU, the estimate on the
    reference's counter plus what the verdicts add (safe_peak_bytes - peak_bytes of the same scenario), never below
    the estimate; NaN for every other metric and where no GPU is named. The README's count of the figures under by
    more than 10% that it still covers is this column's."""
    from planner.evidence import PEAK_METRICS, memory_rows, memory_summary
    refs = cat.references().set_index("id")
    has_gpu = [bool(refs.loc[i, "scenario"].get("gpu")) for i in table["id"]]
    peak = table["metric"].isin(PEAK_METRICS).to_numpy()
    safe, est = table["safe_estimate"].astype(float), table["estimate"].astype(float)
    assert safe[~peak].isna().all()
    with_safe = peak & np.array(has_gpu) & est.notna().to_numpy()
    assert with_safe.sum() >= 150 and safe[with_safe].notna().all()
    assert (safe[with_safe] >= est[with_safe] - 1e-9).all()
    # one row by hand: llama-recipes #120's reserved figure, 44.89 GiB estimated, takes FSDP1's reserve
    row = table.set_index("id").loc["llama-recipes-i120-llama2-70b-fsdp16-reserved"]
    assert row["estimate"] < row["reference"] <= row["safe_estimate"]
    far = memory_rows(table)
    far = far[far["error_pct"] < -10]
    covered = int((far["safe_estimate"] >= far["reference"]).sum())
    assert f"{len(far)} under by more than 10% ({covered} of them at or under the safe figure" in memory_summary(table)
