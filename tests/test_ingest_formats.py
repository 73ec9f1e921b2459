"""`ingest` of the logs users already have from other tools (planner/ingest.py, docs/ingest.md): SGLang server
start-up logs and torchtune recipe logs.

The fixtures in tests/data/run_logs/ are written from the tools' own format strings (each file's first lines say
which, and where the values come from); the format strings themselves are rendered below with Python's formatting,
as the tools' loggers render them, so a parser that drifts from the upstream string fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from planner.ingest import GIB, IngestError, parse_run, parse_sglang, parse_torchtune
from tests.clirun import run_cli

DATA = Path(__file__).resolve().parent / "data" / "run_logs"
SGLANG = DATA / "sglang-qwen3-14b-tp4-rtx4090.log"
TORCHTUNE = DATA / "torchtune-llama32-3b-lora.log"


# every test saves into its own runs file, never the user's (tests/conftest.py runs_file)
pytestmark = pytest.mark.usefixtures("runs_file")


# ---- SGLang ----------------------------------------------------------------------------------------

# SGLang's f-strings (sgl-project/sglang python/sglang/srt/), as its logger renders them
def _sglang_args(model="meta-llama/Llama-3.1-8B-Instruct", dtype="auto", quantization=None, kv_cache_dtype="auto",
                 context_length=None, fraction=0.83, tp=1, pp=1, speculative_algorithm=None) -> str:
    fields = dict(model_path=model, tokenizer_path=model, dtype=dtype, kv_cache_dtype=kv_cache_dtype,
                  quantization=quantization, context_length=context_length, mem_fraction_static=fraction,
                  tp_size=tp, pp_size=pp, dp_size=1, speculative_algorithm=speculative_algorithm,
                  speculative_draft_model_path=None if speculative_algorithm is None else "lmsys/sglang-EAGLE3-LLaMA3.1")
    server_args = "ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"  # the dataclass repr
    return f"server_args={server_args}"  # logger.info(f"{server_args=}")


def _load_end(quant_str=None, after=60.11, usage=14.99, elapsed=5.31, kind="LlamaForCausalLM") -> str:
    return (f"Load weight end. elapsed={elapsed:.2f} s, type={kind}, {quant_str + ', ' if quant_str else ''}"
            f"avail mem={after:.2f} GB, mem usage={usage:.2f} GB.")


def _kv(tokens, k=None, v=None, kv=None) -> str:
    gb = 1024 ** 3
    if kv is not None:
        return f"KV Cache is allocated. #tokens: {tokens}, KV size: {kv / gb:.2f} GB"
    return f"KV Cache is allocated. #tokens: {tokens}, K size: {k / gb:.2f} GB, V size: {v / gb:.2f} GB"


def _refused_unsaved(runs_file: Path, log, gpu: str, message: str) -> None:
    """`ingest LOG --gpu GPU --save`: exit 2, one `error: ` line holding `message`, no traceback, nothing saved."""
    code, out, err = run_cli("ingest", log, "--gpu", gpu, "--save")
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("error: ") and message in err, err
    assert not runs_file.exists()


def _total(tokens, context) -> str:
    return (f"max_total_num_tokens={tokens}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            f"max_running_requests=4096, context_len={context}, available_gpu_mem=8.51 GB")


def test_the_sglang_log_gives_its_server_args_and_memory_lines():
    run = parse_sglang(SGLANG.read_text())
    assert run["format"] == "sglang" and run["model_read"] == "Qwen/Qwen3-14B"
    assert run["settings"] == {"task": "infer", "engine": "sglang", "precision": "bf16", "max_model_len": 40960,
                               "gpus": 4, "gpu_memory_utilization": 0.8}
    # GB in SGLang's lines is 2**30 bytes (memory_pool.py GB, get_available_gpu_memory's / (1 << 30)); K + V the pool
    assert run["measured"] == {"weights": pytest.approx(7.08 * GIB), "kv_cache_memory": pytest.approx(11.38 * GIB),
                               "kv_cache_tokens": 298447}
    assert run["notes"] == []


def test_the_sglang_sample_is_compared_with_serve_engine_sglang():
    """The pool against serve --engine sglang's kv_cache_bytes_allocated (its whole pool), the weights against
    weights_gpu_bytes, the pool's tokens against num_gpu_blocks x 16, at the fraction the log prints."""
    code, out, err = run_cli("ingest", SGLANG, "--gpu", "rtx-4090", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert list(data) == ["format", "file", "model", "model_read", "gpu", "scenario", "figures", "notes", "saved_id",
                          "saved_before", "schema_version"]
    assert data["format"] == "sglang" and data["model"] == "qwen3-14b"
    assert data["scenario"] == {"model": "qwen3-14b", "gpu": "rtx-4090", "task": "infer", "engine": "sglang",
                                "precision": "bf16", "max_model_len": 40960, "gpus": 4, "gpu_memory_utilization": 0.8}
    figures = {f["figure"]: f for f in data["figures"]}
    assert list(figures) == ["weights", "kv_cache_memory", "kv_cache_tokens"]
    assert [figures[f]["metric"] for f in figures] == ["weights_bytes", "kv_cache_bytes", "kv_cache_tokens"]
    code, serve, err = run_cli("serve", "--model", "qwen3-14b", "--gpu", "rtx-4090", "--engine", "sglang", "--gpus", "4",
                               "--max-model-len", "40960", "--gpu-memory-utilization", "0.8", "--json")
    assert code == 0, err
    serve = json.loads(serve)
    serve = serve[0] if isinstance(serve, list) else serve
    assert figures["weights"]["estimate"] == pytest.approx(serve["weights_gpu_bytes"])
    assert figures["kv_cache_memory"]["estimate"] == pytest.approx(serve["kv_cache_bytes_allocated"])
    assert figures["kv_cache_tokens"]["estimate"] == pytest.approx(serve["num_gpu_blocks"] * 16)
    assert all(abs(f["error_pct"]) < 5 for f in figures.values()), figures  # -2.9, +2.0, +2.0 on this report
    # the weights are the card's free memory falling while loading, not a file size: the counter says so
    assert "free memory" in figures["weights"]["counter"] and "K + V" in figures["kv_cache_memory"]["counter"]
    code, text, err = run_cli("ingest", SGLANG, "--gpu", "rtx-4090")
    assert code == 0 and err == ""
    assert text.splitlines()[0].startswith("sglang run of qwen3-14b (read: Qwen/Qwen3-14B) on rtx-4090")
    assert [line.split()[0] for line in text.splitlines()[2:]] == ["weights", "kv_cache_memory", "kv_cache_tokens"]


def test_the_newer_sglang_strings_parse():
    """The current load_model line (elapsed, the checkpoint's quant_str, no dtype) and an MLA pool's single size."""
    text = "\n".join([
        "[2026-03-02 10:00:00] " + _sglang_args(model="deepseek-ai/DeepSeek-V2-Lite-Chat", tp=2, fraction=0.85),
        "[2026-03-02 10:00:40 TP0] " + _load_end(usage=15.72, kind="DeepseekV2ForCausalLM"),
        "[2026-03-02 10:00:40 TP1] " + _load_end(usage=15.80, kind="DeepseekV2ForCausalLM"),
        "[2026-03-02 10:00:41 TP0] " + _kv(1_000_000, kv=27.1 * GIB),
        "[2026-03-02 10:00:41 TP1] " + _kv(999_000, kv=27.0 * GIB),
        "[2026-03-02 10:00:55 TP0] " + _total(999_000, 163840),
    ])
    run = parse_run(text)
    assert run["format"] == "sglang" and run["settings"]["gpus"] == 2 and run["settings"]["max_model_len"] == 163840
    assert run["settings"]["precision"] == "bf16"
    assert run["notes"] == ["this SGLang log prints dtype='auto' and no loaded dtype: estimated as bf16 (fp16 weighs "
                            "the same)"]
    # the largest rank's weights, the smallest rank's pool and its tokens
    assert run["measured"] == {"weights": pytest.approx(15.80 * GIB), "kv_cache_memory": pytest.approx(27.0 * GIB),
                               "kv_cache_tokens": 999_000}


@pytest.mark.parametrize("args, load, precision, note", [
    (dict(quantization="fp8"), _load_end(), "fp8", None),
    (dict(quantization="w8a8_int8"), _load_end(), "int8", None),
    (dict(), _load_end(quant_str="quant=fp8, fmt=e4m3"), "fp8", None),
    (dict(), _load_end(quant_str="quant=gptq, bits=4"), "int4", None),
    (dict(), _load_end(quant_str="quant=awq, bits=8"), "int8", None),
    (dict(model="nvidia/Llama-3.1-8B-Instruct-FP4"), _load_end(quant_str="quant=modelopt_fp4, quant_algo=NVFP4"),
     "nvfp4", None),
    (dict(dtype="float16"), _load_end(), "fp16", None),
    # the 0.4 series: quantization=None for an FP8 checkpoint and a load line naming the activations' dtype only
    (dict(model="Qwen/Qwen3-235B-A22B-FP8"),
     "Load weight end. type=Qwen3MoeForCausalLM, dtype=torch.bfloat16, avail mem=42.10 GB, mem usage=54.62 GB.", "fp8",
     "the scheme in the model's name ('Qwen/Qwen3-235B-A22B-FP8') is read: fp8"),
    (dict(), "Load weight end. type=LlamaForCausalLM, dtype=torch.float16, avail mem=60.11 GB, mem usage=14.99 GB.",
     "fp16", None),
])
def test_the_sglang_weight_precision_is_read_where_the_log_says_it(args, load, precision, note):
    run = parse_sglang("\n".join([_sglang_args(**args), load, _kv(400_000, k=24 * GIB, v=24 * GIB), _total(400_000, 8192)]))
    assert run["settings"]["precision"] == precision
    assert (note in run["notes"][0]) if note else run["notes"] == []


def test_an_sglang_fp8_kv_cache_is_read():
    run = parse_sglang("\n".join([_sglang_args(kv_cache_dtype="fp8_e4m3"), _load_end(), _total(900_000, 8192),
                                  _kv(900_000, k=27 * GIB, v=27 * GIB)]))
    assert run["settings"]["kv_precision"] == "fp8"


@pytest.mark.parametrize("text, message", [
    (_load_end() + "\n" + _kv(1000, k=GIB, v=GIB),
     "this SGLang log has no 'server_args=ServerArgs(...)' line (model_path, dtype, tp_size, mem_fraction_static); "
     "ingest the whole start-up log"),
    (_sglang_args() + "\n" + _load_end(),
     "this SGLang log prints no context length (no 'max_total_num_tokens=..., context_len=N' line, and server_args "
     "context_length=None); ingest the whole start-up log"),
    (_sglang_args(quantization="gguf") + "\n" + _load_end() + "\n" + _total(1000, 8192),
     "SGLang quantization 'gguf' (server_args quantization='gguf') is not read; accepted: fp8, awq,"),
    (_sglang_args(tp=0) + "\n" + _load_end() + "\n" + _total(1000, 8192),
     "this SGLang log's tp_size is 0; accepted: a whole number of GPUs from 1 to 4,096"),
    (_sglang_args() + "\n" + _load_end() + "\n" + _total(1000, 0),
     "this SGLang log's context_len is 0; accepted: a whole number of tokens from 1 to 100,000,000"),
    (_sglang_args(fraction=1.7) + "\n" + _load_end() + "\n" + _total(1000, 8192),
     "this SGLang log's mem_fraction_static is 1.7; accepted: a share of the card above 0 and at most 1"),
])
def test_a_partial_or_bad_sglang_log_is_refused_in_one_line(tmp_path, runs_file, text, message):
    log = tmp_path / "sglang.log"
    log.write_text(text + "\n")
    _refused_unsaved(runs_file, log, "h100-sxm-80gb", message)
    with pytest.raises(IngestError):
        parse_run(text)


@pytest.mark.parametrize("log, gpu, said", [
    (SGLANG, "rtx-3060-ti",
     "the sglang run held 18.46 GiB on one GPU (weights 7.08 + kv_cache_memory 11.38), more than rtx-3060-ti"),
    (TORCHTUNE, "rtx-3060-12gb", "the torchtune run held 14.62 GiB on one GPU (reserved_peak 14.62), more than rtx-3060-12gb"),
])
def test_a_run_that_holds_more_than_the_gpu_has_is_refused(runs_file, log, gpu, said):
    _refused_unsaved(runs_file, log, gpu, said)


def test_a_saved_sglang_run_is_listed_by_evidence_as_the_users(runs_file):
    code, out, err = run_cli("ingest", SGLANG, "--gpu", "rtx-4090", "--save")
    assert code == 0, err
    ident = "user-sglang-qwen3-14b-sglang-qwen3-14b-tp4-rtx4090"
    assert out.splitlines()[-1] == f"saved as {ident} (see: evidence)"
    assert "gpu_memory_utilization: 0.8" in runs_file.read_text()
    code, out, err = run_cli("evidence", "--json")
    assert code == 0, err
    mine = [r for r in json.loads(out) if r["source_kind"] == "user"]
    assert [r["id"] for r in mine] == [f"{ident}-{f}" for f in ("weights", "kv-cache-memory", "kv-cache-tokens")]
    assert mine[0]["reference"] == 7.08 and mine[0]["unit"] == "GiB" and "free memory" in mine[0]["counter"]
    assert mine[1]["reference"] == 11.38 and all(r["recipe"] == "sglang" for r in mine)
    code, out, err = run_cli("ingest", SGLANG, "--gpu", "rtx-4090", "--save")
    assert code == 0 and out.splitlines()[-1].startswith(f"already saved as {ident}")


def test_the_evidence_page_lists_a_saved_sglang_run_marked_yours(runs_file):
    from streamlit.testing.v1 import AppTest

    from tests.test_pages import DASHBOARD
    assert run_cli("ingest", SGLANG, "--gpu", "rtx-4090", "--save")[0] == 0
    at = AppTest.from_file(DASHBOARD, default_timeout=60)
    at.switch_page("pages/evidence.py").run()
    assert not at.exception, [e.value for e in at.exception]
    view = at.dataframe[0].value.set_index("Reference")
    mine = view[view["Whose"] == "yours"]
    ident = "user-sglang-qwen3-14b-sglang-qwen3-14b-tp4-rtx4090"
    assert list(mine.index) == [f"{ident}-{f}" for f in ("weights", "kv-cache-memory", "kv-cache-tokens")]
    assert mine.loc[f"{ident}-kv-cache-memory", "Published"] == 11.38


# ---- torchtune -------------------------------------------------------------------------------------

def _tt_parts() -> tuple[str, str, str]:
    """The sample split: its resolved-config block, the recipe's other output, the DiskLogger's step lines."""
    text = TORCHTUNE.read_text()
    head, rest = text.split("Setting manual seed", 1)
    output, steps = rest.split("Step 1 |", 1)
    return head, "Setting manual seed" + output, "Step 1 |" + steps


def test_the_torchtune_log_gives_the_recipe_settings_and_the_step_counters():
    run = parse_torchtune(TORCHTUNE.read_text())
    assert run["format"] == "torchtune" and run["model_read"] == "/tmp/Llama-3.2-3B-Instruct"
    assert run["settings"] == {
        "task": "train", "recipe": "torchtune", "method": "lora", "precision": "bf16", "optimizer": "adamw_fused",
        "batch": 4, "seq": 2048, "gpus": 1, "grad_checkpointing": True, "activation_offload": "off",
        "optimizer_in_backward": "off", "compile": "off", "packing": "on", "loss": "linear_chunked",
        "lora_targets": "q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", "lora_rank": 64}
    # the largest step's counters (each step's is the peak since the previous one), GiB = 1024**3 bytes; the model-init
    # stats (6.22 / 6.27 GiB, the load's peak) are not a training step's
    assert run["measured"] == {"allocated_peak": pytest.approx(13.91 * GIB), "reserved_peak": pytest.approx(14.62 * GIB)}
    assert run["lines"]["allocated_peak"].startswith("Step 2 | loss:1.5409")


def test_a_torchtune_run_is_compared_as_the_snippets_line_with_the_same_settings(tmp_path):
    """The step counters are torch.cuda.max_memory_allocated / max_memory_reserved, the snippet's two counters: the
    same scenario gives the same figures on our side (allocated_peak_bytes, reserved_peak_bytes)."""
    code, out, err = run_cli("ingest", TORCHTUNE, "--gpu", "rtx-4090", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert list(data) == ["format", "file", "model", "model_read", "gpu", "scenario", "figures", "notes", "saved_id",
                          "saved_before", "schema_version"]
    assert data["format"] == "torchtune" and data["model"] == "llama-3.2-3b" and data["notes"] == []
    tt = {f["figure"]: f for f in data["figures"]}
    assert [(f["figure"], f["metric"]) for f in data["figures"]] == [("allocated_peak", "allocated_peak_bytes"),
                                                                     ("reserved_peak", "reserved_peak_bytes")]
    assert "max_memory_allocated" in tt["allocated_peak"]["counter"]
    assert "max_memory_reserved" in tt["reserved_peak"]["counter"]
    line = {"llm_planner_run": 1, "model": "llama-3.2-3b", **{k: v for k, v in data["scenario"].items()
                                                             if k not in ("model", "gpu")},
            "max_memory_allocated": tt["allocated_peak"]["measured"], "max_memory_reserved": tt["reserved_peak"]["measured"]}
    snippet = tmp_path / "run.jsonl"
    snippet.write_text(json.dumps(line) + "\n")
    code, out, err = run_cli("ingest", snippet, "--gpu", "rtx-4090", "--json")
    assert code == 0, err
    same = {f["figure"]: f for f in json.loads(out)["figures"]}
    for figure in ("allocated_peak", "reserved_peak"):
        assert tt[figure]["estimate"] == same[figure]["estimate"] and tt[figure]["error_pct"] == same[figure]["error_pct"]
    assert abs(tt["allocated_peak"]["error_pct"]) < 15, tt


def test_the_torchtune_format_strings_rendered_parse():
    """get_memory_stats' dict through StdoutLogger's / DiskLogger's txt and DiskLogger's jsonl lines, and both wordings
    of log_memory_stats (before PR #2406: "peak memory allocation")."""
    head, _, _ = _tt_parts()
    stats = {"peak_memory_active": 9.123456789, "peak_memory_alloc": 9.123456789, "peak_memory_reserved": 10.5}
    txt = "Step {} | ".format(7) + "".join("{}:{} ".format(k, v) for k, v in {"loss": 1.2, **stats}.items())
    jsonl = json.dumps({"step": 8} | {"loss": 1.1, **stats, "peak_memory_reserved": 10.75})
    init_new = "Memory stats after model init:\n" + "\n".join(
        "\t{} {}: {:.2f} GiB".format("GPU", k.replace("_", " "), v) for k, v in stats.items())
    init_old = ("Memory stats after model init:" + "\n\t{} peak memory allocation: {:.2f} GiB".format("GPU", 6.21)
                + "\n\t{} peak memory reserved: {:.2f} GiB".format("GPU", 6.27))
    run = parse_torchtune("\n".join([head, init_new, txt, jsonl]))
    assert run["measured"] == {"allocated_peak": pytest.approx(9.123456789 * GIB),
                               "reserved_peak": pytest.approx(10.75 * GIB)}
    for init in (init_new, init_old):
        with pytest.raises(IngestError, match="has only the model-init memory stats"):
            parse_torchtune(head + "\n" + init + "\n")


def _tt_with(old: str, new: str) -> str:
    text = TORCHTUNE.read_text()
    assert old in text
    return text.replace(old, new)


@pytest.mark.parametrize("text, message", [
    ("".join(_tt_parts()[1:]), "this torchtune log has memory figures but not the recipe's settings; accepted: the "
                               "recipe's output from its 'Running <Recipe> with resolved config:' block on"),
    ("".join(_tt_parts()[:2]), "this torchtune log has only the model-init memory stats (the load's peak, not a "
                               "training step's); accepted: a run with log_peak_memory_stats: True"),
    (_tt_with("Running LoRAFinetuneRecipeSingleDevice", "Running LoRAFinetuneRecipeDistributed"),
     "this torchtune log is of recipe LoRAFinetuneRecipeDistributed; accepted: a log of LoRAFinetuneRecipeSingleDevice "
     "or FullFinetuneRecipeSingleDevice"),
    (_tt_with("  max_seq_len: 2048", "  max_seq_len: null"),
     "this torchtune log's tokenizer.max_seq_len is null: the batches' length is the dataset's, which the log does not "
     "print; accepted: a run with tokenizer.max_seq_len set"),
    (_tt_with("_component_: torch.optim.AdamW", "_component_: my.optim.Sophia"),
     "this torchtune log's optimizer 'my.optim.Sophia' is not read; accepted: torch.optim.AdamW,"),
    (re.sub(r" peak_memory_reserved:[0-9.]+ ", " ", TORCHTUNE.read_text()),  # get_memory_stats on MPS: no reserved
     "this torchtune log's step lines have peak_memory_alloc but no peak_memory_reserved (an MPS run"),
    (_tt_with("dtype: bf16", "dtype: int8"), "this torchtune log's dtype is 'int8'; accepted: bf16, fp32, fp16"),
])
def test_a_partial_or_bad_torchtune_log_is_refused_in_one_line(tmp_path, runs_file, text, message):
    log = tmp_path / "torchtune.log"
    log.write_text(text)
    _refused_unsaved(runs_file, log, "rtx-4090", message)


def test_a_saved_torchtune_run_is_listed_by_evidence_as_the_users(runs_file):
    code, out, err = run_cli("ingest", TORCHTUNE, "--gpu", "rtx-4090", "--save", "--json")
    assert code == 0, err
    ident = "user-torchtune-llama-3-2-3b-torchtune-llama32-3b-lora"
    assert json.loads(out)["saved_id"] == ident
    code, out, err = run_cli("evidence", "--json")
    assert code == 0, err
    mine = [r for r in json.loads(out) if r["source_kind"] == "user"]
    assert [r["id"] for r in mine] == [f"{ident}-allocated-peak", f"{ident}-reserved-peak"]
    assert [r["metric"] for r in mine] == ["allocated_peak_bytes", "reserved_peak_bytes"]
    assert mine[0]["reference"] == 13.91 and mine[1]["reference"] == 14.62 and {r["recipe"] for r in mine} == {"torchtune"}
    assert "max_memory_allocated" in mine[0]["counter"]


# ---- the snippet's settings beside the HF Trainer's memory metrics or DeepSpeed's see_memory_usage lines -------

HF_TRAINER = DATA / "hf-trainer-llama32-3b-lora.log"
DEEPSPEED = DATA / "deepspeed-llama32-1b-zero2.log"
TRAINER_KEYS = ("before_init_mem_gpu", "init_mem_gpu_alloc_delta", "train_mem_gpu_alloc_delta", "train_mem_gpu_peaked_delta")


def _marked(path: Path) -> dict:
    return json.loads(next(line for line in path.read_text().splitlines() if '"llm_planner_run"' in line))


def _same_settings_with_counter(tmp_path, path: Path, allocated: float) -> dict:
    """The figures of the snippet's line with the same settings and max_memory_allocated (and reserved) given."""
    line = {k: v for k, v in _marked(path).items() if k in ("llm_planner_run", "model", "task", "method", "precision",
                                                             "optimizer", "per_device_train_batch_size", "max_length",
                                                             "gradient_checkpointing", "lora_r", "gpus", "batch", "seq",
                                                             "grad_checkpointing", "zero", "recipe")}
    snippet = tmp_path / "same.jsonl"
    snippet.write_text(json.dumps({**line, "max_memory_allocated": allocated, "max_memory_reserved": allocated * 1.1}))
    code, out, err = run_cli("ingest", snippet, "--gpu", "l40s" if path is HF_TRAINER else "a100-80gb-sxm", "--json")
    assert code == 0, err
    return {f["figure"]: f for f in json.loads(out)["figures"]}


def test_the_trainer_memory_metrics_give_trains_max_memory_allocated(tmp_path):
    """TrainerMemoryTracker's peaked delta is the peak above what train() left allocated: the allocated peak is the
    four metrics summed (train()'s start = before_init + init's delta), compared as the snippet's
    max_memory_allocated (allocated_peak_bytes); the Trainer reports no reserved counter, so none is compared."""
    data = _marked(HF_TRAINER)
    run = parse_run(HF_TRAINER.read_text())
    assert run["format"] == "training"
    assert run["measured"] == {"allocated_peak": float(sum(data[k] for k in TRAINER_KEYS))}
    assert run["settings"]["seq"] == 1024 and run["settings"]["batch"] == 4 and run["settings"]["lora_rank"] == 16
    assert run["lines"]["allocated_peak"] == " + ".join(TRAINER_KEYS)
    assert "summed" in run["notes"][0]
    code, out, err = run_cli("ingest", HF_TRAINER, "--gpu", "l40s", "--json")
    assert code == 0, err
    figures = json.loads(out)["figures"]
    assert [(f["figure"], f["metric"]) for f in figures] == [("allocated_peak", "allocated_peak_bytes")]
    assert "max_memory_allocated" in figures[0]["counter"] and json.loads(out)["notes"] == run["notes"]
    same = _same_settings_with_counter(tmp_path, HF_TRAINER, figures[0]["measured"])
    assert figures[0]["estimate"] == same["allocated_peak"]["estimate"]
    assert figures[0]["error_pct"] == same["allocated_peak"]["error_pct"]


def test_deepspeed_see_memory_usage_gives_the_largest_max_ma(tmp_path):
    """see_memory_usage resets the peak after each line: the largest Max_MA (15.2 GiB, step 2's backward) is the run's
    max_memory_allocated; Max_CA (a whole GiB) is not compared."""
    ma, max_ma, ca, max_ca = 12.4912, 15.2049, 16.1, 16.43
    rendered = (f"MA {round(ma, 2 )} GB \
        Max_MA {round(max_ma, 2)} GB \
        CA {round(ca, 2)} GB \
        Max_CA {round(max_ca)} GB ")  # deepspeed/runtime/utils.py's f-string, continuation lines and all
    from planner.ingest import DS_MEMORY
    assert DS_MEMORY.search(rendered).groups() == ("12.49", "15.2", "16.1", "16")
    run = parse_run(DEEPSPEED.read_text())
    assert run["measured"] == {"allocated_peak": pytest.approx(15.2 * GIB)}
    assert run["lines"]["allocated_peak"] == "MA 12.49 GB Max_MA 15.2 GB CA 16.1 GB Max_CA 16 GB"
    assert run["settings"]["zero"] == 2 and run["settings"]["recipe"] == "deepspeed" and run["settings"]["gpus"] == 2
    assert "Max_CA is rounded to a whole GiB and not compared" in run["notes"][0]
    code, out, err = run_cli("ingest", DEEPSPEED, "--gpu", "a100-80gb-sxm", "--json")
    assert code == 0, err
    figures = json.loads(out)["figures"]
    assert [f["figure"] for f in figures] == ["allocated_peak"]
    same = _same_settings_with_counter(tmp_path, DEEPSPEED, figures[0]["measured"])
    assert figures[0]["estimate"] == same["allocated_peak"]["estimate"]


def _hf_line_without(*keys, **changes) -> str:
    data = _marked(HF_TRAINER)
    for key in keys:
        data.pop(key)
    return json.dumps({**data, **changes})


@pytest.mark.parametrize("text, message", [
    # the peaked delta alone: relative to the end of train(), whose memory the line does not give
    (_hf_line_without("before_init_mem_gpu", "init_mem_gpu_alloc_delta"),
     "the llm_planner_run line has the Trainer's train_mem_gpu_alloc_delta but no before_init_mem_gpu, "
     "init_mem_gpu_alloc_delta: train_mem_gpu_peaked_delta is the peak above what train() left allocated"),
    (_hf_line_without(train_mem_gpu_peaked_delta="Not available"),  # MPS
     "the llm_planner_run line's train_mem_gpu_peaked_delta is 'Not available'; accepted: a number of bytes"),
    # train()'s metrics saved alone (all_results.json / train_results.json): no settings
    (json.dumps({k: v for k, v in _marked(HF_TRAINER).items() if k.startswith(("train_", "init_", "before_", "epoch"))},
                indent=4),
     "this file holds the HF Trainer's memory metrics but not the run's settings (model, batch, seq, ...); accepted: "
     "the llm_planner_run line with train()'s metrics merged in"),
    ("\n".join(line for line in DEEPSPEED.read_text().splitlines() if "llm_planner_run" not in line),
     "this log holds DeepSpeed's see_memory_usage lines but not the run's settings; accepted: the llm_planner_run line"),
    # a Trainer key read as nothing unless the Trainer's metrics are merged in
    (_hf_line_without(*TRAINER_KEYS, "train_mem_cpu_alloc_delta", max_memory_allocated=1e10, max_memory_reserved=1.1e10),
     "the llm_planner_run line's keys 'train_runtime'"),
])
def test_trainer_or_deepspeed_counters_without_what_they_need_are_refused_in_one_line(tmp_path, runs_file, text,
                                                                                       message):
    log = tmp_path / "run.log"
    log.write_text(text + "\n")
    _refused_unsaved(runs_file, log, "l40s", message)


def test_a_saved_trainer_run_is_listed_by_evidence(runs_file):
    code, out, err = run_cli("ingest", HF_TRAINER, "--gpu", "l40s", "--save", "--json")
    assert code == 0, err
    ident = json.loads(out)["saved_id"]
    assert ident == "user-training-llama-3-2-3b-hf-trainer-llama32-3b-lora"
    code, out, err = run_cli("evidence", "--json")
    assert code == 0, err
    mine = [r for r in json.loads(out) if r["source_kind"] == "user"]
    assert [(r["id"], r["metric"]) for r in mine] == [(f"{ident}-allocated-peak", "allocated_peak_bytes")]
    assert mine[0]["setup_note"] == " + ".join(TRAINER_KEYS)


@pytest.mark.parametrize("hybrid", [
    # mem_cache/swa_memory_pool.py SWAKVPool: two MHA sub-pools, then its own line
    [_kv(1_200_000, k=6 * GIB, v=6 * GIB), _kv(2_500_000, k=1.5 * GIB, v=1.5 * GIB),
     "SWAKVPool mem usage: {:.2f} GB, swa size: {}, full size: {}".format(15.0, 1_200_000, 2_500_000)],
    # a linear-attention model's state cache beside its attention pool
    ["Mamba Cache is allocated. max_mamba_cache_size: {}, conv_state size: {:.2f}GB, ssm_state size: {:.2f}GB".format(
        614, 0.38, 10.81), _kv(1_933_682, k=6.2 * GIB, v=6.2 * GIB)],
])
def test_an_sglang_hybrid_pool_compares_the_weights_only(hybrid):
    """A sub-pool's line was taken for the pool (the smaller sub-pool's K + V against the engine's whole budget)."""
    run = parse_sglang("\n".join([_sglang_args(model="openai/gpt-oss-20b"), _load_end(usage=12.9), *hybrid,
                                  _total(2_500_000, 131072)]))
    assert run["measured"] == {"weights": pytest.approx(12.9 * GIB)}
    assert "hybrid pool" in run["notes"][-1] and "only the weights are compared" in run["notes"][-1]
    with pytest.raises(IngestError, match="hybrid pool .* no 'Load weight end' line"):
        parse_sglang("\n".join([_sglang_args(), *hybrid, _total(2_500_000, 8192)]))


def test_an_sglang_log_with_a_draft_model_compares_the_targets_weights_only():
    """The draft worker prints its own load and pool lines: the smaller pool was the draft's, taken for the target's."""
    run = parse_sglang("\n".join([
        _sglang_args(speculative_algorithm="EAGLE3"), _load_end(usage=14.99), _load_end(usage=0.81),
        _kv(400_000, k=24.4 * GIB, v=24.4 * GIB), _kv(400_100, k=0.76 * GIB, v=0.76 * GIB), _total(400_000, 8192)]))
    assert run["measured"] == {"weights": pytest.approx(14.99 * GIB)}
    assert "speculative_algorithm='EAGLE3'" in run["notes"][-1]
