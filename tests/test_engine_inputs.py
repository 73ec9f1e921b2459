"""Bad scenario input never crashes the engine or corrupts a result.

Hypothesis draws whole scenario frames whose columns mix valid values with invalid ones
(negative, zero, huge, NaN, inf, booleans, complex numbers, dates, lists, bytes, unknown
strings, mixed types in one column, empty frames). For every frame, `estimate()` either
returns one finite, non-negative result per row, or raises ValueError with one short line
that names the column. Never another exception type, never NaN / inf where a number is
due, never a numpy overflow / invalid-value warning.
"""

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from engine import estimate
from engine.constants import GALORE_LAYERWISE
from engine.memory import INFER_PHASES, TRAIN_PHASES
from engine.scenarios import DEFAULTS
from engine.stacks import RECIPE_NAMES, SWITCHES

STACK_CHOICES = {"recipe": RECIPE_NAMES, **SWITCHES}

MODELS = ["llama-3.2-1b", "llama-2-7b", "llama-3-8b", "llama-2-70b"]
GPUS = ["h100-sxm-80gb", "rtx-4090", "l4", "mi300x"]
TRAIN_PRECISIONS = ["fp32", "amp_bf16", "amp_fp16", "bf16", "fp16", "mixed_bf16", "mixed_fp16"]
INFER_PRECISIONS = ["fp32", "bf16", "fp16", "int8", "int4", "nf4", "q8_0", "q4_k_m", "q2_k"]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                            HealthCheck.too_slow])

# Valid values per column (each alone is accepted; combinations may still be refused).
VALID = {
    "model": st.sampled_from(MODELS),
    "task": st.sampled_from(["train", "infer"]),
    "method": st.sampled_from(["full", "lora", "qlora", "freeze"]),
    "precision": st.sampled_from(TRAIN_PRECISIONS + INFER_PRECISIONS),
    "optimizer": st.sampled_from(["adamw", "adamw_fused", "adamw_8bit", "paged_adamw_8bit", "sgd", "adafactor"]),
    "batch": st.sampled_from([1, 2, 7, 64, 1_000_000]),
    "seq": st.sampled_from([1, 128, 2048, 4096, 100_000_000]),
    "grad_checkpointing": st.sampled_from([True, False, "yes", "off", 0, 1]),
    "lora_rank": st.sampled_from([1, 8, 64, 65_536]),
    "lora_targets": st.sampled_from(["q_proj,v_proj", "all", "gate_proj,up_proj,down_proj"]),
    "freeze_layers": st.integers(1, 10_000),
    "zero": st.sampled_from([0, 1, 2, 3, "3"]),
    "offload": st.sampled_from(["none", "optimizer", "all"]),
    "gpus": st.sampled_from([1, 1, 2, 8, 4096, 1_000_000]),
    "tp": st.sampled_from([1, 1, 2, 8, 4096]),
    "pp": st.sampled_from([1, 1, 2, 4096]),
    "base_precision": st.sampled_from(["auto", "nf4", "int8", "bf16", "q4_k_m"]),
    "kv_precision": st.sampled_from(["auto", "bf16", "fp8", "int4"]),
    "kv_policy": st.sampled_from(["auto", "windowed", "full", "latent"]),
    "ep": st.sampled_from([1, 1, 2, 8]),
    "cp": st.sampled_from([1, 1, 2, 8]),  # context parallel (issue 27)
    "galore_rank": st.sampled_from([0, 1, 16, 128, 65_536]),  # 0: the recipe's (issue 27)
    "prefill_logits": st.sampled_from(["last", "all"]),
    "headroom": st.sampled_from([0.0, 0.1, 0.999]),
    "lora_dropout": st.sampled_from([0.0, 0.05, 0.1, 0.999]),  # peft's lora_dropout
    "objective": st.sampled_from(["sft", "dpo"]),  # the training objective (dpo: preference pairs, a reference)
    "allow_long_context": st.booleans(),
    "gpu": st.sampled_from(GPUS + [""]),
    # the software stack (issue 13, engine/stacks.py): every value of each column
    **{col: st.sampled_from(list(values)) for col, values in STACK_CHOICES.items()},
}
# Anything at all: wrong types, out-of-range numbers, missing values, hostile text.
INVALID = st.one_of(
    st.none(),
    st.just(math.nan),
    st.just(pd.NA),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**30), 10**30),
    st.sampled_from([0, -1, 2**63, -(2**63), 1e300, -1e-300, 0.5]),
    st.booleans(),
    st.text(max_size=12),
    st.sampled_from(["", " ", "nan", "inf", "-1", "1e400", "=HYPERLINK(\"http://x\")", "'; DROP TABLE x; --",
                     "llama-2-7b\n", "all,nope", "x" * 5000]),
    st.just(complex(1, 2)),
    st.just(pd.Timestamp("2024-01-01")),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
    st.binary(max_size=4),
)
COLUMNS = sorted(set(DEFAULTS) | {"model"})


