"""LoRA dropout (scenario column lora_dropout): what each adapted module keeps for backward when peft's
lora_dropout > 0, checked against bytes worked by hand from the source (engine/memory.py
layer_activation_bytes, `dropout`) and against benchmarks/check_lora_dropout_saved.py's trace; the
default (0) and every non-LoRA row unchanged; the unsloth rule; the column's checks on every surface."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine import estimate
from engine.components import COMPONENT_FUNCTIONS, _layer_activations, first_layer_unsaved_masks, scenario_inputs, totals
from planner import cli
from tests.clirun import run_cli

# Llama 3.2 1B: h 2,048, MLP 8,192, 32 heads x 64 = 2,048 (q width), 8 kv heads x 64 = 512, 16 layers
H, F, QD, L = 2048, 8192, 2048, 16
LORA = dict(model="llama-3.2-1b", task="train", method="lora", precision="bf16", batch=1, seq=1024, lora_rank=8)


def per_layer(models, p, **kw) -> float:
    x = scenario_inputs(pd.DataFrame([{**LORA, **kw, "lora_dropout": p}]), models)
    return float(_layer_activations(x)[0])


def added(models, p=0.1, **kw) -> float:
    """Bytes per token and layer that dropout adds to what one decoder layer saves."""
    return per_layer(models, p, **kw) - per_layer(models, 0.0, **kw)


@pytest.mark.parametrize("kw, hand", [
    # fp32 adapters on a bf16 base (peft's default): lora_A kept an fp32 copy of its input, now the
    # dropout's fp32 output: only the bool mask is new, 1 byte per input value of q and v
    (dict(lora_targets="q_proj,v_proj"), 2 * H),
    # autocast: lora_A kept its 16-bit cast (now of the dropout's output): the masks of every module
    (dict(precision="amp_bf16", lora_targets="all"), 5 * H + QD + F),
    # bf16 adapters: lora_A kept the shared input itself (2 h once); now each module keeps the dropout's
    # 16-bit output (2 in) and its mask (1 in): q,v = -2h + 2 x 3h
    (dict(adapter_dtype="bf16", lora_targets="q_proj,v_proj"), -2 * H + 2 * 3 * H),
    # all seven with bf16 adapters: q,k,v -2h + 9h; o 3 qd (SDPA keeps its output anyway); gate,up -2h + 6h;
    # down -2f + 3f (the product was kept by lora_A only)
    (dict(adapter_dtype="bf16", lora_targets="all"), 7 * H + 3 * QD + 4 * H + F),
    # an fp32 base: the input (4 h, once) replaced by each module's fp32 output and mask: -4h + 2 x 5h
    (dict(precision="fp32", lora_targets="q_proj,v_proj"), -4 * H + 2 * 5 * H),
])
def test_dropout_adds_what_the_source_allocates_per_layer(models, kw, hand):
    assert added(models, **kw) == hand
    assert added(models, 0.05, **kw) == hand  # the probability does not change the bytes, only p > 0 does


def test_the_traced_tiny_llama_matches_the_engine(models):
    """benchmarks/check_lora_dropout_saved.py (real tensors, h 64, MLP 160, q width 96): per token and layer
    +128 (q,v), +96 (o), +160 (down) with fp32 adapters on bf16; +256 / +288 / +160 with bf16 adapters;
    +384 / +480 / +160 on an fp32 base; under autocast +128 / +96 / +160, o +288 where lora_A gets its 16-bit
    input uncast (bitsandbytes' LoRA layers under autocast; bf16 adapters)."""
    tiny = models[models["id"] == "llama-3.2-1b"].copy()
    tiny["id"] = "tiny-llama"
    tiny[["hidden_size", "intermediate_size", "num_heads", "num_kv_heads", "head_dim", "num_layers"]] = [64, 160, 4, 2, 24, 3]
    frame = pd.concat([models, tiny], ignore_index=True)
    traced = {("bf16", "auto"): (128, 96, 160), ("bf16", "bf16"): (256, 288, 160), ("fp32", "auto"): (384, 480, 160),
              ("amp_bf16", "auto"): (128, 96, 160), ("amp_bf16", "bf16"): (128, 288, 160)}
    for (precision, adapters), want in traced.items():
        got = []
        for targets in ("q_proj,v_proj", "o_proj", "down_proj"):
            kw = dict(model="tiny-llama", precision=precision, adapter_dtype=adapters, lora_targets=targets)
            got.append(per_layer(frame, 0.1, **kw) - per_layer(frame, 0.0, **kw))
        assert tuple(got) == want, (precision, adapters, got)


def test_the_first_layer_keeps_no_mask_where_its_input_needs_no_grad(models):
    """Without checkpointing the stack is L layers' activations less the first layer's q/k/v masks (the frozen
    embedding's output needs no gradient: no dropout node there); o_proj's and the MLP's inputs follow an
    adapted q/k/v, so theirs are kept. With checkpointing the stack holds only layer inputs: unchanged, and
    the layer being recomputed holds its masks."""
    def acts(p, **kw):
        x = scenario_inputs(pd.DataFrame([{**LORA, **kw, "lora_dropout": p}]), models)
        return COMPONENT_FUNCTIONS["activations"](x, totals(x)), x

    for targets, first in (("q_proj,v_proj", 2 * H), ("all", 3 * H)):
        (with_p, x), (without, _) = acts(0.1, lora_targets=targets), acts(0.0, lora_targets=targets)
        assert float(first_layer_unsaved_masks(x)[0]) == first
        delta = float(with_p["forward"].per_token[0] - without["forward"].per_token[0])
        assert delta == L * added(models, lora_targets=targets) - first, targets
    only_mlp = scenario_inputs(pd.DataFrame([{**LORA, "lora_targets": "gate_proj,up_proj,down_proj",
                                              "lora_dropout": 0.1}]), models)
    # gate and up: no adapted module before them; down follows the adapted gate and up (its input needs grad)
    assert float(first_layer_unsaved_masks(only_mlp)[0]) == 2 * H
    (with_p, x), (without, _) = acts(0.1, grad_checkpointing=True), acts(0.0, grad_checkpointing=True)
    assert float(first_layer_unsaved_masks(x)[0]) == 0.0
    assert float(with_p["forward"].per_token[0]) == float(without["forward"].per_token[0])
    assert float(with_p["backward"].per_token[0] - without["backward"].per_token[0]) == 2 * H  # the recomputed layer's


def test_a_bitsandbytes_base_keeps_its_input_once_the_adapters_keep_their_own(models):
    """QLoRA with bf16 adapters and a base that keeps its input (bnb_4bit_input kept, bitsandbytes < 0.43.2):
    at p = 0 the q/v adapters keep the shared 16-bit input the 4-bit matmuls keep too (2 h once); with dropout
    the adapters keep their own outputs and masks (2 x 3 h) and the base's input is its own again (2 h)."""
    kw = dict(method="qlora", adapter_dtype="bf16", bnb_4bit_input="kept", kbit_prep="off", lora_targets="q_proj,v_proj")
    assert added(models, **kw) == -2 * H + 2 * 3 * H + 2 * H


def test_the_default_and_rows_without_adapters_do_not_move(models):
    """lora_dropout 0 (peft's default) is the engine before the column; full, freeze and inference rows
    ignore the column (no adapters)."""
    rows = [LORA, dict(LORA, lora_targets="all", adapter_dtype="bf16"), dict(LORA, method="qlora"),
            dict(LORA, method="full"), dict(LORA, method="freeze"), dict(model="llama-3.2-1b", task="infer")]
    frame = pd.DataFrame(rows)
    base = estimate(frame, models)
    assert (base["lora_dropout"] == 0.0).all()
    zero = estimate(frame.assign(lora_dropout=0.0), models)
    pd.testing.assert_frame_equal(base, zero[base.columns])
    other = estimate(frame.assign(lora_dropout=0.1), models)
    lora = np.arange(len(rows)) < 3
    same = ~lora
    for col in ("peak_bytes", "activations_bytes", "backward_phase_bytes", "forward_phase_bytes"):
        assert np.array_equal(other[col].to_numpy()[same], base[col].to_numpy()[same], equal_nan=True), col
    assert (other["activations_bytes"].to_numpy()[lora] > base["activations_bytes"].to_numpy()[lora]).all()


def test_unsloth_runs_peft_fp32_adapters_when_dropout_is_asked(models):
    """unsloth patches its fast LoRA kernels in only for lora_dropout == 0 (models/llama.py patch_peft_model):
    'auto' adapters are bf16 at p = 0, fp32 above; an adapter dtype asked explicitly stays."""
    frame = pd.DataFrame([dict(LORA, recipe="unsloth", lora_dropout=0.0), dict(LORA, recipe="unsloth", lora_dropout=0.05),
                          dict(LORA, recipe="unsloth", lora_dropout=0.05, adapter_dtype="bf16"),
                          dict(LORA, recipe="hf", lora_dropout=0.05), dict(LORA, recipe="torchtune", lora_dropout=0.05)])
    out = estimate(frame, models)
    assert list(out["adapter_dtype"].astype(str)) == ["bf16", "fp32", "bf16", "fp32", "bf16"]


@pytest.mark.parametrize("bad", [1.0, 1.5, -0.01, "often", float("inf")])
def test_a_bad_dropout_is_refused_with_its_value_and_what_is_accepted(models, bad):
    with pytest.raises(ValueError, match=r"lora.dropout .* not accepted; accepted: a probability in \[0, 1\)"):
        estimate(pd.DataFrame([dict(LORA, lora_dropout=bad)]), models)


def test_the_cli_flag_and_the_json_key():
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--method", "lora", "--lora-dropout", "0.05", "--json")
    assert code == 0, err
    import json
    assert json.loads(out)["lora_dropout"] == 0.05
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--method", "lora", "--lora-dropout", "1")
    assert code != 0 and "lora-dropout '1' is not accepted" in err and "a probability in [0, 1)" in err
    assert cli.build_parser() is not None


def test_the_dashboard_sends_the_percent_as_a_probability():
    from app.state import FIELDS, train_workload
    settings = {k: f.default for k, f in FIELDS.items()}
    assert train_workload(settings)["lora_dropout"] == 0.0
    settings["lora_dropout_pct"] = 5
    assert train_workload(settings)["lora_dropout"] == 0.05
