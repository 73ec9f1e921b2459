"""Issue 26, item 4: real runs come back (planner/ingest.py, `ingest FILE --gpu ID [--json] [--save]`).

The fixtures in tests/data/run_logs/ are written from the tools' own format strings with invented
values (each file's first lines say so); the format strings themselves are rendered below with
Python's % operator, as the tools' loggers render them, so a parser that drifts from the upstream
string fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.ingest import (
    GIB,
    MIB,
    IngestError,
    load_runs,
    match_model,
    parse_llamacpp,
    parse_run,
    parse_training,
    parse_vllm,
)
from tests.clirun import run_cli

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "run_logs"
VLLM = DATA / "vllm-llama31-8b-h100.log"
VLLM_TP2 = DATA / "vllm-tp2-unknown-model.log"
VLLM_V0 = DATA / "vllm-v0-llama31-8b-rtx4090.log"
LLAMACPP = DATA / "llamacpp-llama31-8b-q4km.log"
TRAINING = DATA / "training-llama32-3b-lora.jsonl"
NOT_A_RUN = DATA / "not-a-run.txt"


# every test saves into its own runs file, never the user's (tests/conftest.py runs_file)
pytestmark = pytest.mark.usefixtures("runs_file")


@pytest.fixture(scope="module")
def models():
    from catalog import default_catalog
    return default_catalog().models(include_user=True)


# ---- parsers ------------------------------------------------------------------------------------

def test_the_training_line_gives_the_counters_and_the_scenario():
    run = parse_training(TRAINING.read_text())
    assert run["format"] == "training" and run["model_read"] == "llama-3.2-3b"
    assert run["measured"] == {"allocated_peak": 13958643712.0, "reserved_peak": 15032385536.0}
    assert run["settings"] == {"task": "train", "method": "lora", "precision": "bf16", "batch": 4, "seq": 1024,
                               "grad_checkpointing": False, "lora_rank": 16, "optimizer": "adamw", "gpus": 1}
    assert run["versions"] == {"torch": "2.5.1", "transformers": "4.46.3"}
    assert parse_training("no marker here\n") is None


@pytest.mark.parametrize("line, problem", [
    ('{"llm_planner_run": 1, "model": "llama-3.2-3b", "max_memory_allocated": 1}', "max_memory_reserved"),
    ('{"llm_planner_run": 1, "model": "x", "max_memory_allocated": -1, "max_memory_reserved": 2}', "bytes > 0"),
    ('{"llm_planner_run": 1, "model": ', "not one JSON object"),
    # a print cut off mid-line (a killed job, a log rotated at a size) read "...: substring not found"
    ('{"llm_planner_run": 1, "model": "llama-3.2-3b", "max_memory_allocated": 139586',
     r"ends without its closing '}', cut off after '.*\"max_memory_allocated\": 139586'; accepted: the whole line"),
])
def test_a_broken_training_line_is_named(line, problem):
    with pytest.raises(IngestError, match=problem):
        parse_training(line)


def _training_line(**changes) -> str:
    """The sample's snippet line with keys replaced (a key set to None is left out)."""
    data = json.loads(TRAINING.read_text().splitlines()[-1])
    for key, value in changes.items():
        data.pop(key, None)
    data.update({k: v for k, v in changes.items() if v is not None})
    return json.dumps(data)


@pytest.mark.parametrize("alias, ours, value", [
    ("gradient_checkpointing", "grad_checkpointing", True),  # transformers TrainingArguments
    ("per_device_train_batch_size", "batch", 8),
    ("max_seq_length", "seq", 2048),  # TRL SFTConfig, later max_length
    ("max_length", "seq", 2048),
    ("lora_r", "lora_rank", 32),
])
def test_a_transformers_name_is_read_as_ours(tmp_path, alias, ours, value):
    """`"gradient_checkpointing": true` was dropped unseen and estimated without checkpointing (25.3 GiB beside
    the run's 13.0, +94.5%); the TrainingArguments / SFTConfig / LoRA names are read as the snippet's."""
    run = parse_training(_training_line(**{ours: None, alias: value}))
    assert run["settings"][ours] == value and alias not in run["settings"]
    assert run["settings"] == parse_training(_training_line(**{ours: value}))["settings"]
    if alias == "gradient_checkpointing":
        line = tmp_path / "run.jsonl"
        line.write_text(_training_line(grad_checkpointing=None, gradient_checkpointing=True))
        code, out, err = run_cli("ingest", line, "--gpu", "h100-sxm-80gb", "--json")
        assert code == 0, err
        line.write_text(_training_line(grad_checkpointing=True))
        assert json.loads(out)["figures"] == json.loads(run_cli("ingest", line, "--gpu", "h100-sxm-80gb", "--json")[1])[
            "figures"]
        assert json.loads(out)["scenario"]["grad_checkpointing"] is True


@pytest.mark.parametrize("steps, ours", [(8, "last"), (1, "every")])
def test_gradient_accumulation_steps_is_read_as_accum_sync(steps, ours):
    """TrainingArguments' gradient_accumulation_steps was refused as an unknown key (exit 2); above 1 the step's
    gradients stay alive between micro-batches (engine/stacks.py accum_sync last), 1 is one micro-batch a step."""
    run = parse_training(_training_line(gradient_accumulation_steps=steps))
    assert run["settings"]["accum_sync"] == ours and "gradient_accumulation_steps" not in run["settings"]


@pytest.mark.parametrize("value", [0, 2.5, "8", True])
def test_a_bad_gradient_accumulation_steps_names_the_value(value):
    with pytest.raises(IngestError, match=r"gradient_accumulation_steps .* is not read; accepted: a whole number >= 1"):
        parse_training(_training_line(gradient_accumulation_steps=value))


def test_gradient_accumulation_steps_and_accum_sync_must_agree():
    with pytest.raises(IngestError, match="gives accum_sync twice"):
        parse_training(_training_line(gradient_accumulation_steps=4, accum_sync="every"))
    assert parse_training(_training_line(gradient_accumulation_steps=4, accum_sync="last"))["settings"]["accum_sync"] == "last"


def test_lora_targets_as_peft_prints_them_are_read_as_our_comma_list(tmp_path):
    """PEFT's LoraConfig(target_modules=[...]) printed by json.dumps is a list: it reached the engine as its str() and
    was refused as 'lora target "['q_proj'" is not a Llama linear module', a value the line never held."""
    listed = parse_training(_training_line(lora_targets=["q_proj", "k_proj", "v_proj", "o_proj"]))
    assert listed["settings"]["lora_targets"] == "q_proj,k_proj,v_proj,o_proj"
    line = tmp_path / "run.jsonl"
    line.write_text(_training_line(lora_targets=["q_proj", "v_proj"]))
    code, out, err = run_cli("ingest", line, "--gpu", "h100-sxm-80gb", "--json")
    assert code == 0, err
    line.write_text(_training_line(lora_targets="q_proj,v_proj"))
    assert json.loads(out)["figures"] == json.loads(run_cli("ingest", line, "--gpu", "h100-sxm-80gb", "--json")[1])[
        "figures"]
    line.write_text(_training_line(lora_targets=["q_proj", "mlp"]))  # a wrong name is still named, as written
    code, out, err = run_cli("ingest", line, "--gpu", "h100-sxm-80gb")
    assert code == 2 and "'mlp'" in err and "[" not in err, err