@st.composite
def scenario_frames(draw):
    rows = draw(st.sampled_from([0, 1, 1, 2, 3, 5]))
    wild = draw(st.booleans())  # half the frames hold only valid values (combinations may still clash)
    chosen = draw(st.lists(st.sampled_from(COLUMNS), unique=True, max_size=len(COLUMNS) if wild else 6))
    if (not wild or draw(st.integers(0, 9)) > 0) and "model" not in chosen:
        chosen.append("model")
    data = {}
    for col in chosen:
        valid_share = draw(st.sampled_from([1.0, 1.0, 0.8, 0.0])) if wild else 1.0
        values = [draw(VALID[col]) if draw(st.floats(0, 1)) < valid_share else draw(INVALID) for _ in range(rows)]
        kind = draw(st.sampled_from(["infer", "object", "category"]))
        if kind == "object":
            data[col] = pd.Series(values, dtype=object)
        elif kind == "category":
            try:
                data[col] = pd.Series(pd.Categorical(values))
            except (TypeError, ValueError):  # unhashable values cannot be categories
                data[col] = pd.Series(values, dtype=object)
        else:
            try:
                data[col] = pd.Series(values)
            except (TypeError, ValueError, OverflowError):
                data[col] = pd.Series(values, dtype=object)
    if draw(st.booleans()):
        data["x_notes"] = pd.Series([draw(INVALID) for _ in range(rows)], dtype=object)  # unknown column rides along
    return pd.DataFrame(data, index=pd.RangeIndex(rows)) if data else pd.DataFrame(index=pd.RangeIndex(rows))


# Columns that are NaN by design where they do not apply: a phase of the other task, and the
# GPU-fit columns of a row without a GPU. gpus_needed is inf when no count up to the engine's
# maximum fits (documented in engine/estimate.py).
TRAIN_PHASE_COLS = [f"{p}_phase_bytes" for p in TRAIN_PHASES]
INFER_PHASE_COLS = [f"{p}_phase_bytes" for p in INFER_PHASES]
FIT_COLS = ["usable_bytes", "capacity_bytes", "memory_used_fraction", "max_batch", "max_seq", "safe_peak_bytes",
            "verdict_margin_pct"]


