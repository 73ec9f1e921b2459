"""`estimate --export` and `serve --export` (issue 26 item 3), through the real command line
(tests/clirun.py): each export carries the plan's values, in keys the target documents (the
key lists below are copied from the version planner/exports.py cites in SOURCES), parses as
its format, and says what it could not express."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from planner import exports
from tests.clirun import run_cli

# DeepSpeed: deepspeed/runtime/constants.py @088be89 (top level), runtime/zero/config.py
# @1b88ac3 (DeepSpeedZeroConfig fields and aliases), runtime/zero/offload_config.py @1978617
DEEPSPEED_TOP = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "bf16", "fp16",
                 "optimizer", "zero_optimization", "zero_allow_untested_optimizer", "gradient_clipping"}
DEEPSPEED_ZERO = {"stage", "offload_optimizer", "offload_param", "stage3_gather_16bit_weights_on_model_save",
                  "contiguous_gradients", "overlap_comm", "reduce_bucket_size", "sub_group_size"}
DEEPSPEED_OFFLOAD = {"device", "pin_memory", "nvme_path", "buffer_count"}
DEEPSPEED_DEVICES = {"none", "cpu", "nvme"}
# TRL 1.10.0.dev0 @f2cd577: ModelConfig (trl/trainer/model_config.py), SFTConfig
# (trl/trainer/sft_config.py) and the TrainingArguments fields it inherits
TRL_KEYS = {"model_name_or_path", "dtype", "attn_implementation", "use_peft", "lora_r", "lora_alpha",
            "lora_target_modules", "load_in_8bit", "load_in_4bit", "bnb_4bit_quant_type", "max_length", "packing",
            "loss_type", "activation_offloading", "per_device_train_batch_size", "gradient_accumulation_steps",
            "gradient_checkpointing", "optim", "bf16", "fp16", "use_liger_kernel", "deepspeed"}
TRL_DTYPES = {"auto", "bfloat16", "float16", "float32"}
TRL_LOSSES = {"nll", "dft", "chunked_nll"}
# transformers OptimizerNames (the values TrainingArguments.optim accepts)
HF_OPTIMIZERS = {"adamw_torch", "adamw_torch_fused", "adafactor", "adamw_torch_4bit", "adamw_torch_8bit", "sgd",
                 "adagrad", "adamw_bnb_8bit", "adamw_8bit", "paged_adamw_32bit", "paged_adamw_8bit", "lion_8bit",
                 "lion_32bit", "rmsprop"}
# vLLM @002f10e: CacheConfig (vllm/config/cache.py) and the engine arguments
VLLM_FLAGS = {"--max-model-len", "--gpu-memory-utilization", "--max-num-seqs", "--tensor-parallel-size", "--dtype",
              "--quantization", "--kv-cache-dtype", "--pipeline-parallel-size"}
VLLM_KV = {"auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"}
VLLM_DTYPES = {"auto", "half", "float16", "bfloat16", "float", "float32"}
# SGLang @001067f: ServerArgs fields (python/sglang/srt/server_args.py), flag = --field-name
SGLANG_FLAGS = {"--model-path", "--context-length", "--mem-fraction-static", "--max-running-requests", "--tp-size",
                "--dtype", "--kv-cache-dtype", "--quantization"}
# llama.cpp common/arg.cpp @145b628 (tools/server/README.md)
LLAMA_FLAGS = {"-m", "-ngl", "-c", "-np", "-ctk", "-ctv", "-fa", "--n-cpu-moe", "--cpu-moe", "-sm"}
LLAMA_CACHE_TYPES = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"}
# Ollama docs/modelfile.md instructions, PARAMETER names of api/types.go Options/Runner
OLLAMA_PARAMETERS = {"num_ctx", "num_gpu", "num_predict", "temperature", "top_k", "top_p", "min_p", "seed", "stop",
                     "repeat_last_n", "repeat_penalty"}


def _export(*argv: str) -> tuple[str, str]:
    code, out, err = run_cli(*argv)
    assert code == 0, err
    return out, err


def _comments(text: str) -> list[str]:
    return [line[2:] for line in text.splitlines() if line.startswith("# ")]


def _flags(command: str) -> dict[str, str | None]:
    """A command line's flags and their values (a flag followed by another flag has None)."""
    words = shlex.split(command)
    out = {}
    for i, word in enumerate(words):
        if word.startswith("-") and not word.lstrip("-").replace(".", "").isdigit():
            following = words[i + 1] if i + 1 < len(words) else None
            out[word] = following if following is not None and not following.startswith("-") else None
    return out


