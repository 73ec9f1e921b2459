"""serve --engine mlx-lm (Apple silicon, MLX): its memory against hand-computed figures from the constants read in
ml-explore/mlx-lm (d78bf58e) and ml-explore/mlx (846d1762), its refusals, its command and its speed evidence.

Expected values are computed here from the published configs (catalog/models.yaml) and the sources engine/serving.py
cites (mlx_lm/utils.py quantize_model, mlx/ops.cpp affine_quantize, mlx_lm/models/cache.py KVCache and
QuantizedKVCache, mlx_lm/server.py's defaults), not read back from its columns."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from benchmarks.serving_accuracy import fit
from catalog.serving_data import load_measurements
from engine import serving as S
from planner.serving import SERVE_JSON_KEYS, cheapest
from tests.clirun import run_cli

MAC = "apple-m4-max-128gb"  # 128 GB unified memory; the GPU's share 3/4 (recommendedMaxWorkingSetSize): 96 GiB
LLAMA31_8B_PARAMS = 8_030_261_248
# Llama 3.1 8B: 32 layers, 8 KV heads of 128: K and V values a token; one layer's transient working set a token
# (2 x (3 ffn + (q + 2 kv heads) x d + 4 h) bytes at 16 bits: the per-token activation every engine's prefill uses)
KV_VALUES = 2 * 32 * 8 * 128
ACT_PER_TOKEN = 2 * (3 * 14336 + (32 + 2 * 8) * 128 + 4 * 4096)


def serve(models, gpus, **kw):
    req = {"model": "llama-3.1-8b", "gpu": MAC, "engine": "mlx-lm", "precision": "mlx-4bit", "max_model_len": 8192, **kw}
    return S.serve(pd.DataFrame([req]), models, gpus).iloc[0]


@pytest.mark.parametrize("precision, bits", [("mlx-4bit", 4 + 32 / 64), ("mlx-8bit", 8 + 32 / 64), ("mlx-3bit", 3.5),
                                             ("mlx-6bit", 6.5), ("mlx-mxfp4", 4 + 8 / 32), ("bf16", 16), ("fp16", 16)])
def test_weights_are_every_parameter_at_the_formats_bits_with_group_scales(models, gpus, precision, bits):
    """quantize_model's defaults (affine: group 64, 4 bits; mxfp4: group 32) quantize every Linear and the Embedding
    (the head too); affine groups keep a 16-bit scale and bias (32 bits a group), mxfp4 a uint8 scale per 32."""
    row = serve(models, gpus, precision=precision)
    assert row.weights_bytes == pytest.approx(LLAMA31_8B_PARAMS * bits / 8, rel=1e-12)
    assert row.weights_gpu_bytes == row.weights_bytes and row.non_torch_bytes == 0  # one device, no CUDA context


def test_the_server_budget_is_the_wired_share_less_weights_and_one_prefill_batch(models, gpus):
    """mlx_lm.server wires max_recommended_working_set_size (3/4 of 128 GiB); its BatchGenerator prefills up to 8
    prompts (--prompt-concurrency) x 2,048 tokens (--prefill-step-size) a forward; KVCache grows in 256-token steps of
    16-bit K/V; at most 32 sequences decode at once (--decode-concurrency)."""
    row = serve(models, gpus)
    usable = 128 * 2**30 * 0.75
    weights = LLAMA31_8B_PARAMS * 4.5 / 8
    activation = 8 * 2048 * ACT_PER_TOKEN
    request = KV_VALUES * 2 * 8192  # 8,192 is 32 steps of 256
    assert row.usable_bytes == usable and row.activation_peak_bytes == activation == 2 * 2**30
    assert row.kv_bytes_per_token == KV_VALUES * 2 and row.kv_request_bytes == request
    assert row.kv_cache_bytes_available == pytest.approx(usable - weights - activation, rel=1e-12)
    assert row.max_concurrency == min(math.floor((usable - weights - activation) / request), 32) == 32
    assert row.max_num_seqs == 32 and np.isnan(row.kv_cache_bytes_allocated)  # (its cache grows; none set aside)
    # 1,000 tokens take 4 steps of 256 (1,024), and the prefill batch is 8 prompts of 1,000
    short = serve(models, gpus, max_model_len=1000)
    assert short.kv_request_bytes == KV_VALUES * 2 * 1024 and short.activation_peak_bytes == 8 * 1000 * ACT_PER_TOKEN


def test_a_quantized_cache_is_mlx_lm_generate_with_kv_bits(models, gpus):
    """QuantizedKVCache(group_size=64, bits=B): B-bit values and a 16-bit scale and bias per 64 (B / 8 + 4 / 64 bytes a
    value); mlx_lm.generate runs one sequence (the server has no --kv-bits), so one prompt's prefill."""
    q8, q4 = (serve(models, gpus, kv_precision=kv) for kv in ("int8", "int4"))
    assert q8.kv_bytes_per_token == KV_VALUES * (1 + 4 / 64) == 69632
    assert q4.kv_bytes_per_token == KV_VALUES * (0.5 + 4 / 64)
    assert q8.max_num_seqs == 1 and q8.max_concurrency == 1 and q8.activation_peak_bytes == 2048 * ACT_PER_TOKEN
    assert q8.command == ("mlx_lm.generate --model mlx-community/Llama-3.1-8B-4bit --kv-bits 8 --kv-group-size 64 "
                          "--max-tokens 128 --prompt -")
    with pytest.raises(ValueError, match="max_num_seqs 4 is not accepted for mlx-lm with kv_precision 'int8'.*accepted: 1"):
        serve(models, gpus, kv_precision="int8", max_num_seqs=4)