def check_result(frame: pd.DataFrame, out: pd.DataFrame) -> None:
    assert len(out) == len(frame)
    if len(out) == 0:
        return
    byte_cols = [c for c in out.columns if c.endswith("_bytes") and not c.endswith("_phase_bytes") and c not in FIT_COLS]
    assert "peak_bytes" in byte_cols and "weights_bytes" in byte_cols
    for col in byte_cols + ["params", "trainable_params"]:
        values = out[col].to_numpy(dtype=float)
        assert np.all(np.isfinite(values)), (col, values)
        assert np.all(values >= 0), (col, values)
    assert np.all(out["peak_bytes"].to_numpy(dtype=float) > 0)
    train = (out["task"].astype(str) == "train").to_numpy()
    # the attention phase is a prefill's eager scores: inference rows with attention eager, or a
    # Gemma 2 model (softcapped: eager) under sdpa (engine/components.py attention_path)
    gemma2 = out["model"].astype(str).str.startswith("gemma-2-").to_numpy()
    attention = out["attention"].astype(str).to_numpy()
    eager = (attention == "eager") | (gemma2 & (attention == "sdpa"))
    # DeepSpeed ZeRO-1/2's reduction after backward: a phase of those training rows (not with an optimizer that
    # steps in backward: torchtune's optimizer_in_bwd, layer-wise GaLore; engine/components.py deepspeed_zero12_rows)
    zero = out["zero"].to_numpy(dtype=float)
    in_bwd = (out["optimizer_in_backward"].astype(str) == "on").to_numpy() \
        | out["optimizer"].astype(str).isin(GALORE_LAYERWISE).to_numpy()
    zero12 = train & ((zero == 1) | (zero == 2)) & ~in_bwd
    for cols, task_rows in ((TRAIN_PHASE_COLS, train), (INFER_PHASE_COLS, ~train)):
        applies = task_rows
        for col in cols:
            if col == "attention_phase_bytes":
                applies = ~train & eager
            if col == "grad_reduce_phase_bytes":
                applies = zero12
            elif col in TRAIN_PHASE_COLS:
                applies = task_rows
            values = out[col].to_numpy(dtype=float)
            assert np.all(np.isfinite(values[applies]) & (values[applies] >= 0)), (col, values)
            assert np.all(np.isnan(values[~applies])), col
    assert set(out["peak_phase"].astype(str)) <= set(TRAIN_PHASES) | set(INFER_PHASES)
    assert set(TRAIN_PHASE_COLS + INFER_PHASE_COLS) == {c for c in out.columns if c.endswith("_phase_bytes")}
    has_gpu = (out["gpu"].astype(str) != "").to_numpy()
    for col in FIT_COLS:
        values = out[col].to_numpy(dtype=float)
        assert np.all(np.isfinite(values[has_gpu])), (col, values)
        assert col == "capacity_bytes" or np.all(values[has_gpu] >= 0), (col, values)
    needed = out["gpus_needed"].to_numpy(dtype=float)[has_gpu]
    assert np.all((needed >= 1) & ~np.isnan(needed)), needed
    fits = out["fits"].to_numpy(dtype=object)[has_gpu]
    assert all(v is True or v is False or isinstance(v, np.bool_) for v in fits), fits
    # capacity_bytes (usable x (1 - headroom) - runtime context) goes below zero when the
    # headroom and context leave nothing: then nothing fits and no batch does
    capacity = out["capacity_bytes"].to_numpy(dtype=float)[has_gpu]
    none_left = capacity < 0
    assert not np.any(fits[none_left].astype(bool)) and np.all(out["max_batch"].to_numpy(dtype=float)[has_gpu][none_left] == 0)
    # every other number the engine adds (speed, cost, ...): never negative, never -inf
    for col in out.select_dtypes("number").columns.drop("capacity_bytes", errors="ignore"):
        values = out[col].to_numpy(dtype=float)
        assert not np.any(values[~np.isnan(values)] < 0), (col, values)


def check_message(frame: pd.DataFrame, exc: ValueError) -> None:
    message = str(exc)
    assert "\n" not in message and "\r" not in message, message
    assert 0 < len(message) <= 400, message
    names = set(frame.columns.astype(str)) | set(DEFAULTS) | {"model", "scenario"}
    # the column as named in the frame, or in words ("lora_targets" -> "lora target")
    words = set(names) | {n.replace("_", " ").rstrip("s") for n in names}
    assert any(w in message for w in words), message


def run_estimate(frame, models, gpus):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy overflow / invalid value
        return estimate(frame, models, gpus)


@SETTINGS
@given(frame=scenario_frames())
@example(frame=pd.DataFrame({"model": pd.Series([], dtype=object)}))
@example(frame=pd.DataFrame({"model": ["llama-2-7b"], "batch": [math.inf]}))
@example(frame=pd.DataFrame({"model": ["llama-2-7b"], "seq": [1e300]}))
@example(frame=pd.DataFrame({"model": ["llama-2-7b"], "batch": pd.Series([10**30], dtype=object)}))
@example(frame=pd.DataFrame({"model": ["llama-2-7b"], "zero": [complex(1, 2)]}))
@example(frame=pd.DataFrame({"model": ["llama-2-7b"], "gpus": [pd.Timestamp("2024-01-01")]}))
@example(frame=pd.DataFrame({"model": ["llama-2-7b"], "gpu": pd.Series([["h100-sxm-80gb"]], dtype=object)}))
@example(frame=pd.DataFrame({"model": ["llama-2-7b", "llama-2-7b"], "batch": pd.Series([2, "x"], dtype=object)}))
def test_any_scenario_frame_gives_clean_numbers_or_one_clear_error(models, gpus, frame):
    try:
        out = run_estimate(frame, models, gpus)
    except ValueError as exc:
        event("refused")
        check_message(frame, exc)
    else:
        event("estimated" if len(out) else "empty")
        check_result(frame, out)