def test_deepspeed_is_a_loadable_json_of_the_plan_with_its_notes_on_stderr():
    out, err = _export("estimate", "--model", "llama-3-70b", "--method", "full", "--precision", "mixed_bf16",
                       "--zero", "3", "--offload", "all", "--gpus", "8", "--batch", "2", "--grad-checkpointing",
                       "--export", "deepspeed")
    cfg = json.loads(out)  # stdout is the file, nothing else
    assert set(cfg) <= DEEPSPEED_TOP and set(cfg["zero_optimization"]) <= DEEPSPEED_ZERO
    assert cfg["train_micro_batch_size_per_gpu"] == 2 and cfg["train_batch_size"] == 2 * 8 * 1
    assert cfg["bf16"] == {"enabled": True} and "fp16" not in cfg
    zero = cfg["zero_optimization"]
    assert zero["stage"] == 3
    for key in ("offload_optimizer", "offload_param"):
        assert set(zero[key]) <= DEEPSPEED_OFFLOAD and zero[key]["device"] in DEEPSPEED_DEVICES
        assert zero[key]["device"] == "cpu"
    notes = [line for line in err.splitlines() if line.startswith("# not expressed: ")]
    assert any("gradient checkpointing" in n for n in notes) and any("sequence length 2,048" in n for n in notes)
    assert any(line.startswith("# keys: DeepSpeed") for line in err.splitlines())


def test_deepspeed_zero_2_offloads_the_optimizer_and_hands_an_8bit_optimizer_to_the_script():
    out, err = _export("estimate", "--model", "llama-3.1-8b", "--method", "lora", "--zero", "2", "--offload", "optimizer",
                       "--gpus", "2", "--optimizer", "adamw_8bit", "--export", "deepspeed")
    cfg = json.loads(out)
    assert cfg["zero_optimization"]["stage"] == 2 and "offload_param" not in cfg["zero_optimization"]
    assert cfg["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert cfg["zero_allow_untested_optimizer"] is True and "optimizer" not in cfg
    assert "adamw_8bit: not a DeepSpeed optimizer" in err and "method lora" in err


def test_trl_is_a_yaml_of_documented_keys_with_the_plans_values():
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "qlora", "--lora-rank", "16",
                     "--lora-targets", "all", "--batch", "4", "--seq", "4096", "--grad-checkpointing",
                     "--optimizer", "paged_adamw_8bit", "--packing", "on", "--attention", "flash", "--export", "trl")
    cfg = yaml.safe_load(out)
    assert set(cfg) <= TRL_KEYS, set(cfg) - TRL_KEYS
    assert cfg["model_name_or_path"] == "meta-llama/Llama-3.1-8B"
    assert (cfg["per_device_train_batch_size"], cfg["max_length"], cfg["packing"]) == (4, 4096, True)
    assert cfg["gradient_checkpointing"] is True and cfg["optim"] == "paged_adamw_8bit" and cfg["optim"] in HF_OPTIMIZERS
    assert cfg["attn_implementation"] == "flash_attention_2" and cfg["dtype"] in TRL_DTYPES
    assert (cfg["use_peft"], cfg["lora_r"], cfg["lora_alpha"], cfg["lora_target_modules"]) == (True, 16, 32, ["all-linear"])
    assert cfg["load_in_4bit"] is True and cfg["bnb_4bit_quant_type"] == "nf4" and cfg["bf16"] is True
    assert cfg.get("loss_type", "nll") in TRL_LOSSES
    notes = _comments(out)
    assert notes[1].startswith("keys: TRL 1.10.0.dev0") and any("LoRA alpha 32" in n for n in notes)


@pytest.mark.parametrize("optimizer", sorted(exports.TRL_OPTIM))
def test_every_planned_optimizer_has_a_transformers_name(optimizer):
    assert exports.TRL_OPTIM[optimizer] in HF_OPTIMIZERS


def test_trl_points_zero_to_the_deepspeed_export():
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "full", "--zero", "3", "--gpus", "4",
                     "--export", "trl")
    assert any("ZeRO stage 3" in n and "--export deepspeed" in n for n in _comments(out))
    assert "use_peft" not in yaml.safe_load(out)