def test_a_plan_that_does_not_fit_the_wired_share(models, gpus):
    """Llama 3 70B in bf16 (141 GB) on a 128 GB M4 Max: beyond its 96 GiB share (the M2 Ultra of 192 GB holds it)."""
    row = serve(models, gpus, model="llama-3-70b", precision="bf16")
    assert not row.fits and row.max_concurrency == 0
    assert serve(models, gpus, model="llama-3-70b", precision="bf16", gpu="apple-m2-ultra-192gb").fits


@pytest.mark.parametrize("precision, command", [
    ("mlx-4bit", "mlx_lm.server --model mlx-community/Llama-3.1-8B-4bit --decode-concurrency 32 --prefill-step-size 2048"),
    ("mlx-8bit", "mlx_lm.server --model mlx-community/Llama-3.1-8B-8bit --decode-concurrency 32 --prefill-step-size 2048"),
    ("bf16", "mlx_lm.server --model meta-llama/Llama-3.1-8B --decode-concurrency 32 --prefill-step-size 2048"),
    ("mlx-3bit", "mlx_lm.convert --hf-path meta-llama/Llama-3.1-8B -q --q-bits 3 --mlx-path Llama-3.1-8B-3bit && "
                 "mlx_lm.server --model Llama-3.1-8B-3bit --decode-concurrency 32 --prefill-step-size 2048"),
    ("mlx-mxfp4", "mlx_lm.convert --hf-path meta-llama/Llama-3.1-8B -q --q-mode mxfp4 --mlx-path Llama-3.1-8B-mxfp4 && "
                  "mlx_lm.server --model Llama-3.1-8B-mxfp4 --decode-concurrency 32 --prefill-step-size 2048"),
])
def test_command_names_mlx_community_only_where_that_naming_is_documented(models, gpus, precision, command):
    """mlx-community/<Name>-4bit / -8bit (mlx-lm README, BENCHMARKS.md); bf16 from the model's own repository
    (BENCHMARKS.md's bf16 row); 3-bit and mxfp4 the user's own mlx_lm.convert output."""
    assert serve(models, gpus, precision=precision).command == command


def test_mlx_lm_is_refused_on_a_gpu_that_is_not_apple():
    code, out, err = run_cli("serve", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "mlx-lm",
                             "--max-model-len", "8192")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert ("engine 'mlx-lm' is not accepted on gpu 'rtx-4090' (nvidia); accepted: Apple GPUs (MLX's Metal backend, "
            "whose wired memory limit is modelled here)") in err