def test_an_empty_frame_gives_an_empty_result(models, gpus):
    out = run_estimate(pd.DataFrame({"model": pd.Series([], dtype=object)}), models, gpus)
    assert len(out) == 0 and "peak_bytes" in out.columns


def test_every_result_lists_its_columns_in_one_order(models, gpus):
    """With a GPU, without one, without a GPU table, or empty: a script reading the CSV by position
    finds the same column in the same place (a GPU-less result once listed gpus_needed first)."""
    base = {"model": "llama-2-7b", "gpu": "rtx-4090", "task": "train", "method": "lora"}
    with_gpu = estimate(pd.DataFrame([base]), models, gpus)
    no_gpu = estimate(pd.DataFrame([{**base, "gpu": ""}]), models, gpus)
    no_table = estimate(pd.DataFrame([base]), models, None)
    empty = estimate(pd.DataFrame([base]).iloc[:0], models, gpus)
    order = list(with_gpu.columns)
    assert order.index("max_batch") < order.index("gpus_needed")
    for other in (no_gpu, no_table, empty):
        assert list(other.columns) == order


@pytest.mark.parametrize("column, value, shown", [
    ("batch", math.inf, "inf"),
    ("batch", 1e300, "1e+300"),
    ("seq", 10**30, "1000000000000000000000000000000"),  # once wrapped around to -9223372036854775808
    ("batch", True, "True"),
    ("zero", complex(1, 2), "(1+2j)"),
    ("gpus", pd.Timestamp("2024-01-01"), "Timestamp"),
    ("headroom", "lots", "'lots'"),
    ("lora_dropout", 1.0, "1"),
    ("grad_checkpointing", 2, "2"),
    ("grad_checkpointing", "maybe", "'maybe'"),
    ("tp", -4, "-4"),
])
def test_a_bad_number_is_named_with_its_column(models, column, value, shown):
    frame = pd.DataFrame({"model": ["llama-2-7b"], column: pd.Series([value], dtype=object)})
    with pytest.raises(ValueError) as info:
        run_estimate(frame, models, None)
    message = str(info.value)
    assert message.startswith(f"{column} ") and shown in message and "accepted" in message, message
    assert "\n" not in message


@pytest.mark.parametrize("values", [[1, True], [True, 1], [2, False, "3"]])
def test_a_boolean_hidden_among_numbers_is_refused(models, values):
    # True == 1 to Python: a check on distinct values alone would take it for a batch of 1
    frame = pd.DataFrame({"model": ["llama-2-7b"] * len(values), "batch": pd.Series(values, dtype=object)})
    with pytest.raises(ValueError, match=r"^batch (True|False) is not accepted"):
        run_estimate(frame, models, None)


def test_a_huge_text_value_gives_a_short_message(models):
    frame = pd.DataFrame({"model": ["x" * 100_000]})
    with pytest.raises(ValueError) as info:
        run_estimate(frame, models, None)
    assert len(str(info.value)) < 300 and str(info.value).startswith("model ")


def test_a_frame_that_is_not_a_frame_and_duplicate_columns_are_refused(models):
    with pytest.raises(ValueError, match="DataFrame"):
        run_estimate([{"model": "llama-2-7b"}], models, None)
    dup = pd.DataFrame([["llama-2-7b", 1, 2]], columns=["model", "batch", "batch"])
    with pytest.raises(ValueError, match="'batch' appears more than once"):
        run_estimate(dup, models, None)


def test_a_missing_value_means_the_default_in_every_column_type(models):
    # NaN in a categorical task column once slipped past the check and ran as inference
    base = run_estimate(pd.DataFrame({"model": ["llama-2-7b"]}), models, None).iloc[0]
    holes = pd.DataFrame({
        "model": ["llama-2-7b"],
        "task": pd.Categorical([None], categories=["infer"]),
        "batch": pd.array([pd.NA], dtype="Int64"),
        "seq": [math.nan],
        "precision": pd.Series([None], dtype=object),
        "grad_checkpointing": pd.array([pd.NA], dtype="boolean"),
        "gpu": [math.nan],
    })
    out = run_estimate(holes, models, None).iloc[0]
    assert out["task"] == DEFAULTS["task"] == "train"
    # seq left out is decided by engine/rules.py: 2,048 (Llama 2 7B's context is 4,096)
    assert out["batch"] == DEFAULTS["batch"] and DEFAULTS["seq"] == 0 and out["seq"] == 2048
    assert out["peak_bytes"] == base["peak_bytes"]


