"""Custom models from a Hugging Face config.json: Llama, Mistral, Qwen2 and Gemma map onto the
engine's fields with exact parameter counts; everything else, and every malformed file, is
refused with one line naming the file and the config field."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from catalog import CatalogError
from catalog.user import MAX_CONFIG_BYTES, model_from_config, model_from_config_file, model_from_config_text
from engine import estimate
from engine.params import total_params
from tests.clirun import run_cli

DATA = Path(__file__).resolve().parent / "data"
ROOT = Path(__file__).resolve().parent.parent

# Published parameter counts, independent of our code:
# - llama-2-7b, llama-3.2-1b: the Hugging Face model cards / safetensors metadata (as in test_params).
# - Mistral-7B-v0.1: 7,241,732,096, the GGUF general.parameter_count of its conversions.
# - Qwen2-7B: 7,615,616,512 (GGUF general.parameter_count; Qwen2.5-7B has the same config fields).
# - Qwen2.5-0.5B: 494,032,768 (its safetensors total; the config is Qwen2's, tied embeddings).
# - Gemma 2B / 7B: 2,506,172,416 / 8,537,680,896, the "params" of keras-hub's gemma_2b_en /
#   gemma_7b_en presets (and PEFT's "all params" printout for google/gemma-2b).
GOOD = {
    "llama-2-7b.json": 6_738_415_616,
    "llama-3.2-1b.json": 1_235_814_400,
    "mistral-7b-v0.1.json": 7_241_732_096,
    "qwen2-7b.json": 7_615_616_512,
    "qwen2.5-0.5b.json": 494_032_768,
    "gemma-2b.json": 2_506_172_416,
    "gemma-7b.json": 8_537_680_896,
    # issue 15 (tests/test_architectures.py checks the active counts and the KV cache):
    # - Mixtral-8x7B-v0.1: 46,702,792,704 (the figure; safetensors total of the checkpoint).
    # - Gemma 2 9B: 9,241,705,984 (safetensors total on the Hub page of google/gemma-2-9b).
    # - DeepSeek-V3: 671,026,419,200, the "671B total" of the model card without the 14B MTP module.
    # - gpt-oss-20b: 20,914,757,184 (OpenAI's model card, table 1: 20.91B total).
    # - Qwen3-30B-A3B: 30,532,122,624 (the model card's 30.5B; safetensors total).
    "mixtral-8x7b-v0.1.json": 46_702_792_704,
    "gemma-2-9b.json": 9_241_705_984,
    "deepseek-v3.json": 671_026_419_200,
    "gpt-oss-20b.json": 20_914_757_184,
    "qwen3-30b-a3b.json": 30_532_122_624,
    # Phi-3 layout (fused qkv_proj / gate_up_proj) and SmolLM3 (the Llama layout, tied embeddings):
    # - Phi-4: 14,659,507,200 (GGUF general.parameter_count of microsoft/phi-4's GGUFs).
    # - Phi-4-mini-instruct: 3,836,021,760 (Hub safetensors total of microsoft/Phi-4-mini-instruct).
    # - SmolLM3-3B: 3,075,098,624 (Hub safetensors total of HuggingFaceTB/SmolLM3-3B).
    "phi-4.json": 14_659_507_200,
    "phi-4-mini.json": 3_836_021_760,
    "smollm3-3b.json": 3_075_098_624,
    # Mistral Small 3.1 (mistral3, its language model under text_config): 23,572,403,200, the text-only Magistral
    # Small of the same architecture (KerasHub magistral_small_2506_en; the catalog entry's notes).
    "mistral-small-3.1-24b.json": 23_572_403_200,
    # Qwen2.5-VL 7B's language model: 7,615,616,512 (transformers' count of Qwen2.5-VL-7B-Instruct, 8,292,166,656 in
    # all less the visual tower's 676,550,144; the catalog entry's notes), Qwen2.5-7B's layout.
    "qwen2.5-vl-7b.json": 7_615_616_512,
    # Gemma 3 4B (gemma3: a sparse text_config, Gemma3TextConfig's defaults fill the rest): 3,880,263,168, llama.cpp's
    # n_params for gemma-3-4b-it (the catalog entry's notes).
    "gemma-3-4b-it.json": 3_880_263_168,
    # Llama 4 Scout (llama4: text_config and vision_config): the language model 107,769,861,120, which with the vision
    # tower's 871,932,416 is the checkpoint's published 108,641,793,536 (Hub safetensors total; checked below).
    "llama-4-scout.json": 107_769_861_120,
}


@pytest.mark.parametrize("name", sorted(GOOD))
def test_published_configs_give_the_published_parameter_count(name):
    record = model_from_config_file(DATA / "good_configs" / name)
    assert record["params"] == GOOD[name]
    cfg = json.loads((DATA / "good_configs" / name).read_text())
    text = cfg.get("text_config", cfg)  # (a multimodal config's language model)
    assert record["hidden_size"] == text["hidden_size"] and record["num_layers"] == text["num_hidden_layers"]
    assert record["family"] == f"custom-{cfg['model_type']}"  # the checkpoint's own model_type


def test_every_good_config_has_a_published_count():
    assert {p.name for p in (DATA / "good_configs").iterdir()} == set(GOOD)
    assert {json.loads((DATA / "good_configs" / n).read_text())["model_type"] for n in GOOD} == {"llama", "mistral", "qwen2", "gemma",
                                                                                               "mixtral", "gemma2", "deepseek_v3",
                                                                                               "gpt_oss", "qwen3_moe", "phi3",
                                                                                               "smollm3", "mistral3", "qwen2_5_vl",
                                                                                               "gemma3", "llama4"}


def test_qwen2_counts_its_qkv_biases_by_hand():
    record = model_from_config_file(DATA / "good_configs" / "qwen2-7b.json")
    assert record["qkv_bias"] is True
    # 28 layers x (q 28x128 + k 4x128 + v 4x128 biases) = 28 x 4,608
    without = total_params(3584, 18944, 28, 28, 4, 128, 152064, False)
    assert record["params"] - without == 28 * (3584 + 512 + 512) == 129_024


def test_the_bias_term_leaves_llama_counts_identical():
    assert total_params(4096, 11008, 32, 32, 32, 128, 32000, False) == 6_738_415_616
    assert total_params(4096, 11008, 32, 32, 32, 128, 32000, False, qkv_bias=False) == 6_738_415_616


def test_gemma_defaults_tie_the_embeddings_and_use_head_dim_256():
    # gemma-7b's config gives neither head_dim nor tie_word_embeddings: GemmaConfig's defaults apply
    cfg = json.loads((DATA / "good_configs" / "gemma-7b.json").read_text())
    assert "head_dim" not in cfg and "tie_word_embeddings" not in cfg
    record = model_from_config(cfg, "gemma-7b.json")
    assert record["head_dim"] == 256 and record["tied_embeddings"] is True
    assert record["head_dim"] != cfg["hidden_size"] // cfg["num_attention_heads"]  # 192: the Llama default would be wrong
    untied = model_from_config({**cfg, "tie_word_embeddings": False}, "gemma-7b.json")
    assert untied["params"] - record["params"] == 256000 * 3072


def test_head_dim_is_taken_when_given():
    record = model_from_config_file(DATA / "good_configs" / "llama-3.2-1b.json")
    assert record["head_dim"] == 64 and record["tied_embeddings"] is True


def test_sliding_window_is_noted():
    mistral = model_from_config_file(DATA / "good_configs" / "mistral-7b-v0.1.json")
    assert "Sliding-window attention over 4,096 tokens" in mistral["notes"]
    qwen = model_from_config_file(DATA / "good_configs" / "qwen2-7b.json")  # use_sliding_window: false
    assert "Sliding-window" not in qwen["notes"]


def test_missing_kv_heads_default_to_the_attention_heads():
    cfg = json.loads((DATA / "good_configs" / "llama-2-7b.json").read_text())
    del cfg["num_key_value_heads"]
    assert model_from_config(cfg)["num_kv_heads"] == 32


# bad config -> words the one-line message must contain (besides the file's name)
BAD = {
    "absurd-layers.json": ["field 'num_hidden_layers'", "<= 1,000", "100,000"],
    "absurd-vocab.json": ["field 'vocab_size'", "<= 10,000,000"],
    "attention-bias.json": ["field 'attention_bias'", "accepted: false"],
    "deeply-nested.json": ["nested too deeply"],
    "duplicate-key.json": ["'hidden_size' appears twice"],
    "empty.json": ["is empty"],
    "fractional-layers.json": ["field 'num_hidden_layers'", "whole number", "32.5"],
    "head-dim-undefined.json": ["field 'head_dim'", "4100"],
    "head-dim-zero.json": ["field 'head_dim'", "> 0"],
    "hidden-size-as-text.json": ["field 'hidden_size'", "whole number", "'4096'"],
    "hidden-size-boolean.json": ["field 'hidden_size'", "whole number", "True"],
    "hidden-size-nan.json": ["field 'hidden_size'", "nan"],
    "intermediate-null.json": ["field 'intermediate_size'", "null"],
    "kv-heads-above-heads.json": ["field 'num_key_value_heads'", "divide", "64"],
    "kv-heads-not-a-divisor.json": ["field 'num_key_value_heads'", "divide", "got 7"],
    "llama-with-experts.json": ["field 'num_local_experts'", "mixture-of-experts"],
    "llava-multimodal.json": ["field 'model_type'", "'llava'", "text_config"],
    "max-position-missing.json": ["field 'max_position_embeddings'", "missing"],
    "missing-hidden-size.json": ["field 'hidden_size'", "missing"],
    "missing-model-type.json": ["field 'model_type'", "missing"],
    "mlp-bias.json": ["field 'mlp_bias'"],
    "phi3-attention-bias.json": ["field 'attention_bias'", "accepted: false"],  # (Phi-4 with biases it does not have)
    "mixtral-top-k-above-experts.json": ["field 'num_experts_per_tok'", "at most num_local_experts (8)", "got 10"],
    "deepseek-missing-experts.json": ["field 'n_routed_experts'", "missing"],
    "model-type-number.json": ["field 'model_type'", "5 is not supported"],
    # a list or an object is not a type name (it crashed the lookup: found by mutating the good configs)
    "model-type-list.json": ["field 'model_type'", "must be text, got list", "['llama']"],
    "negative-vocab.json": ["field 'vocab_size'", "> 0", "-32000"],
    "not-utf8.json": ["not UTF-8", "0xe9"],
    "number-with-5000-digits.json": ["thousands of digits"],
    "qwen2-moe-keys.json": ["field 'num_experts'", "mixture-of-experts"],
    "tie-as-text.json": ["field 'tie_word_embeddings'", "true or false", "'yes'"],
    "too-many-parameters.json": ["parameters; at most 100,000,000,000,000"],
    "top-level-list.json": ["must be a JSON object", "list"],
    "truncated.json": ["not valid JSON", "line"],
    "unsupported-gpt2.json": ["field 'model_type'", "'gpt2' is not supported"],
    "vocab-infinity.json": ["field 'vocab_size'", "inf"],
    "zero-heads.json": ["field 'num_attention_heads'", "> 0"],
}


def test_the_bad_corpus_has_at_least_20_files_each_with_an_expectation():
    files = {p.name for p in (DATA / "bad_configs").iterdir()}
    assert len(files) >= 20
    assert files == set(BAD)


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_config_is_refused_with_one_line_naming_file_and_field(name):
    path = DATA / "bad_configs" / name
    with pytest.raises(CatalogError) as info:
        model_from_config_file(path)
    message = str(info.value)
    # one line; its length is ours to keep short, not the length of the folder a clone lives in (an unknown
    # model_type's line lists the 33 types read, about 350 characters of it)
    assert "\n" not in message and len(message.replace(str(path), name)) < 480, message
    assert name in message
    for word in BAD[name]:
        assert word in message, (word, message)
    # the same bytes uploaded (the Catalog page's path) give the same answer
    with pytest.raises(CatalogError) as again:
        model_from_config_text(path.read_bytes(), "uploaded.json")
    assert str(again.value) == message.replace(str(path), "uploaded.json")


def test_an_oversized_config_is_refused_before_reading(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "pad": "' + "x" * MAX_CONFIG_BYTES + '"}')
    with pytest.raises(CatalogError, match=r"config\.json: is [\d,]+ bytes; a config\.json is at most 1,000,000"):
        model_from_config_file(path)


def test_a_byte_order_mark_is_accepted():
    raw = (DATA / "good_configs" / "qwen2-7b.json").read_bytes()
    assert model_from_config_text(b"\xef\xbb\xbf" + raw, "qwen2-7b.json")["params"] == 7_615_616_512


def test_a_hostile_name_is_kept_as_the_display_name_only():
    cfg = json.loads((DATA / "good_configs" / "gemma-2b.json").read_text())
    cfg["_name_or_path"] = '=HYPERLINK("http://x")'
    record = model_from_config(cfg)
    assert record["name"] == '=HYPERLINK("http://x")'
    assert record["id"] == "hyperlink-http-x"


def test_a_config_has_no_release_date_and_none_is_invented():
    record = model_from_config_file(DATA / "good_configs" / "mistral-7b-v0.1.json")
    assert record["release_date"] is None
    assert "Release date unknown" in record["notes"]


def test_a_config_model_runs_through_the_engine(models):
    record = model_from_config_file(DATA / "good_configs" / "qwen2-7b.json")
    frame = pd.concat([models, pd.DataFrame([record])], ignore_index=True)
    out = estimate(pd.DataFrame([{"model": record["id"], "task": "infer", "precision": "bf16", "seq": 1024}]), frame)
    # bf16 weights: 2 bytes for each of the 7,615,616,512 parameters, biases included
    assert out["weights_bytes"].iloc[0] == 2 * 7_615_616_512
    # KV cache: 2 (k and v) x 28 layers x 4 kv heads x 128 x 2 bytes per token
    assert out["kv_cache_bytes"].iloc[0] == 1024 * 2 * 28 * 4 * 128 * 2


def _cli(*args):
    """`python -m engine *args`, in this process (tests/clirun.py), as a finished process's fields."""
    code, out, err = run_cli(*args)
    return SimpleNamespace(returncode=code, stdout=out, stderr=err)