@pytest.mark.parametrize("changes, message", [
    ({"foo": 3}, "the llm_planner_run line's key 'foo' is not read; accepted: model, max_memory_allocated, "
                 "max_memory_reserved, torch, transformers, peft, trl, a scenario column (task, method, precision, batch, "
                 "seq, grad_checkpointing, lora_rank, optimizer, gpus, ...: docs/ingest.md) or an alias "
                 "(gradient_checkpointing, per_device_train_batch_size, max_seq_length, max_length, lora_r, "
                 "gradient_accumulation_steps)"),
    ({"grad_checkpointing": None, "grad_checkpoint": True},
     "the llm_planner_run line's key 'grad_checkpoint' (did you mean 'grad_checkpointing'?) is not read; accepted: "
     "the snippet's keys, a scenario column or an alias (docs/ingest.md)"),
    # TrainingArguments' optim takes its own values ("adamw_torch"): not an alias, the closest key named
    ({"optimizer": None, "optim": "adamw_torch"}, "key 'optim' (did you mean 'optimizer'?) is not read"),
    ({"Batch": 4, "foo": 3}, "keys 'Batch' (did you mean 'batch'?), 'foo' are not read; accepted: model, "),
    ({"grad_checkpointing": False, "gradient_checkpointing": True},
     "the llm_planner_run line gives grad_checkpointing twice: grad_checkpointing false, gradient_checkpointing true; "
     "accepted: one of them, or both alike"),
])
def test_a_key_the_training_line_does_not_take_is_refused_by_name(tmp_path, runs_file, changes, message):
    """`"foo": 3` was accepted and dropped unseen; an unknown key is one line, exit 2, nothing saved."""
    line = tmp_path / "run.jsonl"
    line.write_text(_training_line(**changes))
    code, out, err = run_cli("ingest", line, "--gpu", "h100-sxm-80gb", "--save")
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: ") and message in err, err
    assert not runs_file.exists()


def test_the_same_value_under_both_names_is_read():
    run = parse_training(_training_line(grad_checkpointing=True, gradient_checkpointing=True))
    assert run["settings"]["grad_checkpointing"] is True


def test_the_vllm_log_gives_its_config_and_memory_lines():
    run = parse_vllm(VLLM.read_text())
    assert run["model_read"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert run["settings"] == {"task": "infer", "engine": "vllm", "precision": "bf16", "max_model_len": 8192, "gpus": 1,
                               "engine_version": "0.9.2"}
    assert run["versions"] == {"vllm": "0.9.2"} and run["notes"] == []
    assert run["measured"]["weights"] == pytest.approx(14.9889 * GIB)
    assert run["measured"]["kv_cache_memory"] == pytest.approx(55.12 * GIB)
    assert run["measured"]["kv_cache_tokens"] == 451520
    assert run["measured"]["max_concurrency"] == 55.12


def test_vllm_tensor_parallel_workers_and_fp16():
    run = parse_vllm(VLLM_TP2.read_text())
    assert run["settings"]["gpus"] == 2 and run["settings"]["precision"] == "fp16"
    assert run["measured"] == {"weights": pytest.approx(6.1 * GIB)}


# vLLM's strings (vllm-project/vllm), rendered as its logger renders them
VLLM_CONFIG = ("model=%r, speculative_config=%r, tokenizer=%r, skip_tokenizer_init=%s, tokenizer_mode=%s, revision=%s, "
               "tokenizer_revision=%s, trust_remote_code=%s, dtype=%s, max_seq_len=%s, download_dir=%r, load_format=%s, "
               "tensor_parallel_size=%s, pipeline_parallel_size=%s, quantization=%s")


@pytest.mark.parametrize("loading", ["Model loading took %.4f GiB and %.6f seconds",
                                     "Model loading took %.2f GiB memory and %.6f seconds"])
def test_vllm_format_strings_rendered_parse(loading):
    config = VLLM_CONFIG % ("Qwen/Qwen2.5-7B-Instruct", None, "Qwen/Qwen2.5-7B-Instruct", False, "auto", None, None,
                            False, "torch.bfloat16", 32768, None, "auto", 4, 1, "fp8")
    text = "\n".join([
        "Initializing a V1 LLM engine (v%s) with config: %s" % ("0.10.0", config),
        loading % (3.25, 2.5),
        "Available KV cache memory: %.2f GiB" % 61.5,
        "GPU KV cache size: %s tokens" % f"{1234567:,}",
        "Maximum concurrency for %s tokens per request: %.2fx" % (f"{32768:,}", 37.68),
    ])
    run = parse_vllm(text)
    assert run["settings"] == {"task": "infer", "engine": "vllm", "precision": "fp8", "max_model_len": 32768, "gpus": 4,
                               "engine_version": "0.10.0"}
    assert run["measured"] == {"weights": pytest.approx(3.25 * GIB), "kv_cache_memory": pytest.approx(61.5 * GIB),
                               "kv_cache_tokens": 1234567, "max_concurrency": 37.68}


@pytest.mark.parametrize("model, quantization, precision, ident", [
    # gpt-oss as `vllm serve openai/gpt-oss-20b` loads it (vllm/model_executor/layers/quantization/mxfp4.py)
    ("openai/gpt-oss-20b", "mxfp4", "mxfp4", "gpt-oss-20b"),
    # NVIDIA ModelOpt checkpoints (modelopt.py: ModelOptNvFp4Config "modelopt_fp4", ModelOptFp8Config "modelopt")
    ("nvidia/Llama-3.1-8B-Instruct-FP4", "modelopt_fp4", "nvfp4", "llama-3.1-8b"),
    ("nvidia/Llama-3.1-8B-Instruct-FP8", "modelopt", "fp8", "llama-3.1-8b"),
    # llm-compressor's checkpoints print only "compressed-tensors": the scheme is in the name
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", "compressed-tensors", "fp8", "llama-3.1-8b"),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic", "compressed-tensors", "fp8", "llama-3.1-8b"),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16", "compressed-tensors", "int4", "llama-3.1-8b"),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8", "compressed-tensors", "int8", "llama-3.1-8b"),
    ("RedHatAI/Qwen2.5-7B-Instruct-NVFP4", "compressed-tensors", "nvfp4", "qwen2.5-7b"),
])
def test_the_quantized_checkpoints_vllm_prints_are_read(models, model, quantization, precision, ident):
    """vLLM names these methods in its config line; each is a weight precision the engine models (refused before:
    a gpt-oss start-up log read "vLLM quantization 'mxfp4' is not read")."""
    config = VLLM_CONFIG % (model, None, model, False, "auto", None, None, False, "torch.bfloat16", 8192, None, "auto",
                            1, 1, quantization)
    run = parse_vllm("\n".join(["Initializing a V1 LLM engine (v%s) with config: %s" % ("0.11.0", config),
                                "Model loading took %.4f GiB and %.6f seconds" % (13.7204, 11.2)]))
    assert run["settings"]["precision"] == precision
    assert match_model(run["model_read"], models) == ident


