"""Speed and cost (engine/speed.py): published throughput, roofline limits, cost arithmetic.

Every expected value here is worked out by hand from the catalog's figures and the formulas
in engine/speed.py's docstring, or taken from a publication; none is produced by the engine.
"""

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import estimate
from engine.speed import add_speed_cost
from tests.conftest import ROOT

GB = 1e9


def one(model_table, gpu_table, **scenario):
    return estimate(pd.DataFrame([scenario]), model_table, gpu_table).iloc[0]


def gpu_row(gpus, gpu_id):
    return gpus.set_index("id").loc[gpu_id]


# ---- training time: the LLaMA paper -----------------------------------------------------------

# LLaMA paper (Touvron et al. 2023), Table 15: A100-80GB GPU-hours to pre-train each model;
# tokens from section 2 (1.0T for 7B and 13B, 1.4T for 33B and 65B).
LLAMA_GPU_HOURS = {
    "llama-1-7b": (1.0e12, 82_432),
    "llama-1-13b": (1.0e12, 135_168),
    "llama-1-33b": (1.4e12, 530_432),
    "llama-1-65b": (1.4e12, 1_022_362),
}
# One MFU for all four: 0.49, from the same paper's "around 380 tokens/sec/GPU" for 65B
# (section 2.4). LLaMA saved the outputs of linear layers instead of recomputing them, so the
# matmul FLOPs are those of plain training: no gradient-checkpointing recomputation.
LLAMA_MFU = 0.49


def test_llama_paper_gpu_hours_within_15_percent_at_one_mfu(models, gpus):
    rows = [dict(model=m, task="train", method="full", precision="amp_bf16", seq=2048, batch=1,
                 grad_checkpointing=False, gpu="a100-80gb-sxm", tokens=t, mfu=LLAMA_MFU)
            for m, (t, _) in LLAMA_GPU_HOURS.items()]
    result = estimate(pd.DataFrame(rows), models, gpus)
    for (model, (tokens, published)), got in zip(LLAMA_GPU_HOURS.items(), result["gpu_hours"]):
        assert abs(got / published - 1) <= 0.15, (model, got, published)
    # 7B by hand: 6N + 6 * layers * seq * hidden FLOPs per token, at 312 TFLOPS x 0.49
    flops_7b = 1.0e12 * (6 * 6_738_415_616 + 6 * 32 * 2048 * 4096)
    assert result["train_flops"].iloc[0] == pytest.approx(flops_7b, rel=1e-12)
    assert result["gpu_hours"].iloc[0] == pytest.approx(flops_7b / (312e12 * 0.49) / 3600, rel=1e-12)


def test_llama_references_get_an_estimate_on_the_evidence_page(cat, models, gpus):
    from planner.evidence import evidence_table
    table = evidence_table(cat.references(), models, gpus)
    llama = table[table["id"].str.startswith("llama-paper-")]
    assert len(llama) == 4
    assert np.isfinite(llama["estimate"].to_numpy(dtype=float)).all()


def test_training_flops_per_method_by_hand(models, gpus):
    # Llama 2 7B: N = 6,738,415,616, 32 layers, hidden 4096 (= 32 heads x 128), vocab 32000.
    N, L, h, V, s, tokens = 6_738_415_616, 32, 4096, 32_000, 1024, 1e9
    attn = L * s * h
    lora_T = L * 8 * (4096 + 4096) * 2  # rank 8 on q_proj and v_proj: r x (in + out) each
    layer = 4 * h * h + 3 * h * 11008 + 2 * h  # q, k, v, o + MLP + two norms
    base = dict(model="llama-2-7b", task="train", seq=s, tokens=tokens, gpu="h100-sxm-80gb")
    cases = [
        (dict(method="full"), 6 * N + 6 * attn),
        (dict(method="full", grad_checkpointing=True), 8 * N + 8 * attn),
        (dict(method="lora"), 4 * N + 6 * lora_T + 6 * attn),
        (dict(method="lora", grad_checkpointing=True), 6 * N + 8 * lora_T + 8 * attn),
        (dict(method="qlora"), 4 * N + 6 * lora_T + 6 * attn),
        (dict(method="freeze", freeze_layers=2), 2 * N + 2 * V * h + 4 * 2 * layer + 2 * attn + 4 * 2 * s * h),
    ]
    result = estimate(pd.DataFrame([{**base, **c} for c, _ in cases]), models, gpus)
    for (case, per_token), got in zip(cases, result["train_flops"]):
        assert got == pytest.approx(tokens * per_token, rel=1e-12), case
    # frozen bases cost less than full fine-tuning, recomputation costs more
    f = result["train_flops"].to_numpy()
    assert f[2] < f[0] < f[1] and f[5] < f[2]