def test_cli_estimates_a_config_and_refuses_a_bad_one_in_one_line():
    good = _cli("estimate", "--model-config", str(DATA / "good_configs" / "mistral-7b-v0.1.json"),
                "--task", "infer", "--precision", "bf16", "--json")
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["params"] == 7_241_732_096
    bad = _cli("estimate", "--model-config", str(DATA / "bad_configs" / "llama-with-experts.json"), "--task", "infer")
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "num_local_experts" in lines[0] and "Traceback" not in bad.stderr


# A config.json of a catalog model (the same fields: checked below) must get the catalog entry's answer:
# terms keyed on the architecture (Gemma's norms, Gemma 2's and gpt-oss's eager scores under transformers,
# gpt-oss's clamped GLU) read the model_type of a "custom-<model_type>" family as they read a catalog
# family (engine/params.py model_types). Before, an imported Gemma 2 9B came out at 55% of its catalog
# twin's peak (LoRA, 2 x 2,048) and gpt-oss-20b's prefill (4 x 8,192) at 26%.
TWINS = {"llama-2-7b.json": "llama-2-7b", "llama-3.2-1b.json": "llama-3.2-1b", "mistral-7b-v0.1.json": "mistral-7b",
         "qwen2.5-0.5b.json": "qwen2.5-0.5b", "gemma-2b.json": "gemma-2b", "gemma-7b.json": "gemma-7b",
         "mixtral-8x7b-v0.1.json": "mixtral-8x7b", "gemma-2-9b.json": "gemma-2-9b", "deepseek-v3.json": "deepseek-v3",
         "gpt-oss-20b.json": "gpt-oss-20b", "qwen3-30b-a3b.json": "qwen3-30b-a3b", "phi-4.json": "phi-4",
         "phi-4-mini.json": "phi-4-mini", "smollm3-3b.json": "smollm3-3b",
         # multimodal: the language model from text_config (or the top level), the vision tower from vision_config
         "mistral-small-3.1-24b.json": "mistral-small-3.1-24b", "qwen2.5-vl-7b.json": "qwen2.5-vl-7b",
         "gemma-3-4b-it.json": "gemma-3-4b", "llama-4-scout.json": "llama-4-scout"}
