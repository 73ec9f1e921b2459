"""`ingest` of the logs users already have from other tools (planner/ingest.py, docs/ingest.md): SGLang server
start-up logs and torchtune recipe logs.

The fixtures in tests/data/run_logs/ are written from the tools' own format strings (each file's first lines say
which, and where the values come from); the format strings themselves are rendered below with Python's formatting,
as the tools' loggers render them, so a parser that drifts from the upstream string fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.ingest import GIB, IngestError, parse_run, parse_sglang
from tests.clirun import run_cli

DATA = Path(__file__).resolve().parent / "data" / "run_logs"
SGLANG = DATA / "sglang-qwen3-14b-tp4-rtx4090.log"


@pytest.fixture(autouse=True)
def runs_file(tmp_path, monkeypatch):
    """Every test saves into its own runs file (never the user's)."""
    path = tmp_path / "user_runs.yaml"
    monkeypatch.setenv("LLM_PLANNER_USER_RUNS", str(path))
    return path


# ---- SGLang ----------------------------------------------------------------------------------------

# SGLang's f-strings (sgl-project/sglang python/sglang/srt/), as its logger renders them
def _sglang_args(model="meta-llama/Llama-3.1-8B-Instruct", dtype="auto", quantization=None, kv_cache_dtype="auto",
                 context_length=None, fraction=0.83, tp=1, pp=1) -> str:
    fields = dict(model_path=model, tokenizer_path=model, dtype=dtype, kv_cache_dtype=kv_cache_dtype,
                  quantization=quantization, context_length=context_length, mem_fraction_static=fraction,
                  tp_size=tp, pp_size=pp, dp_size=1)
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
    code, out, err = run_cli("ingest", log, "--gpu", "h100-sxm-80gb", "--save")
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("error: ") and message in err, err
    assert not runs_file.exists()
    with pytest.raises(IngestError):
        parse_run(text)


def test_an_sglang_run_that_holds_more_than_the_gpu_has_is_refused(runs_file):
    code, out, err = run_cli("ingest", SGLANG, "--gpu", "rtx-3060-ti", "--save")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "the sglang run held 18.46 GiB on one GPU (weights 7.08 + kv_cache_memory 11.38), more than rtx-3060-ti" in err
    assert not runs_file.exists()


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