@pytest.mark.parametrize("args, message", [
    (("--engine", "mlx-lm", "--precision", "q4_k_m"), "precision 'q4_k_m' is not accepted for mlx-lm; accepted: mlx-4bit, "
                                                      "mlx-8bit"),
    (("--engine", "mlx-lm", "--precision", "int4"), "precision 'int4' is not accepted for mlx-lm"),
    (("--engine", "mlx-lm", "--kv-precision", "fp8"), "kv-precision 'fp8' is not accepted for mlx-lm; accepted: auto, "
                                                      "fp16, bf16, int8, int4"),
    (("--engine", "mlx-lm", "--gpu-memory-utilization", "0.8"), "gpu-memory-utilization"),
    (("--engine", "llama.cpp", "--precision", "mlx-4bit"), "precision 'mlx-4bit' is not accepted"),
])
def test_mlx_lm_refuses_what_it_does_not_run(args, message):
    code, out, err = run_cli("serve", "--model", "llama-3.1-8b", "--gpu", MAC, "--max-model-len", "8192", *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err


def test_vllm_refuses_mlx_formats(models, gpus):
    with pytest.raises(ValueError, match="precision 'mlx-4bit' is not accepted for engine 'vllm'; accepted: --engine mlx-lm"):
        S.serve(pd.DataFrame([{"model": "llama-3.1-8b", "gpu": "h100-sxm-80gb", "engine": "vllm", "precision": "mlx-4bit",
                               "max_model_len": 4096}]), models, gpus)


def test_json_keys_are_the_contracts_and_the_default_weights_are_4bit():
    """--json under mlx-lm adds no key and renames none (SERVE_JSON_KEYS); without --precision: mlx_lm.convert -q's
    default, 4 bits."""
    code, out, err = run_cli("serve", "--model", "llama-3.1-8b", "--gpu", MAC, "--engine", "mlx-lm", "--max-model-len",
                             "8192", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert list(data) == [*SERVE_JSON_KEYS, "schema_version"]
    assert data["precision"] == "mlx-4bit" and data["engine"] == "mlx-lm" and data["kv_cache_bytes_allocated"] is None
    assert data["speed_basis"] == "fitted: mlx-lm BENCHMARKS.md runs (M4 Max)"


def test_cheapest_keeps_mlx_formats_with_mlx_lm_and_apple_cards(models, gpus):
    best = cheapest("llama-3.1-8b", 1, 8192, 5.0, 60.0, models, gpus, engines=("mlx-lm", "llama.cpp"),
                    precisions=("mlx-4bit", "q4_k_m", "bf16"), gpu_ids=[MAC, "rtx-4090"], tp_choices=(1,))
    pairs = set(zip(best["engine"], best["precision"], best["gpu"]))
    assert ("mlx-lm", "mlx-4bit", MAC) in pairs and ("mlx-lm", "bf16", MAC) in pairs
    assert not any(e == "mlx-lm" and g != MAC for e, _, g in pairs)
    assert not any(e != "mlx-lm" and p.startswith("mlx-") for e, p, _ in pairs)


# --- speed: fitted on BENCHMARKS.md's M4 Max rows, checked on the rest ---------------------------------------------

def test_mlx_evidence_rows_have_sources_and_a_fit_and_holdout_split():
    meas = load_measurements()
    mlx = meas[meas["engine"] == "mlx-lm"]
    assert (mlx["role"] == "fit").sum() == 4 and (mlx["role"] == "holdout").sum() >= 10
    assert mlx["url"].str.startswith("https://github.com/ml-explore/").all() and mlx["date"].notna().all()
    assert set(mlx["gpu_family"]) == {"apple"} and (mlx["source"].str.len() > 40).all()
    fitted = fit(meas)
    assert S.DECODE_EFFICIENCY[("mlx-lm", "apple")] == pytest.approx(fitted["efficiency_mlx-lm"], rel=0.01)
    assert S.LAYER_OVERHEAD_S["mlx-lm"] == pytest.approx(fitted["layer_overhead_mlx-lm"], rel=0.01)
    assert S.PREFILL_MFU["mlx-lm"] == pytest.approx(fitted["prefill_mfu_mlx-lm"], rel=0.01)
    assert S.MOE_EXPERT_EFFICIENCY[("mlx-lm", "apple")] == pytest.approx(fitted["moe_expert_efficiency_mlx-lm"], rel=0.01)


def test_the_moe_rows_held_out_of_the_experts_share_are_within_15_percent():
    """mlx-lm read an MoE's routed experts at its dense efficiency: BENCHMARKS.md's Qwen3-30B-A3B rows came out +21 to
    +30% fast. Their share (MOE_EXPERT_EFFICIENCY, fitted on the 4-bit row alone) puts the 8/6/5-bit rows within 15%."""
    from planner.serving_evidence import serving_evidence_table
    ev = serving_evidence_table()
    moe = ev[(ev["engine"] == "mlx-lm") & (ev["model"] == "qwen3-30b-a3b") & (ev["role"] == "holdout")]
    assert len(moe) == 3 and (moe["error_pct"].abs() < 15).all(), moe[["id", "error_pct"]]


def test_serve_reproduces_a_fit_row_and_a_held_out_row(models, gpus):
    """BENCHMARKS.md, 64 GB M4 Max (546 GB/s, as the catalog's 128 GB one): Qwen3-4B 4-bit 134.52 tok/s (fit) and 8-bit
    86.907 (held out) after a 2,048-token prompt, 128 generated."""
    rows = [{"model": "qwen3-4b", "gpu": MAC, "engine": "mlx-lm", "precision": p, "max_model_len": 4096, "concurrency": 1,
             "prompt_tokens": 2048, "output_tokens": 128} for p in ("mlx-4bit", "mlx-8bit")]
    q4, q8 = (r for _, r in S.serve(pd.DataFrame(rows), models, gpus).iterrows())
    assert q4.decode_tokens_per_s == pytest.approx(134.52, rel=0.01)
    assert q8.decode_tokens_per_s == pytest.approx(86.907, rel=0.02)


def test_docs_state_the_mlx_constants_and_split():
    from pathlib import Path
    doc = " ".join((Path(__file__).resolve().parent.parent / "docs" / "serving.md").read_text(encoding="utf-8").split())
    assert (f"| mlx-lm (Apple, Metal) | {S.DECODE_EFFICIENCY[('mlx-lm', 'apple')]:.3f} | "
            f"{S.LAYER_OVERHEAD_S['mlx-lm'] * 1e6:.1f} us") in doc
    assert "--engine mlx-lm" in doc and "iogpu.wired_limit_mb" in doc


def test_a_community_conversion_is_said_to_be_named_by_convention_with_the_convert_command_beside_it():
    """mlx-community names a conversion after its source repository's name at the time (Meta-Llama-3.1-8B-4bit from the
    repository's older name): the named repository may not exist, so the text gives the conversion that always runs."""
    code, out, err = run_cli("serve", "--model", "llama-3.1-8b", "--gpu", MAC, "--engine", "mlx-lm", "--max-model-len", "8192")
    assert code == 0, err
    assert "--model mlx-community/Llama-3.1-8B-4bit" in out
    assert ("convert it yourself: mlx_lm.convert --hf-path meta-llama/Llama-3.1-8B -q --q-bits 4 --mlx-path "
            "Llama-3.1-8B-4bit, then --model Llama-3.1-8B-4bit") in out
    code, out, err = run_cli("serve", "--model", "qwen3-4b", "--gpu", MAC, "--engine", "mlx-lm", "--max-model-len", "8192",
                             "--precision", "bf16")
    assert code == 0 and "convert it yourself" not in out  # (the model's own repository: nothing to convert)


def test_a_format_mlx_lm_does_not_run_is_refused_naming_the_formats_it_does():
    """--precision fp8 with mlx-lm named the engines that run fp8 only; an MLX user is told mlx-lm's own formats too."""
    code, out, err = run_cli("serve", "--model", "qwen3-4b", "--gpu", MAC, "--engine", "mlx-lm", "--max-model-len", "8192",
                             "--precision", "fp8")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.strip().endswith("; mlx-lm takes " + ", ".join(S.MLX_BITS)), err


def test_a_mixture_of_experts_reads_its_experts_at_the_formats_bits():
    """serve counted an MoE's experts at 16 bits under mlx-lm (and MLC-LLM): more than the whole 4-bit file, so a step
    read 'negative' bytes and the speed was the compute ceiling. Qwen3-30B-A3B 4-bit on the M4 Max decoded at 263.6
    tok/s at one request; BENCHMARKS.md's M4 Max measured 113.33 after a 2,048-token prompt (the row that sets mlx-lm's
    MoE expert share: serve's own figure follows it, 109.0)."""
    code, out, err = run_cli("serve", "--model", "qwen3-30b-a3b", "--gpu", MAC, "--engine", "mlx-lm", "--max-model-len",
                             "4096", "--concurrency", "1", "--prompt-tokens", "2048", "--json")
    assert code == 0, err
    decode = json.loads(out)["decode_tokens_per_s"]
    assert abs(decode / 113.33 - 1.0) < 0.10, decode