TWIN_SCENARIOS = [
    {"task": "train", "method": "lora", "batch": 2, "seq": 2048},
    {"task": "train", "method": "full", "batch": 1, "seq": 1024, "precision": "mixed_bf16", "grad_checkpointing": True},
    {"task": "train", "method": "qlora", "batch": 4, "seq": 512, "attention": "eager"},
    {"task": "train", "method": "lora", "batch": 2, "seq": 1024, "recipe": "torchtune"},
    {"task": "train", "method": "lora", "batch": 2, "seq": 1024, "recipe": "hf", "liger": "on"},
    {"task": "infer", "precision": "bf16", "batch": 4, "seq": 4096},
    {"task": "infer", "precision": "int4", "batch": 1, "seq": 2048, "kv_policy": "windowed"},
    {"task": "infer", "precision": "q4_k_m", "batch": 1, "seq": 2048},
]


def test_a_config_of_a_catalog_model_gets_its_catalog_twins_answer(models):
    records, rows = [], []
    for name, twin in sorted(TWINS.items()):
        record = model_from_config_file(DATA / "good_configs" / name)
        mine = models.set_index("id").loc[twin]
        differ = [k for k in record if k in mine.index and k not in ("id", "name", "family", "source", "notes", "release_date")
                  and not (pd.isna(record[k]) and pd.isna(mine[k])) and record[k] != mine[k]]
        assert not differ, f"{name}: the config's fields differ from {twin}'s: {differ}"
        assert record["family"].startswith("custom-")
        record = {**record, "id": f"config-{name}"}  # (a config may carry its catalog twin's id)
        records.append(record)
        rows += [{"model": model, **sc} for sc in TWIN_SCENARIOS for model in (twin, record["id"])]
    frame = pd.concat([models, pd.DataFrame(records)], ignore_index=True)
    out = estimate(pd.DataFrame(rows), frame)
    ours, theirs = out.iloc[0::2].reset_index(drop=True), out.iloc[1::2].reset_index(drop=True)
    numeric = [c for c in out.columns if pd.api.types.is_numeric_dtype(out[c]) and not pd.api.types.is_bool_dtype(out[c])]
    assert len(numeric) > 50
    for col in numeric:
        a, b = ours[col].to_numpy(dtype=float), theirs[col].to_numpy(dtype=float)
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        assert same.all(), (col, [(ours["model"].iloc[i], TWIN_SCENARIOS[i % len(TWIN_SCENARIOS)], a[i], b[i])
                                  for i in np.flatnonzero(~same)[:3]])