# ---- decode ------------------------------------------------------------------------------------

def test_27b_q4_k_m_decode_on_rtx_4090_is_near_the_measured_40_tokens_per_s(models, gpus):
    # A Llama-shaped 27B model with Gemma 3 27B's sizes: hidden 5376, MLP 21504, 62 layers,
    # 32 query heads and 16 KV heads of 128, 262,144-token vocabulary, tied embeddings.
    h, f, L, a, kv, d, V = 5376, 21504, 62, 32, 16, 128, 262_144
    layer = h * a * d + 2 * h * kv * d + a * d * h + 3 * h * f + 2 * h
    params = L * layer + V * h + h  # = 27,008,319,744
    assert params == 27_008_319_744
    row = dict(id="test-27b", name="27B test model", family="test", hidden_size=h, intermediate_size=f,
               num_layers=L, num_heads=a, num_kv_heads=kv, head_dim=d, vocab_size=V, max_context=8192,
               tied_embeddings=True, params=params, release_date="2025-03", source="test", notes="")
    table = pd.concat([models, pd.DataFrame([row])], ignore_index=True)
    # llama-bench's tg128 generates with an almost empty context: seq 512
    got = one(table, gpus, model="test-27b", task="infer", precision="q4_k_m", batch=1, seq=512, gpu="rtx-4090")
    # measured: ~40 tokens/s (llmfit PR #137: a 27B Q4_K_M on an RTX 4090)
    assert got["bound"] == "memory"
    assert 40 * 0.85 <= got["decode_tokens_per_s"] <= 40 * 1.15, got["decode_tokens_per_s"]
    # weights: 4.8944 bits per weight (llama.cpp quantize README) = 16.52 GB; KV 2 x 62 x 2048 x 2 B x 512
    read = params * 4.8944 / 8 + 2 * L * kv * d * 2 * 512
    assert got["decode_tokens_per_s"] == pytest.approx(1008 * GB * 0.65 / read, rel=1e-9)