def test_a_compressed_tensors_name_without_its_scheme_is_refused_by_name():
    config = VLLM_CONFIG % ("my-org/llama-8b-compressed", None, "my-org/llama-8b-compressed", False, "auto", None, None,
                            False, "torch.bfloat16", 8192, None, "auto", 1, 1, "compressed-tensors")
    with pytest.raises(IngestError, match=r"compressed-tensors' of model 'my-org/llama-8b-compressed'.*accepted: FP8"):
        parse_vllm("\n".join(["Initializing a V1 LLM engine (v0.11.0) with config: " + config,
                              "Model loading took 8.4900 GiB and 3.000000 seconds"]))


def test_a_gpt_oss_llamacpp_log_is_read_and_estimated(tmp_path):
    """llama.cpp prints gpt-oss's GGUFs as file type "MXFP4 MoE" (src/llama-model-loader.cpp llama_model_ftype_name,
    LLAMA_FTYPE_MOSTLY_MXFP4_MOE), the engine's mxfp4_moe; it was refused by name before."""
    log = tmp_path / "gpt-oss.log"
    log.write_text("\n".join([
        "%s: loaded meta data with %d key-value pairs and %d tensors from %s (version %s)"
        % ("llama_model_loader", 35, 459, "/models/gpt-oss-20b-mxfp4.gguf", "GGUF V3 (latest)"),
        "%s: file type   = %s" % ("print_info", "MXFP4 MoE"),
        "%s: offloaded %d/%d layers to GPU" % ("load_tensors", 25, 25),
        "%s: %12s model buffer size = %8.2f MiB" % ("load_tensors", "CUDA0", 10949.38),
        "%s: %12s model buffer size = %8.2f MiB" % ("load_tensors", "CPU_Mapped", 586.82),
        "%s: n_seq_max     = %u" % ("llama_context", 1),
        "%s: n_ctx         = %u" % ("llama_context", 32768),
        "%s: %10s KV buffer size = %8.2f MiB" % ("llama_kv_cache", "CUDA0", 768.0),
        "%s: %10s KV buffer size = %8.2f MiB" % ("llama_kv_cache", "CUDA0", 18.0),
        "%s: %10s compute buffer size = %8.2f MiB" % ("llama_context", "CUDA0", 398.38),
    ]))
    code, out, err = run_cli("ingest", str(log), "--gpu", "rtx-5090", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["model"] == "gpt-oss-20b" and data["scenario"]["precision"] == "mxfp4_moe"
    figures = {f["figure"]: f for f in data["figures"]}
    assert figures["kv_cache_memory"]["measured"] == (768 + 18) * MIB  # the full and the sliding-window caches
    assert abs(figures["weights"]["error_pct"]) < 5


def test_the_llamacpp_log_gives_its_gpu_buffers():
    run = parse_llamacpp(LLAMACPP.read_text())
    assert run["names_read"] == ["/models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", "Meta Llama 3.1 8B Instruct"]
    assert run["settings"] == {"task": "infer", "engine": "llama.cpp", "precision": "q4_k_m", "max_model_len": 8192,
                               "max_num_seqs": 1, "gpus": 1, "gpu_layers": 33}
    # CPU_Mapped (weights left in host memory) and CUDA_Host (a host staging buffer) are not the GPU's
    assert run["measured"] == {"weights": pytest.approx(4403.49 * MIB), "kv_cache_memory": 1024 * MIB,
                               "compute_buffer": 560 * MIB, "gpu_layers": 33}


def test_llamacpp_format_strings_rendered_parse_two_devices():
    text = "\n".join([
        "%s: loaded meta data with %d key-value pairs and %d tensors from %s (version %s)"
        % ("llama_model_loader", 30, 291, "qwen2.5-7b-instruct-q8_0.gguf", "GGUF V3 (latest)"),
        "%s: file type   = %s" % ("print_info", "Q8_0"),
        "%s: offloaded %d/%d layers to GPU" % ("load_tensors", 29, 29),
        "%s: %12s model buffer size = %8.2f MiB" % ("load_tensors", "CUDA0", 3000.0),
        "%s: %12s model buffer size = %8.2f MiB" % ("load_tensors", "CUDA1", 3200.0),
        "%s: %12s model buffer size = %8.2f MiB" % ("load_tensors", "CPU_Mapped", 552.0),
        "%s: n_seq_max     = %u" % ("llama_context", 4),
        "%s: n_ctx         = %u" % ("llama_context", 16384),
        "%s: %10s KV buffer size = %8.2f MiB" % ("llama_kv_cache", "CUDA0", 448.0),
        "%s: %10s KV buffer size = %8.2f MiB" % ("llama_kv_cache", "CUDA1", 448.0),
        "%s: %10s compute buffer size = %8.2f MiB" % ("llama_context", "CUDA0", 300.0),
        "%s: %10s compute buffer size = %8.2f MiB" % ("llama_context", "CUDA1", 320.0),
    ])
    run = parse_llamacpp(text)
    assert run["settings"]["gpus"] == 2 and run["settings"]["precision"] == "q8_0"
    assert run["settings"]["max_model_len"] == 4096 and run["settings"]["max_num_seqs"] == 4  # n_ctx / n_seq_max
    assert run["measured"]["weights"] == pytest.approx(3100 * MIB)  # per GPU: the devices' mean
    assert run["measured"]["kv_cache_memory"] == pytest.approx(448 * MIB)
    assert run["measured"]["compute_buffer"] == pytest.approx(310 * MIB)


def test_no_format_is_refused_by_name():
    with pytest.raises(IngestError, match="no recognizable run"):
        parse_run(NOT_A_RUN.read_text())


@pytest.mark.parametrize("name, ident", [
    ("llama-3.1-8b", "llama-3.1-8b"),
    ("meta-llama/Llama-2-7b-hf", "llama-2-7b"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("/models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", "llama-3.1-8b"),
    ("Meta Llama 3.1 8B Instruct", "llama-3.1-8b"),
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
    ("/models/my-private-model", None),
    ("", None),
])
def test_model_names_match_catalog_ids(models, name, ident):
    assert match_model(name, models) == ident


# ---- the command ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path, gpu, figures", [
    (VLLM, "h100-sxm-80gb", ["weights", "kv_cache_memory", "kv_cache_tokens", "max_concurrency"]),
    (LLAMACPP, "rtx-4090", ["weights", "kv_cache_memory", "compute_buffer", "gpu_layers"]),
    (TRAINING, "l40s", ["allocated_peak", "reserved_peak"]),
])
def test_ingest_prints_each_figure_beside_ours(path, gpu, figures):
    code, out, err = run_cli("ingest", path, "--gpu", gpu)
    assert code == 0 and err == ""
    lines = out.splitlines()
    # a training run's peaks also show "safe": the figure the verdicts decide on
    safe = ["safe"] if path == TRAINING else []
    assert lines[1].split() == ["figure", "measured", "ours", *safe, "error", "%"]
    assert [line.split()[0] for line in lines[2:]] == figures
    code, out, err = run_cli("ingest", path, "--gpu", gpu, "--json")
    data = json.loads(out)
    assert list(data) == ["format", "file", "model", "model_read", "gpu", "scenario", "figures", "notes", "saved_id",
                          "saved_before", "schema_version"]
    assert [f["figure"] for f in data["figures"]] == figures
    for f in data["figures"]:
        assert list(f) == ["figure", "metric", "measured", "estimate", "unit", "error_pct", "source_line", "counter",
                           "safe_estimate"]
        assert f["estimate"] is not None and f["error_pct"] is not None
        # a training run's memory peak carries the verdicts' figure on its counter; a serving log's figures none
        if f["metric"] in ("allocated_peak_bytes", "reserved_peak_bytes"):
            assert f["safe_estimate"] >= f["estimate"]
        else:
            assert f["safe_estimate"] is None
    assert data["saved_id"] is None