@pytest.mark.parametrize("name", ["gemma-2-9b.json", "gpt-oss-20b.json"])
def test_serve_under_transformers_counts_a_configs_eager_prefill_as_its_twins(name):
    # engine/serving.py reads the same model_type: a transformers prefill of Gemma 2 / gpt-oss attends eagerly
    args = ("--engine", "transformers", "--gpu", "h100-sxm-80gb", "--max-model-len", "8192", "--json")
    twin = json.loads(_cli("serve", "--model", TWINS[name], *args).stdout)
    mine = json.loads(_cli("serve", "--model-file", str(DATA / "good_configs" / name), *args).stdout)
    assert mine["activation_peak_bytes"] == twin["activation_peak_bytes"] > 9e9


@pytest.mark.parametrize("name, twin", [("mistral-small-3.1-24b.json", "mistral-small-3.1-24b"),
                                        ("qwen2.5-vl-7b.json", "qwen2.5-vl-7b"), ("gemma-3-4b-it.json", "gemma-3-4b"),
                                        ("llama-4-scout.json", "llama-4-scout")])
def test_a_multimodal_configs_vision_tower_is_counted_as_its_checkpoint_holds_it(models, name, twin):
    """Pixtral + Mistral3's projector, Qwen2.5-VL's vision transformer + merger and SigLIP + Gemma 3's projector,
    counted from vision_config (catalog/user.py vision_params_from_config), equal the catalog's vision_params: each
    checkpoint's published total less its language model (Hub safetensors totals, transformers' counts; the
    entries' notes). The family is the checkpoint's own model_type (Liger patches gemma3 and qwen2_5_vl, not
    mistral3: the twin test's Liger scenario agrees with the catalog's)."""
    record = model_from_config_file(DATA / "good_configs" / name)
    assert record["vision_params"] == int(models.set_index("id").loc[twin, "vision_params"]) > 4e8
    assert record["family"] == "custom-" + json.loads((DATA / "good_configs" / name).read_text())["model_type"]
    assert "counted from vision_config" in record["notes"]
    if twin == "llama-4-scout":  # the language model and the tower make the checkpoint's published total
        assert record["params"] + record["vision_params"] == 108_641_793_536


def test_docs_name_every_architecture_a_config_may_have():
    from catalog.user import SUPPORTED
    doc = " ".join((ROOT / "docs" / "models.md").read_text(encoding="utf-8").split())
    listed = doc[doc.index("The architectures a config.json may name"):doc.index("## What is refused")]
    assert [t for t in SUPPORTED if f" {t}," not in listed and f" {t} (" not in listed] == []