@pytest.mark.parametrize("column", [
    pd.Series(["llama-2-7b", None], dtype=object),
    pd.Series(pd.Categorical(["llama-2-7b", None])),  # once read as code -1: the last model's row
    pd.Series(pd.Categorical([None, None], categories=[])).iloc[::-1].reset_index(drop=True),
])
def test_a_missing_model_names_the_row(models, column):
    with pytest.raises(ValueError, match=r"model is missing in row \d"):
        run_estimate(pd.DataFrame({"model": column}), models, None)


def test_numbers_given_as_text_are_read_as_numbers(models):
    as_text = run_estimate(pd.DataFrame({"model": ["llama-2-7b"], "batch": ["4"], "seq": [" 512 "], "zero": ["0"]}), models, None)
    as_ints = run_estimate(pd.DataFrame({"model": ["llama-2-7b"], "batch": [4], "seq": [512], "zero": [0]}), models, None)
    assert as_text["peak_bytes"].iloc[0] == as_ints["peak_bytes"].iloc[0]


def test_a_sequence_longer_than_the_model_context_is_refused_in_a_big_sweep(models, gpus):
    """The check per configuration x seq (skipped only when no seq can exceed any context)."""
    from engine import grid

    frame = grid(model=["llama-2-7b", "llama-1-7b", "llama-3-8b"], gpu=["rtx-4090", "h100-sxm-80gb"],
                 method=["full", "lora"], batch=[1, 2, 4], seq=[1024, 2048, 4096], gpus=[1, 2])
    assert len(frame) >= 64  # configurations are grouped at this size
    with pytest.raises(ValueError, match=r"seq 4,096 is longer than llama-1-7b's context of 2,048 tokens"):
        estimate(frame, models, gpus)
    allowed = frame.assign(allow_long_context=frame["model"].astype(str) == "llama-1-7b")
    assert len(estimate(allowed, models, gpus)) == len(frame)
    short = frame[frame["seq"] <= 2048].reset_index(drop=True)
    assert len(estimate(short, models, gpus)) == len(short)


REQUEST = pd.DataFrame([{"model": "llama-2-7b", "gpu": "rtx-4090", "task": "train", "method": "lora"},
                        {"model": "mixtral-8x7b", "gpu": "h100-sxm-80gb", "task": "infer", "gpus": 2}])


@pytest.mark.parametrize("kind", ["models", "gpus"])
def test_a_catalog_table_without_a_column_gives_an_answer_or_one_line_naming_it(models, gpus, kind):
    # a library caller's own tables: a KeyError from inside the engine before, for 13 of the shipped columns
    from engine.estimate import REQUIRED_GPU_COLUMNS, REQUIRED_MODEL_COLUMNS
    required = REQUIRED_MODEL_COLUMNS if kind == "models" else REQUIRED_GPU_COLUMNS
    assert {"id", "hidden_size", "num_layers", "vocab_size"} <= set(required) if kind == "models" else \
        set(required) == {"id", "usable_memory_bytes"}  # the model's shape and the card's usable memory
    table = models if kind == "models" else gpus
    for col in required:
        tables = {"models": models, "gpus": gpus, kind: table.drop(columns=[col])}
        with pytest.raises(ValueError) as refused:
            estimate(REQUEST, tables["models"], tables["gpus"])
        message = str(refused.value)
        assert f"the {kind} table has no column {col}; accepted:" in message and "\n" not in message, message
    # and every other column has a default: tables of the required columns alone give an answer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = estimate(REQUEST, models[list(REQUIRED_MODEL_COLUMNS)] if kind == "models" else models,
                       gpus[list(REQUIRED_GPU_COLUMNS)] if kind == "gpus" else gpus)
    assert len(out) == 2 and np.isfinite(out["peak_bytes"]).all()


def test_catalog_tables_that_are_not_tables_are_refused(models, gpus):
    with pytest.raises(ValueError, match="models must be a table .* got list"):
        estimate(REQUEST, [1], gpus)
    with pytest.raises(ValueError, match="gpus must be a table .* got dict; accepted: .* or None"):
        estimate(REQUEST, models, {"id": []})
    assert len(estimate(REQUEST, models, None)) == 2  # no GPU table: no fit columns, still an answer