def test_vllm_command_carries_the_plans_memory_settings():
    out, _ = _export("serve", "--model", "llama-3-8b", "--gpu", "a100-40gb-sxm", "--gpus", "2", "--engine", "vllm",
                     "--max-model-len", "16384", "--gpu-memory-utilization", "0.85", "--max-num-seqs", "64",
                     "--kv-precision", "fp8", "--export", "vllm")
    (command,) = [line for line in out.splitlines() if not line.startswith("#")]
    assert command.startswith("vllm serve meta-llama/Meta-Llama-3-8B ")
    flags = _flags(command)
    assert set(flags) <= VLLM_FLAGS, set(flags) - VLLM_FLAGS
    assert flags["--max-model-len"] == "16384" and flags["--gpu-memory-utilization"] == "0.85"
    assert flags["--max-num-seqs"] == "64" and flags["--tensor-parallel-size"] == "2"
    assert flags["--kv-cache-dtype"] in VLLM_KV and flags["--dtype"] in VLLM_DTYPES
    assert _comments(out)[1].startswith("keys: vLLM")


def test_vllm_says_a_kv_type_it_has_no_flag_for():
    out, _ = _export("serve", "--model", "llama-3-8b", "--gpu", "rtx-4090", "--engine", "vllm", "--max-model-len", "4096",
                     "--kv-precision", "int4", "--export", "vllm")
    (command,) = [line for line in out.splitlines() if not line.startswith("#")]
    assert "--kv-cache-dtype" not in command and any(n.startswith("not expressed: KV cache int4") for n in _comments(out))


def test_sglang_command_uses_its_own_flags():
    out, _ = _export("serve", "--model", "llama-3-8b", "--gpu", "rtx-4090", "--gpus", "2", "--engine", "sglang",
                     "--max-model-len", "8192", "--export", "sglang")
    (command,) = [line for line in out.splitlines() if not line.startswith("#")]
    assert command.startswith("python -m sglang.launch_server ")
    flags = _flags(command.removeprefix("python -m sglang.launch_server "))
    assert set(flags) <= SGLANG_FLAGS and flags["--context-length"] == "8192" and flags["--tp-size"] == "2"
    assert 0 < float(flags["--mem-fraction-static"]) < 1


def test_llama_server_quantized_cache_turns_flash_attention_on():
    out, _ = _export("serve", "--model", "llama-3-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp", "--max-model-len",
                     "8192", "--max-num-seqs", "2", "--kv-precision", "int8", "--export", "llama-server")
    (command,) = [line for line in out.splitlines() if not line.startswith("#")]
    flags = _flags(command)
    assert set(flags) <= LLAMA_FLAGS, set(flags) - LLAMA_FLAGS
    assert flags["-c"] == str(8192 * 2) and flags["-np"] == "2"  # the slots share one context
    assert flags["-ctk"] in LLAMA_CACHE_TYPES and flags["-ctv"] == "q8_0" and flags["-fa"] == "on"


def test_ollama_modelfile_and_its_server_environment():
    out, _ = _export("serve", "--model", "llama-3-8b", "--gpu", "rtx-4090", "--engine", "ollama", "--max-model-len",
                     "8192", "--kv-precision", "int8", "--export", "ollama")
    body = [line for line in out.splitlines() if line and not line.startswith("#")]
    assert body[0].startswith("FROM ./llama-3-8b-Q4_K_M.gguf")
    params = dict(line.split()[1:3] for line in body[1:])
    assert all(line.split()[0] == "PARAMETER" for line in body[1:]) and set(params) <= OLLAMA_PARAMETERS
    assert params["num_ctx"] == "8192" and int(params["num_gpu"]) > 0
    server = next(n for n in _comments(out) if n.startswith("server: "))
    assert "OLLAMA_KV_CACHE_TYPE=q8_0" in server and "OLLAMA_FLASH_ATTENTION=1" in server


@pytest.mark.parametrize("argv, named", [
    (("estimate", "--model", "llama-3-8b", "--task", "infer", "--export", "deepspeed"), "serve ... --export"),
    (("estimate", "--model", "llama-3-8b", "--export", "nope"), "'nope'"),
    (("estimate", "--model", "llama-3-8b", "--export", "trl", "--json"), "--export"),
    (("serve", "--model", "llama-3-8b", "--gpu", "rtx-4090", "--engine", "vllm", "--max-model-len", "4096",
      "--export", "ollama"), "--engine ollama"),
])
def test_an_export_that_cannot_be_made_is_bad_input(argv, named):
    code, out, err = run_cli(*argv)
    assert code == 2 and out == "" and err.startswith("error: ") and named in err and err.count("\n") == 1


def test_an_export_of_a_plan_that_does_not_fit_warns():
    _, err = _export("estimate", "--model", "llama-3-70b", "--method", "full", "--gpu", "rtx-4090", "--export", "trl")
    assert "warning: this plan does not fit rtx-4090" in err