def test_the_llamacpp_kv_buffer_is_compared_with_what_llamacpp_allocates():
    """llama.cpp's "KV buffer size" is its -c tokens on the GPU layers (serve kv_cache_bytes_allocated), not the room
    left beside them (kv_cache_bytes_available, which came to mean the room for every engine): compared with the room
    the sample's 1.00 GiB read +1696%."""
    data = json.loads(run_cli("ingest", LLAMACPP, "--gpu", "rtx-4090", "--json")[1])
    kv = next(f for f in data["figures"] if f["figure"] == "kv_cache_memory")
    assert abs(kv["error_pct"]) < 1, kv  # 8,192 tokens x 32 layers x 8 KV heads of 128 x 2 x 2 bytes = 1.00 GiB


def test_the_vllm_sample_is_estimated_close():
    data = json.loads(run_cli("ingest", VLLM, "--gpu", "h100-sxm-80gb", "--json")[1])
    errors = {f["figure"]: f["error_pct"] for f in data["figures"]}
    assert abs(errors["weights"]) < 2  # 8.03e9 bf16 parameters: 14.96 GiB against the log's 14.99
    assert data["scenario"] == {"model": "llama-3.1-8b", "gpu": "h100-sxm-80gb", "task": "infer", "engine": "vllm",
                                "precision": "bf16", "max_model_len": 8192, "gpus": 1, "engine_version": "0.9.2"}