def test_cli_llama_2_7b_fp16_on_rtx_4090_is_below_the_bandwidth_ceiling():
    proc = subprocess.run([sys.executable, "-m", "engine", "estimate", "--model", "llama-2-7b", "--task", "infer",
                           "--precision", "fp16", "--gpu", "rtx-4090", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    ceiling = 1008e9 / 13_476_831_232  # 1,008 GB/s over 13.48 GB of fp16 weights = 74.8
    assert ceiling / 2 < data["decode_tokens_per_s"] < ceiling
    for key in ("decode_tokens_per_s", "aggregate_tokens_per_s", "prefill_s", "bound", "usd_per_million_tokens",
                "train_flops", "train_hours", "gpu_hours", "cloud_cost_usd", "purchase_usd", "breakeven_months"):
        assert key in data, key
    assert data["bound"] == "memory" and data["purchase_usd"] == 1599
    assert data["train_hours"] is None  # an inference row has no training time


def test_cli_text_output_and_training_flags():
    proc = subprocess.run([sys.executable, "-m", "engine", "estimate", "--model", "llama-2-7b", "--task", "train",
                           "--method", "lora", "--gpu", "a100-80gb-sxm", "--tokens", "1e8", "--mfu", "0.4"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # by hand: (4N + 6T + 6 L s h) x 1e8 tokens at 312 TFLOPS x 0.4
    N, T = 6_738_415_616, 4_194_304
    hours = 1e8 * (4 * N + 6 * T + 6 * 32 * 2048 * 4096) / (312e12 * 0.4) / 3600
    assert f"{hours:,.2f} h on 1 GPU(s)" in proc.stdout
    assert "breaks even after" in proc.stdout


@pytest.mark.parametrize("flag, value, words", [
    # the CLI names its own flag and the range a real system has (planner/cli.py bounds every number flag)
    ("--mfu", "1.5", ["mfu", "1.5", "<= 1"]),
    ("--mfu", "1e-300", ["mfu", "1e-300", ">= 0.001"]),
    ("--tokens", "0", ["tokens", "0", ">= 1"]),
    ("--tokens", "lots", ["tokens", "lots"]),
    ("--bandwidth-efficiency", "0", ["bandwidth-efficiency", ">= 0.001"]),
    ("--utilization", "2", ["utilization", "2"]),
    ("--usd-per-kwh", "-0.1", ["usd-per-kwh", "-0.1", ">= 0"]),
    ("--context-mib", "1e308", ["context-mib", "1e308", "<= 65536"]),
    ("--prompt-tokens", "9000", ["prompt_tokens", "9,000", "seq"]),
])
def test_bad_speed_settings_exit_2_with_one_line(flag, value, words):
    proc = subprocess.run([sys.executable, "-m", "engine", "estimate", "--model", "llama-2-7b", "--task", "infer",
                           "--gpu", "rtx-4090", flag, value], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_bad_setting_columns_raise_one_clear_value_error(models, gpus):
    base = dict(model="llama-2-7b", task="infer", gpu="rtx-4090")
    with pytest.raises(ValueError, match=r"mfu 0 is not accepted; accepted: a fraction >= 0.001 and <= 1"):
        estimate(pd.DataFrame([{**base, "mfu": 0.3}, {**base, "mfu": 0}]), models, gpus)
    with pytest.raises(ValueError, match="hours_per_month 'often'"):
        estimate(pd.DataFrame([{**base, "hours_per_month": "often"}]), models, gpus)
    # a missing cell falls back to the default; a text number is read as a number
    got = estimate(pd.DataFrame([{**base, "mfu": None}, {**base, "mfu": "0.3"}]), models, gpus)
    assert got["mfu"].tolist() == [0.49, 0.3]


def test_decode_turns_compute_bound_at_large_batch(models, gpus):
    # short contexts, so that the KV cache read stays small beside the weights
    small = one(models, gpus, model="llama-2-7b", task="infer", precision="fp16", batch=1, seq=16, gpu="h100-sxm-80gb")
    large = one(models, gpus, model="llama-2-7b", task="infer", precision="fp16", batch=512, seq=16, gpu="h100-sxm-80gb")
    assert small["bound"] == "memory" and large["bound"] == "compute"
    # compute-bound by hand: 512 x (2N + 4 L s h) FLOPs per step at 989 TFLOPS x 0.49
    step = 512 * (2 * 6_738_415_616 + 4 * 32 * 16 * 4096) / (989e12 * 0.49)
    assert large["decode_tokens_per_s"] == pytest.approx(1 / step, rel=1e-9)
    assert large["aggregate_tokens_per_s"] == pytest.approx(512 / step, rel=1e-9)
    assert large["aggregate_tokens_per_s"] > small["aggregate_tokens_per_s"]


def test_tensor_parallel_decode_adds_the_all_reduce_time(models, gpus):
    g = gpu_row(gpus, "h100-sxm-80gb")
    one_gpu = one(models, gpus, model="llama-2-13b", task="infer", precision="bf16", batch=8, seq=1024, gpu="h100-sxm-80gb")
    two = one(models, gpus, model="llama-2-13b", task="infer", precision="bf16", batch=8, seq=1024, gpu="h100-sxm-80gb",
              gpus=2, tp=2)
    # by hand: memory time of half the weights and half the KV, plus 40 layers x 2 all-reduces of
    # 8 x 5120 x 2 B, ring factor 2(2-1)/2 = 1, over one direction of NVLink (900/2 GB/s) + 6 us each
    mem = (two["weights_bytes"] + two["kv_cache_bytes"]) / (g["bandwidth_gbps"] * GB * 0.65)
    comm = 40 * 2 * (6e-6 + 1 * 8 * 5120 * 2 / (g["interconnect_gbps"] * GB / 2))
    assert two["decode_tokens_per_s"] == pytest.approx(1 / (mem + comm), rel=1e-9)
    assert one_gpu["decode_tokens_per_s"] < two["decode_tokens_per_s"] < 2 * one_gpu["decode_tokens_per_s"]


def test_prefill_time_by_hand(models, gpus):
    got = one(models, gpus, model="llama-2-7b", task="infer", precision="fp16", batch=2, seq=2048,
              prompt_tokens=512, gpu="rtx-4090")
    p = 512
    compute = 2 * (2 * 6_738_415_616 * p + 2 * 32 * p * p * 4096) / (165.2e12 * 0.49)
    memory = (13_476_831_232 + got["kv_cache_bytes"] * p / 2048) / (1008 * GB * 0.65)
    assert compute > memory
    assert got["prefill_s"] == pytest.approx(compute, rel=1e-9)


@st.composite
def decode_scenarios(draw):
    model = draw(st.sampled_from(["llama-3.2-1b", "llama-2-7b", "llama-3-8b", "llama-2-13b", "llama-2-70b"]))
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    pp = draw(st.sampled_from([1, 1, 2]))
    return {
        "model": model, "task": "infer",
        "precision": draw(st.sampled_from(["fp32", "bf16", "fp16", "int8", "int4", "nf4", "q8_0", "q4_k_m", "q2_k"])),
        "kv_precision": draw(st.sampled_from(["auto", "fp8", "int4"])),
        "batch": draw(st.integers(1, 512)), "seq": draw(st.integers(1, 4096)),
        "tp": tp, "pp": pp, "gpus": tp * pp * draw(st.sampled_from([1, 3])),
        "gpu": draw(st.sampled_from(["rtx-3060-12gb", "rtx-4090", "a100-80gb-sxm", "h100-sxm-80gb", "mi300x",
                                     "apple-m3-ultra-96gb", "b200-180gb"])),
        "bandwidth_efficiency": draw(st.floats(0.05, 1.0)), "mfu": draw(st.floats(0.05, 1.0)),
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sc=decode_scenarios())
def test_decode_never_beats_the_memory_bandwidth_ceiling(models, gpus, sc):
    got = one(models, gpus, **sc)
    bandwidth = gpu_row(gpus, sc["gpu"])["bandwidth_gbps"] * GB
    # every step reads each pipeline stage's weights shard and the batch's KV cache once
    read = got["weights_bytes"] * sc["pp"] + got["kv_cache_bytes"]
    assert got["decode_tokens_per_s"] * read <= bandwidth * (1 + 1e-12)
    assert got["aggregate_tokens_per_s"] * read <= bandwidth * sc["batch"] * sc["gpus"] / (sc["tp"] * sc["pp"]) * (1 + 1e-12)
    assert got["prefill_s"] > 0 and got["bound"] in ("memory", "compute")


# ---- costs -------------------------------------------------------------------------------------

def test_breakeven_is_finite_when_renting_costs_more_than_power_and_inf_otherwise(models, gpus):
    g = gpu_row(gpus, "rtx-4090")  # $1,599, 450 W, $0.69 per GPU-hour
    base = dict(model="llama-2-7b", task="infer", precision="fp16", gpu="rtx-4090", gpus=2, tp=2)
    cheap = one(models, gpus, **base, usd_per_kwh=0.13)
    dear = one(models, gpus, **base, usd_per_kwh=2.0)  # 0.45 kW x $2 = $0.90/h > $0.69/h rent
    saving_per_month = (g["cloud_usd_per_hour"] - 0.45 * 0.13) * 2 * 730
    assert cheap["breakeven_months"] == pytest.approx(2 * g["price_usd"] / saving_per_month, rel=1e-12)
    assert math.isfinite(cheap["breakeven_months"])
    assert dear["breakeven_months"] == math.inf


def test_costs_scale_linearly_with_gpus_tokens_hours_and_use(models, gpus):
    base = dict(model="llama-2-13b", task="train", method="full", precision="bf16", zero=3, gpu="a100-80gb-sxm",
                tokens=2e9)
    r = estimate(pd.DataFrame([
        {**base, "gpus": 4},
        {**base, "gpus": 8},
        {**base, "gpus": 4, "tokens": 4e9},
        {**base, "gpus": 4, "hours_per_month": 365},
        {**base, "gpus": 4, "utilization": 0.5},
    ]), models, gpus)
    four, eight, twice, half_month, half_use = (r.iloc[i] for i in range(5))
    assert eight["purchase_usd"] == 2 * four["purchase_usd"] == 8 * 17_500
    # the compute part halves with twice the GPUs; the ZeRO-3 traffic over NVLink (comm_hours, worked
    # out by hand in tests/test_interconnect.py) does not, so only the compute part scales exactly
    compute = lambda row: row["train_hours"] - row["comm_hours"]  # noqa: E731
    assert compute(eight) == pytest.approx(compute(four) / 2, rel=1e-9)
    assert four["comm_hours"] > 0 and eight["comm_hours"] > 0
    assert eight["gpu_hours"] == pytest.approx(8 * eight["train_hours"], rel=1e-12)
    assert eight["cloud_cost_usd"] == pytest.approx(eight["gpu_hours"] * 1.79, rel=1e-12)
    assert four["cloud_cost_usd"] == pytest.approx(four["gpu_hours"] * 1.79, rel=1e-12)
    assert four["power_cost_usd"] == pytest.approx(four["gpu_hours"] * 0.4 * 0.13, rel=1e-12)
    assert twice["train_hours"] == pytest.approx(2 * four["train_hours"], rel=1e-12)
    assert twice["cloud_cost_usd"] == pytest.approx(2 * four["cloud_cost_usd"], rel=1e-12)
    assert eight["power_usd_per_month"] == pytest.approx(2 * four["power_usd_per_month"], rel=1e-12)
    assert four["power_usd_per_month"] == pytest.approx(0.4 * 4 * 0.13 * 730, rel=1e-12)
    assert half_month["breakeven_months"] == pytest.approx(2 * four["breakeven_months"], rel=1e-12)
    assert half_use["breakeven_months"] == pytest.approx(2 * four["breakeven_months"], rel=1e-12)
    assert eight["breakeven_months"] == pytest.approx(four["breakeven_months"], rel=1e-12)
    assert four["usd_per_gb_vram"] == pytest.approx(17_500 / 80, rel=1e-12)


def test_usd_per_million_tokens_from_the_cloud_price(models, gpus):
    got = one(models, gpus, model="llama-3-8b", task="infer", precision="bf16", batch=16, seq=1024,
              gpu="h100-sxm-80gb", gpus=2, tp=1)
    # two replicas of one GPU each at $2.99 per GPU-hour
    expected = 2 * 2.99 / (got["aggregate_tokens_per_s"] * 3600) * 1e6
    assert got["usd_per_million_tokens"] == pytest.approx(expected, rel=1e-12)
    assert got["aggregate_tokens_per_s"] == pytest.approx(2 * 16 * got["decode_tokens_per_s"], rel=1e-12)


def test_rows_without_a_gpu_get_nan_but_keep_training_flops(models, gpus):
    r = estimate(pd.DataFrame([dict(model="llama-2-7b", task="train", tokens=1e9),
                               dict(model="llama-2-7b", task="infer")]), models, gpus)
    assert r["train_flops"].iloc[0] == pytest.approx(1e9 * (6 * 6_738_415_616 + 6 * 32 * 2048 * 4096), rel=1e-12)
    for col in ("train_hours", "gpu_hours", "cloud_cost_usd", "purchase_usd", "breakeven_months",
                "decode_tokens_per_s", "prefill_s", "usd_per_million_tokens"):
        assert r[col].isna().all(), col
    assert r["bound"].isna().all()


def test_add_speed_cost_works_on_an_estimate_frame_without_rerunning_it(models, gpus):
    frame = estimate(pd.DataFrame([dict(model="llama-2-7b", task="infer", gpu="l4")]), models, gpus)
    again = add_speed_cost(frame.assign(mfu=0.3, bandwidth_efficiency=0.5), gpus, models)
    assert again["decode_tokens_per_s"].iloc[0] == pytest.approx(frame["decode_tokens_per_s"].iloc[0] * 0.5 / 0.65, rel=1e-9)
    with pytest.raises(ValueError, match="models table"):
        add_speed_cost(frame, gpus)


@pytest.mark.parametrize("value", [True, 1 + 2j, [0.3], "often", float("inf"), 1e308])
def test_settings_that_are_not_amounts_are_refused_by_name(models, gpus, value):
    frame = pd.DataFrame({"model": ["llama-2-7b"], "task": ["infer"], "gpu": ["rtx-4090"],
                          "utilization": pd.Series([value], dtype=object)})
    with pytest.raises(ValueError, match=r"^utilization .* is not accepted; accepted: a fraction >= 0.001 and <= 1"):
        estimate(frame, models, gpus)


def test_tco_pue_multiplies_power_and_resale_shortens_the_breakeven():
    # issue 14: power with PUE, depreciation and resale in the buy-vs-rent break-even; expected
    # figures from the catalog's YAML and the formula's definition, not from engine/speed.py
    import json
    import subprocess
    import sys

    import yaml

    from tests.conftest import ROOT

    card = {g["id"]: g for g in yaml.safe_load((ROOT / "catalog" / "gpus.yaml").read_text())["gpus"]}["rtx-4090"]
    proc = subprocess.run([sys.executable, "-m", "engine", "estimate", "--model", "llama-2-7b", "--task", "infer",
                           "--gpu", "rtx-4090", "--pue", "1.5", "--resale-fraction", "0.4", "--utilization", "0.5",
                           "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    data = json.loads(proc.stdout)
    power_month = card["tdp_w"] / 1000 * 0.5 * 0.13 * 1.5 * 730
    rent_month = card["cloud_usd_per_hour"] * 0.5 * 730
    assert data["power_usd_per_month"] == pytest.approx(power_month)
    assert data["breakeven_months"] == pytest.approx(card["price_usd"] * (1 - 0.4) / (rent_month - power_month))
    assert data["pue"] == 1.5 and data["resale_fraction"] == 0.4


# ---- one builder of the speed inputs (issue 24) ---------------------------------------------------

def test_speed_inputs_have_one_builder_a_frame_with_its_own_shape_gets_zero3_traffic(models, gpus):
    # A frame carrying its own model shape columns (and add_speed_cost on a result) used to go
    # through a second builder of the speed inputs that left out the ZeRO stage, the weight and
    # gradient bytes and the total parameters: its ZeRO-3 rows were timed with an all-reduce of
    # the gradients instead of the weights' all-gathers (comm_hours, and so train_hours,
    # gpu_hours and the costs, too low), its LoRA rows' fp32 adapter gradients at 2 bytes.
    from engine.speed import MODEL_SHAPE
    rows = pd.DataFrame([dict(model="llama-2-7b", method="lora", precision="bf16", gpus=4, zero=3, batch=4, seq=1024,
                              gpu="h100-sxm-80gb"),
                         dict(model="llama-2-7b", method="lora", precision="bf16", gpus=4, zero=1, batch=4, seq=1024,
                              gpu="h100-sxm-80gb"),
                         dict(model="llama-2-7b", method="full", precision="bf16", gpus=2, zero=3, batch=2, seq=512,
                              gpu="h100-sxm-80gb")])
    plain = estimate(rows, models, gpus)
    table = models.set_index("id")
    shaped = estimate(rows.assign(**{c: table.loc[rows["model"], c].to_numpy() for c in MODEL_SHAPE}), models, gpus)
    again = add_speed_cost(plain, gpus, models)
    for c in ("comm_hours", "train_hours", "gpu_hours", "cloud_cost_usd", "power_cost_usd", "train_flops"):
        np.testing.assert_array_equal(shaped[c].to_numpy(), plain[c].to_numpy(), err_msg=c)
        np.testing.assert_array_equal(again[c].to_numpy(), plain[c].to_numpy(), err_msg=c)
    # by hand (engine/speed.py docstring): ZeRO-3 moves 2 (dp-1)/dp x N x weight bytes (all-gathers,
    # forward and backward) + (dp-1)/dp x T x gradient bytes per step, 3 collectives per layer;
    # ZeRO 0-2 all-reduce 2 (dp-1)/dp x T x gradient bytes, one collective per 25 MiB bucket
    link = 900e9 / 2
    N, L = 6_738_415_616, 32
    for i, (dp, zero, grad_b, b, s) in enumerate(((4, 3, 4.0, 4, 1024), (4, 1, 4.0, 4, 1024), (2, 3, 2.0, 2, 512))):
        T = float(plain["trainable_params"].iloc[i])
        frac = (dp - 1) / dp
        if zero == 3:
            per_step = (2 * frac * N * 2.0 + frac * T * grad_b) / link + 3 * L * 6e-6
        else:
            per_step = 2 * frac * T * grad_b / link + max(1.0, math.ceil(T * grad_b / (25 * 2**20))) * 6e-6
        steps = 1e9 / (b * s * dp)
        assert plain["comm_hours"].iloc[i] == pytest.approx(steps * per_step / 3600.0, rel=1e-12), i