@pytest.mark.parametrize("args, message", [
    ((VLLM_TP2, "--gpu", "h100-sxm-80gb"), "model '/models/my-private-model' (read from the vllm run) matches no "
                                            "catalog model; give --model ID"),
    ((NOT_A_RUN, "--gpu", "h100-sxm-80gb"), "no recognizable run in this file"),
    ((DATA / "missing.log", "--gpu", "h100-sxm-80gb"), "cannot be read"),
    ((DATA, "--gpu", "h100-sxm-80gb"), "is not a regular file"),
    ((TRAINING, "--gpu", "no-such-gpu"), "gpu 'no-such-gpu' is not in the catalog"),
    ((VLLM, "--gpu", "h100-sxm-80gb", "--model", "no-such-model"), "model 'no-such-model' is not in the catalog"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    code, out, err = run_cli("ingest", *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err
    assert "Traceback" not in err


@pytest.mark.parametrize("log, gpu, printed, wrong, message", [
    (VLLM, "h100-sxm-80gb", "max_seq_len=8192", "max_seq_len=0",
     "this vLLM log's max_seq_len is 0; accepted: a whole number of tokens from 1 to 100,000,000"),
    # 20 digits: read as printed, not wrapped to the int64 -9223372036854775808 and refused as a "seq"
    (VLLM, "h100-sxm-80gb", "max_seq_len=8192", "max_seq_len=123456789012345678901",
     "this vLLM log's max_seq_len is 123456789012345678901; accepted: a whole number of tokens from 1 to"),
    (VLLM, "h100-sxm-80gb", "tensor_parallel_size=1", "tensor_parallel_size=0",
     "this vLLM log's tensor_parallel_size is 0; accepted: a whole number of GPUs from 1 to 4,096"),
    (LLAMACPP, "rtx-4090", "n_ctx         = 8192", "n_ctx         = 0",
     "this llama.cpp log's n_ctx is 0; accepted: a whole number of tokens from 1 to 100,000,000"),
    (LLAMACPP, "rtx-4090", "n_ctx         = 8192", "n_ctx         = 123456789012345678901",
     "this llama.cpp log's n_ctx is 123456789012345678901; accepted:"),
    (LLAMACPP, "rtx-4090", "n_seq_max     = 1", "n_seq_max     = 0",
     "this llama.cpp log's n_seq_max is 0; accepted: a whole number of sequences from 1 to 65,536"),
    (LLAMACPP, "rtx-4090", "offloaded 33/33 layers", "offloaded 40/33 layers",
     "'offloaded 40/33 layers to GPU' puts 40 layers on the GPU, more than the model's 33; accepted: 0 to 33"),
    (LLAMACPP, "rtx-4090", "offloaded 33/33 layers", "offloaded 0/0 layers",
     "'offloaded 0/0 layers to GPU' counts 0 layers in the model; accepted: a whole number of layers from 1"),
])
def test_a_setting_no_run_has_is_refused_by_its_value(tmp_path, runs_file, log, gpu, printed, wrong, message):
    """max_seq_len=0 and n_ctx = 0 were estimated as requests of 0 tokens (a KV cache of 0 bytes, -100%),
    40 of 33 layers compared as if real, and a 20-digit max_seq_len wrapped around in the engine's int64
    columns; each is refused in one line naming the value as the log printed it, nothing saved."""
    text = log.read_text()
    assert printed in text
    bad = tmp_path / log.name
    bad.write_text(text.replace(printed, wrong))
    code, out, err = run_cli("ingest", bad, "--gpu", gpu, "--save")
    assert code == 2 and out == "", out
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    assert "Traceback" not in err and "-9223372036854775808" not in err
    assert not runs_file.exists()
    with pytest.raises(IngestError, match="accepted"):
        parse_run(bad.read_text())


def test_a_saved_run_out_of_range_is_set_aside_by_name_and_the_others_listed(runs_file):
    """The runs file is YAML a user may edit: a run whose setting is out of range was estimated as if real
    (max_model_len 0); it is set aside alone and named, the other runs are listed, the file is kept."""
    assert run_cli("ingest", VLLM, "--gpu", "h100-sxm-80gb", "--save")[0] == 0
    assert run_cli("ingest", LLAMACPP, "--gpu", "rtx-4090", "--save")[0] == 0
    text = runs_file.read_text()
    assert text.count("max_model_len: 8192") == 2
    runs_file.write_text(text.replace("max_model_len: 8192", "max_model_len: 0", 1))  # the vLLM run's
    code, out, err = run_cli("evidence", "--json")
    assert code == 0, err
    mine = [r["id"] for r in json.loads(out) if r["source_kind"] == "user"]
    assert mine and all(i.startswith("user-llamacpp-") for i in mine)
    assert err.count("\n") == 1 and err.startswith("warning: your run 'user-vllm-llama-3-1-8b-vllm-llama31-8b-h100'")
    assert "max_model_len is 0; accepted: a whole number of tokens from 1" in err and "set aside" in err
    assert "max_model_len: 0" in runs_file.read_text()


@pytest.mark.parametrize("path, gpu, message", [
    (VLLM, "rtx-4090", "the vllm run held 70.11 GiB on one GPU (weights 14.99 + kv_cache_memory 55.12), more than "
                       "rtx-4090 has (24.00 GiB); accepted: the --gpu of the card it ran on"),
    (LLAMACPP, "rtx-3060-ti", "the llama.cpp run held 5.85 GiB on one GPU"),  # fits an 8 GB card: not refused
    (TRAINING, "rtx-3060-12gb", "the training run held 14.00 GiB on one GPU (reserved_peak 14.00), more than "
                                "rtx-3060-12gb has (12.00 GiB)"),
])
def test_a_run_that_holds_more_than_the_gpu_has_is_refused(runs_file, path, gpu, message):
    """--gpu is the user's word for the card: an H100's vLLM log given --gpu rtx-4090 was compared as if it had run
    there (55.12 GiB of KV cache on a 24 GB card, ours -90%) and --save kept it among the user's evidence."""
    code, out, err = run_cli("ingest", path, "--gpu", gpu, "--save")
    if path is LLAMACPP:
        assert code == 0 and message not in err, err
        return
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err
    assert not runs_file.exists()


def test_a_saved_run_whose_gpu_was_edited_to_a_smaller_card_is_set_aside(runs_file):
    assert run_cli("ingest", VLLM, "--gpu", "h100-sxm-80gb", "--save")[0] == 0
    assert run_cli("ingest", LLAMACPP, "--gpu", "rtx-4090", "--save")[0] == 0
    runs_file.write_text(runs_file.read_text().replace("gpu: h100-sxm-80gb", "gpu: rtx-4090"))
    code, out, err = run_cli("evidence", "--json")
    assert code == 0
    mine = [r["id"] for r in json.loads(out) if r["source_kind"] == "user"]
    assert mine and all(i.startswith("user-llamacpp-") for i in mine)
    assert err.count("\n") == 1 and "more than rtx-4090 has" in err and "set aside" in err


def test_save_keeps_the_entries_it_cannot_read(runs_file):
    """--save wrote back only the entries load_runs returns: one a user wrote by hand (or an older
    version did) without a `run:` mapping was deleted from the file."""
    runs_file.write_text("runs:\n- id: my-notes\n  note: the A100 run, to fill in\n- just a line\n")
    code, out, err = run_cli("ingest", VLLM, "--gpu", "h100-sxm-80gb", "--save")
    assert code == 0, err
    import yaml
    runs = yaml.safe_load(runs_file.read_text())["runs"]
    assert runs[:2] == [{"id": "my-notes", "note": "the A100 run, to fill in"}, "just a line"]
    assert [r["id"] for r in load_runs(runs_file)] == ["user-vllm-llama-3-1-8b-vllm-llama31-8b-h100"]


def test_model_override_matches_an_unnamed_model():
    code, out, err = run_cli("ingest", VLLM_TP2, "--gpu", "h100-sxm-80gb", "--model", "llama-3.1-8b")
    assert code == 0, err
    assert out.startswith("vllm run of llama-3.1-8b (read: /models/my-private-model)")


def test_saved_runs_are_listed_by_evidence_as_the_users(runs_file):
    code, out, err = run_cli("ingest", VLLM, "--gpu", "h100-sxm-80gb", "--save")
    assert code == 0, err
    assert out.splitlines()[-1] == "saved as user-vllm-llama-3-1-8b-vllm-llama31-8b-h100 (see: evidence)"
    code, out, _ = run_cli("ingest", TRAINING, "--gpu", "l40s", "--save", "--json")
    assert json.loads(out)["saved_id"] == "user-training-llama-3-2-3b-training-llama32-3b-lora"
    assert runs_file.exists()
    code, out, err = run_cli("evidence", "--json")
    assert code == 0, err
    rows = json.loads(out)
    mine = [r for r in rows if r["source_kind"] == "user"]
    assert [r["id"] for r in mine] == [
        "user-vllm-llama-3-1-8b-vllm-llama31-8b-h100-" + f for f in
        ("weights", "kv-cache-memory", "kv-cache-tokens", "max-concurrency")] + [
        "user-training-llama-3-2-3b-training-llama32-3b-lora-" + f for f in ("allocated-peak", "reserved-peak")]
    assert {r["kind"] for r in mine} == {"measured"}
    assert mine[0]["metric"] == "weights_bytes" and mine[0]["unit"] == "GiB" and mine[0]["reference"] == 14.989
    assert mine[-1]["metric"] == "reserved_peak_bytes"
    assert all(r["source_kind"] == "published" for r in rows[:-len(mine)])
    # the same run saved again is not added again (the Evidence page counted it twice); another run of the same
    # model and log name is (a second id)
    text = runs_file.read_text()
    code, out, err = run_cli("ingest", VLLM, "--gpu", "h100-sxm-80gb", "--save")
    assert code == 0, err
    assert out.splitlines()[-1] == ("already saved as user-vllm-llama-3-1-8b-vllm-llama31-8b-h100: the same run, "
                                    "not added again (see: evidence)")
    assert runs_file.read_text() == text
    code, out, _ = run_cli("ingest", TRAINING, "--gpu", "l40s", "--save", "--json")
    assert (json.loads(out)["saved_id"], json.loads(out)["saved_before"]) == \
        ("user-training-llama-3-2-3b-training-llama32-3b-lora", True)
    code, out, err = run_cli("ingest", VLLM, "--gpu", "h200-sxm-141gb", "--save")  # the same log on another card
    assert code == 0, err
    assert "- id: user-vllm-llama-3-1-8b-vllm-llama31-8b-h100-2\n" in runs_file.read_text()


def _serve_json(*args):
    code, out, err = run_cli("serve", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--max-model-len", "32768",
                             "--engine", "vllm", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_a_vllm_log_is_estimated_at_the_version_it_prints(runs_file):
    """A V0 log of vLLM 0.6.3 was compared with the current release (46,480 KV tokens beside its 24,000, +93.7%);
    its version is read into engine_version and the estimate is serve --engine-version 0.6's (17,856), kept by
    --save, and evidence re-estimates the saved run at that version."""
    old, current = _serve_json("--engine-version", "0.6"), _serve_json()
    assert old["num_gpu_blocks"] != current["num_gpu_blocks"]  # (else this test tells nothing)
    code, out, err = run_cli("ingest", VLLM_V0, "--gpu", "rtx-4090", "--json", "--save")
    assert code == 0, err
    data = json.loads(out)
    assert data["scenario"]["engine_version"] == "0.6.3" and data["notes"] == []
    ours = {f["figure"]: f["estimate"] for f in data["figures"]}
    assert ours["kv_cache_tokens"] == old["num_gpu_blocks"] * 16
    assert ours["max_concurrency"] == pytest.approx(old["max_concurrency"])
    saved = load_runs(runs_file)
    assert saved[0]["run"]["settings"]["engine_version"] == "0.6.3" and saved[0]["run"]["versions"] == {"vllm": "0.6.3"}
    code, out, err = run_cli("evidence", "--json")
    assert code == 0, err
    mine = {r["id"]: r for r in json.loads(out) if r["source_kind"] == "user"}
    assert mine[f"{data['saved_id']}-kv-cache-tokens"]["estimate"] == old["num_gpu_blocks"] * 16
    code, out, err = run_cli("ingest", VLLM_V0, "--gpu", "rtx-4090")
    assert code == 0 and out.splitlines()[0].endswith(", engine_version 0.6.3") and "note:" not in out


def test_a_vllm_log_without_a_version_is_compared_with_the_current_release_and_says_so(tmp_path, runs_file):
    text = VLLM_V0.read_text()
    assert "Initializing an LLM engine (v0.6.3) with config" in text
    bare = tmp_path / "no-version.log"
    bare.write_text(text.replace("Initializing an LLM engine (v0.6.3) with config", "Initializing an LLM engine with "
                                 "config").replace("vLLM API server version 0.6.3", "vLLM API server"))
    code, out, err = run_cli("ingest", bare, "--gpu", "rtx-4090", "--json", "--save")
    assert code == 0, err
    data = json.loads(out)
    assert "engine_version" not in data["scenario"]
    assert len(data["notes"]) == 1 and "prints no version" in data["notes"][0] and "current release" in data["notes"][0]
    ours = {f["figure"]: f["estimate"] for f in data["figures"]}
    assert ours["kv_cache_tokens"] == _serve_json()["num_gpu_blocks"] * 16
    assert "engine_version" not in load_runs(runs_file)[0]["run"]["settings"]
    code, out, err = run_cli("ingest", bare, "--gpu", "rtx-4090")
    assert code == 0 and out.splitlines()[-1].startswith("note: this vLLM log prints no version")


@pytest.mark.parametrize("printed, version, note", [
    # vllm/engine/llm_engine.py (V0, 0.8 to 0.10): the generation named; 0.8's default is V1 (VLLM_USE_V1=0 here)
    ("Initializing a V0 LLM engine (v%s) with config: %s, use_cached_outputs=%s, " % ("0.8.5", "{config}", False),
     "0.8.5", "this log is of vLLM 0.8.5's V0 engine; the estimate follows 0.8.5's default engine, V1"),
    # VLLM_USE_V1=1 before 0.8
    ("Initializing a V1 LLM engine (v%s) with config: %s" % ("0.7.3", "{config}"), "0.7.3",
     "this log is of vLLM 0.7.3's V1 engine; the estimate follows 0.7.3's default engine, V0"),
    ("Initializing a V1 LLM engine (v%s) with config: %s" % ("0.10.1rc1", "{config}"), "0.10.1rc1", None),
    ("Initializing a V1 LLM engine (v%s) with config: %s" % ("0.9.2.dev364+gb432b7a28", "{config}"),
     "0.9.2.dev364+gb432b7a28", None),
    # vllm/entrypoints/openai/api_server.py, beside a config line without the version
    ("vLLM API server version %s\nInitializing an LLM engine with config: %s" % ("0.6.3", "{config}"), "0.6.3", None),
    # a source build: vllm/version.py's "dev", setuptools-scm's 0.1.devN without tags
    ("Initializing an LLM engine (v%s) with config: %s" % ("dev", "{config}"), None, "version 'dev'"),
    ("Initializing a V1 LLM engine (v%s) with config: %s" % ("0.1.dev1+g1234abc", "{config}"), None,
     "version '0.1.dev1+g1234abc'"),
])
def test_the_vllm_version_strings_parse(printed, version, note):
    config = VLLM_CONFIG % ("meta-llama/Llama-3.1-8B-Instruct", None, "meta-llama/Llama-3.1-8B-Instruct", False, "auto",
                            None, None, False, "torch.bfloat16", 8192, None, "auto", 1, 1, None)
    run = parse_vllm(printed.replace("{config}", config) + "\n" + "Model loading took %.4f GiB and %.6f seconds" % (15, 5))
    assert run["settings"].get("engine_version") == version
    if note:
        assert len(run["notes"]) == 1 and note in run["notes"][0], run["notes"]
    else:
        assert run["notes"] == []


def test_a_vllm_release_older_than_modelled_is_refused_by_its_version(tmp_path, runs_file):
    old = tmp_path / "v054.log"
    old.write_text(VLLM_V0.read_text().replace("0.6.3", "0.5.4"))
    code, out, err = run_cli("ingest", old, "--gpu", "rtx-4090", "--save")
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: this vLLM log's version is 0.5.4 ('Initializing an LLM engine (v0.5.4) with config')"
                          "; accepted: a log of vLLM 0.6 or later"), err
    assert not runs_file.exists()


def test_a_saved_run_whose_version_was_edited_out_of_range_is_set_aside(runs_file):
    assert run_cli("ingest", VLLM_V0, "--gpu", "rtx-4090", "--save")[0] == 0
    assert run_cli("ingest", VLLM, "--gpu", "h100-sxm-80gb", "--save")[0] == 0
    runs_file.write_text(runs_file.read_text().replace("engine_version: 0.6.3", "engine_version: 0.5.4"))
    code, out, err = run_cli("evidence", "--json")
    assert code == 0, err
    mine = [r["id"] for r in json.loads(out) if r["source_kind"] == "user"]
    assert mine and all(i.startswith("user-vllm-llama-3-1-8b-vllm-llama31-8b-h100-") for i in mine), mine
    assert err.startswith("warning: your run 'user-vllm-llama-3-1-8b-vllm-v0-llama31-8b-rtx4090'") and "0.5.4" in err
    assert "engine_version: 0.5.4" in runs_file.read_text()


def test_a_broken_runs_file_is_one_line(runs_file):
    runs_file.write_text("runs: 3\n")
    code, out, err = run_cli("ingest", VLLM, "--gpu", "h100-sxm-80gb", "--save")
    assert code == 2 and "is not a mapping with a `runs:` list" in err and err.count("\n") == 1


def test_the_published_snippet_prints_a_line_ingest_reads(monkeypatch, capsys):
    """docs/ingest.md's snippet, run with stand-ins for torch and transformers."""
    import re
    import sys
    import types
    text = (Path(__file__).resolve().parent.parent / "docs" / "ingest.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    cuda = types.SimpleNamespace(device_count=lambda: 1, max_memory_allocated=lambda: 11 * GIB,
                                 max_memory_reserved=lambda: 12 * GIB)
    torch = types.ModuleType("torch")
    torch.cuda, torch.__version__ = cuda, "2.5.1"
    torch.distributed = types.SimpleNamespace(is_initialized=lambda: False, get_world_size=lambda: 1)
    transformers = types.ModuleType("transformers")
    transformers.__version__ = "4.46.3"
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "transformers", transformers)
    exec(compile(snippet, "docs/ingest.md", "exec"), {})
    run = parse_run(capsys.readouterr().out)
    assert run["format"] == "training" and run["model_read"] == "llama-3.2-3b"
    assert run["measured"] == {"allocated_peak": 11 * GIB, "reserved_peak": 12 * GIB}
    assert len(snippet.strip().splitlines()) <= 12


def test_evidence_names_a_broken_runs_file_and_still_lists_the_published(runs_file):
    runs_file.write_text("runs: [oops\n")
    code, out, err = run_cli("evidence", "--json")
    assert code == 0 and json.loads(out)
    assert err.startswith("warning: user runs file") and "your runs are left out" in err and err.count("\n") == 1


def test_the_evidence_page_lists_your_runs_marked_yours(runs_file):
    from streamlit.testing.v1 import AppTest
    assert run_cli("ingest", VLLM, "--gpu", "h100-sxm-80gb", "--save")[0] == 0
    # a second run, edited out of range by hand: set aside and named on the page, the first still listed
    assert run_cli("ingest", LLAMACPP, "--gpu", "rtx-4090", "--save")[0] == 0
    text = runs_file.read_text()
    runs_file.write_text(text[:text.index("user-llamacpp")] + text[text.index("user-llamacpp"):].replace(
        "max_model_len: 8192", "max_model_len: 0"))
    from tests.test_pages import DASHBOARD
    at = AppTest.from_file(DASHBOARD, default_timeout=60)
    at.switch_page("pages/evidence.py").run()  # one run: the Evidence page alone
    assert not at.exception, [e.value for e in at.exception]
    shown = [w.value.replace("\\", "") for w in at.warning]  # (markdown-escaped)
    assert any("your run 'user-llamacpp-llama-3-1-8b-llamacpp-llama31-8b-q4km'" in w and "max_model_len is 0" in w
               for w in shown), shown
    view = at.dataframe[0].value.set_index("Reference")
    mine = view[view["Whose"] == "yours"]
    assert list(mine.index) == ["user-vllm-llama-3-1-8b-vllm-llama31-8b-h100-" + f for f in
                                ("weights", "kv-cache-memory", "kv-cache-tokens", "max-concurrency")]
    assert mine.loc["user-vllm-llama-3-1-8b-vllm-llama31-8b-h100-weights", "Published"] == 14.989
    assert set(view.loc[view["Whose"] != "yours", "Whose"]) == {"published"}
    assert any("from your own runs" in cap.value for cap in at.caption)


def test_older_vllm_and_llamacpp_strings_parse():
    """vLLM's V0 engine (vllm/worker/model_runner.py, vllm/executor/executor_base.py) and llama.cpp before the
    "model buffer" wording (llm_load_tensors, llm_load_print_meta)."""
    config = VLLM_CONFIG % ("meta-llama/Llama-2-7b-hf", None, "meta-llama/Llama-2-7b-hf", False, "auto", None, None,
                            False, "torch.float16", 4096, None, "auto", 1, 1, None)
    run = parse_vllm("\n".join([
        "Initializing an LLM engine (v%s) with config: %s" % ("0.6.3", config),
        "Loading model weights took %.4f GB" % 12.5533,
        "# GPU blocks: %d, # CPU blocks: %d" % (7000, 512),
    ]))
    assert run["settings"]["precision"] == "fp16" and run["settings"]["max_model_len"] == 4096
    assert run["settings"]["engine_version"] == "0.6.3"
    assert run["measured"] == {"weights": pytest.approx(12.5533 * GIB), "kv_cache_tokens": 7000 * 16}
    run = parse_llamacpp("\n".join([
        "%s: loaded meta data with %d key-value pairs and %d tensors from %s (version %s)"
        % ("llama_model_loader", 24, 291, "models/llama-2-7b.Q4_0.gguf", "GGUF V3 (latest)"),
        "%s: model ftype      = %s" % ("llm_load_print_meta", "Q4_0"),
        "%s: offloaded %d/%d layers to GPU" % ("llm_load_tensors", 33, 33),
        "%s: %10s buffer size = %8.2f MiB" % ("llm_load_tensors", "CPU", 70.31),
        "%s: %10s buffer size = %8.2f MiB" % ("llm_load_tensors", "CUDA0", 3577.56),
        "%s: n_ctx      = %u" % ("llama_new_context_with_model", 4096),
        "%s: %10s KV buffer size = %8.2f MiB" % ("llama_kv_cache_init", "CUDA0", 2048.0),
        "%s: %10s compute buffer size = %8.2f MiB" % ("llama_new_context_with_model", "CUDA0", 296.0),
    ]))
    assert run["settings"]["precision"] == "q4_0" and run["settings"]["max_model_len"] == 4096
    assert run["measured"] == {"weights": pytest.approx(3577.56 * MIB), "kv_cache_memory": 2048 * MIB,
                               "compute_buffer": 296 * MIB, "gpu_layers": 33}
    assert match_model(run["model_read"], default_models()) == "llama-2-7b"


def default_models():
    from catalog import default_catalog
    return default_catalog().models()


def test_a_scenario_the_engine_refuses_is_one_line(tmp_path):
    bad = tmp_path / "run.jsonl"
    bad.write_text(TRAINING.read_text().replace('"method": "lora"', '"method": "dora"'))
    code, out, err = run_cli("ingest", bad, "--gpu", "l40s")
    assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1 and "dora" in err


def test_the_catalog_page_takes_a_pasted_log_and_keeps_it(runs_file):
    """Issue 26: the Catalog page takes a pasted log too: the same figures as `ingest`, and kept, the
    run is among the user's runs (the Evidence page lists them: the test above)."""
    from streamlit.testing.v1 import AppTest

    from tests.test_pages import DASHBOARD
    from tests.test_pages import shown as as_shown
    at = AppTest.from_file(DASHBOARD, default_timeout=60)
    at.switch_page("pages/catalog_browser.py").run()
    assert not at.exception, [e.value for e in at.exception]
    at.text_area(key="run_log_text").set_value(VLLM.read_text())
    at.selectbox(key="run_log_gpu").set_value("h100-sxm-80gb")
    at.button(key="run_log_compare").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    shown = next(d.value for d in at.dataframe if "Figure" in d.value.columns).set_index("Figure")
    code, out, _ = run_cli("ingest", VLLM, "--gpu", "h100-sxm-80gb", "--json")
    assert code == 0
    cli = {f["figure"]: f["error_pct"] for f in json.loads(out)["figures"]}
    assert {k: float(v) for k, v in shown["Error (%)"].items()} == cli
    at.button(key="run_log_save").click().run()
    assert not at.exception and any("Kept as" in s.value for s in at.success)
    assert [r["model"] for r in load_runs(runs_file)] == ["llama-3.1-8b"]
    at.button(key="run_log_save").click().run()  # kept again: the same run, not a second copy
    assert not at.exception and any("Already kept as" in s.value for s in at.info), [s.value for s in at.info]
    assert [r["model"] for r in load_runs(runs_file)] == ["llama-3.1-8b"]
    # a log of another model than the one typed is refused in one line, nothing kept
    at.text_input(key="run_log_model").set_value("llama-2-7b")
    at.button(key="run_log_compare").click().run()
    assert any("not of" in e.value and "7b" in e.value for e in at.error), [e.value for e in at.error]  # (markdown-escaped)
    assert len(load_runs(runs_file)) == 1
    # text that is no run: the pasted text is named as what was pasted (it said "in this file")
    at.text_area(key="run_log_text").set_value("hello")
    at.button(key="run_log_compare").click().run()
    assert any(as_shown(e.value).startswith("no recognizable run in the pasted text; accepted: ") for e in at.error), \
        [e.value for e in at.error]


def test_binary_data_and_a_bound_are_one_line(tmp_path):
    blob = tmp_path / "model.bin"
    blob.write_bytes(b"GGUF\x00\x00\x00\x03" + bytes(1000))
    code, _, err = run_cli("ingest", blob, "--gpu", "rtx-4090")
    assert code == 2 and "binary data" in err and len(err.strip().splitlines()) == 1


def test_ingest_snippet_prints_the_docs_lines_and_they_print_a_line_ingest_reads(tmp_path):
    """`ingest --snippet` prints docs/ingest.md's snippet (an installed copy has no docs/); with --model, that id.
    Run with stand-ins for torch and transformers, the printed Python writes the JSON line ingest reads back."""
    import re
    import subprocess
    import sys
    doc = (ROOT / "docs" / "ingest.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(import json, torch, transformers\n.*?)```", doc, re.S).group(1)
    code, out, err = run_cli("ingest", "--snippet")
    assert code == 0 and out == block, err
    code, out, err = run_cli("ingest", "--snippet", "--model", "qwen3-8b")
    assert code == 0 and '"model": "qwen3-8b"' in out and "llama-3.2-3b" not in out
    fakes = tmp_path / "fakes"
    (fakes / "torch").mkdir(parents=True)
    (fakes / "torch" / "__init__.py").write_text(
        "__version__ = '2.13.0'\nclass cuda:\n    device_count = staticmethod(lambda: 1)\n"
        "    max_memory_allocated = staticmethod(lambda: 9_000_000_000)\n"
        "    max_memory_reserved = staticmethod(lambda: 10_000_000_000)\n"
        "class distributed:\n    is_initialized = staticmethod(lambda: False)\n", encoding="utf-8")
    (fakes / "transformers.py").write_text("__version__ = '5.24.0'\n", encoding="utf-8")
    line = subprocess.run([sys.executable, "-c", out], capture_output=True, text=True, env={"PYTHONPATH": str(fakes)},
                          check=True).stdout
    log = tmp_path / "run.log"
    log.write_text("step 10 loss 1.2\n" + line, encoding="utf-8")
    code, out, err = run_cli("ingest", str(log), "--gpu", "a100-80gb-sxm", "--json")
    assert code == 0, err
    assert json.loads(out)["model"] == "qwen3-8b"


def test_ingest_without_a_file_or_gpu_says_what_it_takes():
    code, out, err = run_cli("ingest")
    assert code == 2 and out == "" and "ingest needs the log file and --gpu ID" in err and "ingest --snippet" in err
    code, out, err = run_cli("ingest", "x.log", "--snippet")
    assert code == 2 and "file 'x.log' is not accepted with --snippet" in err


def test_the_catalog_pages_log_errors_name_its_fields_not_the_command_lines_flags(runs_file):
    """ingest's messages name --model and --gpu; the Catalog page's form has 'Catalog model id' and 'The GPU it ran
    on': a log from an H100 given an RTX 4090 there, or of another model than the one typed, says so in its words."""
    from streamlit.testing.v1 import AppTest

    from tests.test_pages import DASHBOARD
    at = AppTest.from_file(DASHBOARD, default_timeout=60)
    at.switch_page("pages/catalog_browser.py").run()
    at.text_area(key="run_log_text").set_value(VLLM.read_text())
    at.selectbox(key="run_log_gpu").set_value("rtx-4090")
    at.button(key="run_log_compare").click().run()
    errors = [e.value for e in at.error]
    assert errors and all("--gpu" not in e for e in errors) and any("The GPU it ran on" in e for e in errors), errors
    at.selectbox(key="run_log_gpu").set_value("h100-sxm-80gb")
    at.text_input(key="run_log_model").set_value("llama-2-7b")
    at.button(key="run_log_compare").click().run()
    errors = [e.value for e in at.error]
    assert errors and all("--model" not in e for e in errors) and any("catalog model id" in e for e in errors), errors
    assert load_runs(runs_file) == []


def test_the_catalog_page_shows_what_a_comparison_rests_on(runs_file):
    """`ingest` prints its notes (the HF Trainer's summed counters are exact only when nothing is allocated between
    Trainer() and train()); the Catalog page showed the figures without them."""
    from streamlit.testing.v1 import AppTest

    from tests.test_pages import DASHBOARD
    log = DATA / "hf-trainer-llama32-3b-lora.log"
    code, out, _ = run_cli("ingest", log, "--gpu", "l40s", "--json")
    assert code == 0
    notes = json.loads(out)["notes"]
    assert notes  # (the case at stake: a run whose comparison rests on something said)
    at = AppTest.from_file(DASHBOARD, default_timeout=60)
    at.switch_page("pages/catalog_browser.py").run()
    at.text_area(key="run_log_text").set_value(log.read_text())
    at.selectbox(key="run_log_gpu").set_value("l40s")
    at.button(key="run_log_compare").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    captions = [c.value.replace("\\", "") for c in at.caption]
    for note in notes:
        assert any(note in c for c in captions), (note, captions)
