"""`estimate --export` and `serve --export` (issue 26 item 3), through the real command line
(tests/clirun.py): each export carries the plan's values, in keys the target documents (the
key lists below are copied from the version planner/exports.py cites in SOURCES), parses as
its format, and says what it could not express."""

from __future__ import annotations

import json
import re
import shlex

import pytest
import yaml

from planner import exports
from tests.clirun import run_cli

# DeepSpeed: deepspeed/runtime/constants.py @088be89 (top level), runtime/zero/config.py
# @1b88ac3 (DeepSpeedZeroConfig fields and aliases), runtime/zero/offload_config.py @1978617
DEEPSPEED_TOP = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "bf16", "fp16",
                 "optimizer", "zero_optimization", "zero_allow_untested_optimizer", "gradient_clipping",
                 "zero_force_ds_cpu_optimizer"}  # runtime/constants.py ZERO_FORCE_DS_CPU_OPTIMIZER (default True)
DEEPSPEED_ZERO = {"stage", "offload_optimizer", "offload_param", "stage3_gather_16bit_weights_on_model_save",
                  "contiguous_gradients", "overlap_comm", "reduce_bucket_size", "sub_group_size"}
DEEPSPEED_OFFLOAD = {"device", "pin_memory", "nvme_path", "buffer_count"}
DEEPSPEED_DEVICES = {"none", "cpu", "nvme"}
# TRL 1.10.0.dev0 @f2cd577: ModelConfig (trl/trainer/model_config.py), SFTConfig
# (trl/trainer/sft_config.py) and the TrainingArguments fields it inherits
TRL_KEYS = {"model_name_or_path", "dtype", "attn_implementation", "use_peft", "lora_r", "lora_alpha",
            "lora_target_modules", "load_in_8bit", "load_in_4bit", "bnb_4bit_quant_type", "max_length", "packing",
            "loss_type", "activation_offloading", "per_device_train_batch_size", "gradient_accumulation_steps",
            "gradient_checkpointing", "optim", "bf16", "fp16", "use_liger_kernel", "deepspeed",
            "lora_dropout",  # ModelConfig.lora_dropout, model_config.py line 115 (default 0.05)
            "use_bnb_nested_quant",  # ModelConfig.use_bnb_nested_quant (default False)
            "learning_rate"}  # TrainingArguments.learning_rate (SFTConfig default 2e-5)
TRL_DTYPES = {"auto", "bfloat16", "float16", "float32"}
TRL_LOSSES = {"nll", "dft", "chunked_nll"}
# transformers OptimizerNames (the values TrainingArguments.optim accepts)
HF_OPTIMIZERS = {"adamw_torch", "adamw_torch_fused", "adafactor", "adamw_torch_4bit", "adamw_torch_8bit", "sgd",
                 "adagrad", "adamw_bnb_8bit", "adamw_8bit", "paged_adamw_32bit", "paged_adamw_8bit", "lion_8bit",
                 "lion_32bit", "rmsprop", "galore_adamw", "galore_adamw_8bit", "galore_adamw_layerwise",
                 "galore_adamw_8bit_layerwise"}  # transformers 5.24.0 training_args.py OptimizerNames
# vLLM @002f10e: CacheConfig (vllm/config/cache.py) and the engine arguments
VLLM_FLAGS = {"--max-model-len", "--gpu-memory-utilization", "--kv-cache-memory-bytes", "--max-num-seqs",
              "--tensor-parallel-size", "--dtype",
              "--quantization", "--kv-cache-dtype", "--pipeline-parallel-size",
              # speculative decoding (vllm/engine/arg_utils.py: --speculative-config since 0.8)
              "--speculative-config"}
VLLM_KV = {"auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"}
VLLM_DTYPES = {"auto", "half", "float16", "bfloat16", "float", "float32"}
# SGLang @001067f: ServerArgs fields (python/sglang/srt/server_args.py), flag = --field-name
SGLANG_FLAGS = {"--model-path", "--context-length", "--mem-fraction-static", "--max-running-requests", "--tp-size",
                "--dtype", "--kv-cache-dtype", "--quantization"}
SGLANG_KV = {"auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16"}
# llama.cpp common/arg.cpp @145b628 (tools/server/README.md)
LLAMA_FLAGS = {"-m", "-ngl", "-c", "-np", "-ctk", "-ctv", "-fa", "--n-cpu-moe", "--cpu-moe", "-sm",
               "-md", "-ngld", "--mmproj"}  # the draft model and its GPU layers (common/arg.cpp)
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


@pytest.mark.parametrize("optimizer, own", [("adamw_8bit", False), ("adafactor", False), ("adamw", True)])
def test_deepspeed_offload_takes_the_scripts_optimizer(optimizer, own):
    """DeepSpeed 0.19.8 runtime/engine.py _configure_optimizer, lines 2342-2346: under offload_optimizer a client
    optimizer (a Trainer's optim=..., which the config leaves to the script) raises ZeRORuntimeException unless
    zero_force_ds_cpu_optimizer is false; DeepSpeed's own AdamW (its CPU Adam) needs nothing."""
    out, err = _export("estimate", "--model", "llama-3.1-8b", "--method", "full", "--optimizer", optimizer, "--zero", "2",
                       "--gpus", "2", "--offload", "optimizer", "--export", "deepspeed")
    cfg = json.loads(out)
    assert ("optimizer" in cfg) is own
    assert cfg.get("zero_force_ds_cpu_optimizer", True) is own


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_deepspeed_sgd_under_zero_is_allowed_as_untested(zero):
    """DeepSpeed 0.19.8 runtime/engine.py _do_optimizer_sanity_check (line 2298): an optimizer outside
    runtime/zero/utils.py ZERO_SUPPORTED_OPTIMIZERS (Adam, AdamW, Adagrad and DeepSpeed's own; not torch.optim.SGD)
    under ZeRO asserts "You are using an untested ZeRO Optimizer" unless zero_allow_untested_optimizer is true."""
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "lora", "--optimizer", "sgd", "--zero", str(zero),
                     "--gpus", "2", "--export", "deepspeed")
    cfg = json.loads(out)
    assert cfg["optimizer"]["type"] == "SGD" and cfg["zero_allow_untested_optimizer"] is True


@pytest.mark.parametrize("target", ["llama-factory", "axolotl", "trl"])
@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_a_trainer_config_naming_the_deepspeed_file_has_its_learning_rate(target, optimizer):
    """transformers 5.24.0 integrations/deepspeed.py: trainer_config_process fill_match("optimizer.params.lr",
    args.learning_rate) and trainer_config_finalize raises "Please correct the following DeepSpeed config values that
    mismatch TrainingArguments values: - ds optimizer.params.lr=2e-05 vs hf learning_rate=5e-05" (LLaMA-Factory's
    default is TrainingArguments' 5e-5, TRL's 2e-5): the trainer config carries the DeepSpeed file's lr."""
    argv = ("estimate", "--model", "llama-3.1-8b", "--method", "lora", "--optimizer", optimizer, "--zero", "2",
            "--gpus", "2")
    ds = json.loads(_export(*argv, "--export", "deepspeed")[0])
    cfg = yaml.safe_load(_export(*argv, "--export", target)[0])
    assert cfg["learning_rate"] == ds["optimizer"]["params"]["lr"]


@pytest.mark.parametrize("gpus, zero, offload, forced", [("1", "2", "optimizer", True), ("1", "3", "all", True),
                                                         ("2", "2", "none", False), ("1", "0", "none", False)])
def test_llama_factory_on_one_gpu_with_deepspeed_is_launched_under_torchrun(gpus, zero, offload, forced):
    """LLaMA-Factory @ff6d4d1 hparams/parser.py line 472 refuses DeepSpeed outside torchrun ("Please use
    `FORCE_TORCHRUN=1` to launch DeepSpeed training."), and launcher.py line 61 starts torchrun by itself only for
    more than one device."""
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "lora", "--gpus", gpus, "--zero", zero,
                     "--offload", offload, "--export", "llama-factory")
    run = next(c for c in _comments(out) if c.startswith("run: "))
    assert run == ("run: FORCE_TORCHRUN=1 llamafactory-cli train FILE" if forced else "run: llamafactory-cli train FILE")


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
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "full", "--precision", "mixed_bf16", "--zero",
                     "3", "--gpus", "4", "--export", "trl")
    assert any("ZeRO stage 3" in n and "--export deepspeed" in n for n in _comments(out))
    cfg = yaml.safe_load(out)
    assert "use_peft" not in cfg and cfg["bf16"] is True


def test_trl_launches_a_pure_bf16_zero_3_plan_on_fsdp_without_mixed_precision():
    """DeepSpeed's ZeRO-3 and accelerate's FSDP under bf16 mixed precision both keep an fp32 copy of the trained
    weights (stage3.py fp32_partitioned_groups_flat; accelerate fsdp2_prepare_model's upcast), which a pure bf16
    plan does not count: the export says launch FSDP without mixed precision, and writes bf16 false."""
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "full", "--zero", "3", "--gpus", "4",
                     "--export", "trl")
    cfg = yaml.safe_load(out)
    assert cfg["bf16"] is False and cfg["dtype"] == "bfloat16"
    (note,) = [n for n in _comments(out) if "ZeRO stage 3" in n]
    assert "--export accelerate-fsdp" in note and "--export deepspeed" not in note
    # LoRA trains fp32 adapters, which the upcast leaves as they are: the DeepSpeed pointer stays
    lora, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "lora", "--zero", "3", "--gpus", "4",
                      "--export", "trl")
    assert yaml.safe_load(lora)["bf16"] is True
    assert any("ZeRO stage 3" in n and "--export deepspeed" in n for n in _comments(lora))


def test_vllm_command_carries_the_plans_memory_settings():
    out, _ = _export("serve", "--model", "llama-3-8b", "--gpu", "a100-40gb-sxm", "--gpus", "2", "--engine", "vllm",
                     "--max-model-len", "8192", "--gpu-memory-utilization", "0.85", "--max-num-seqs", "64",
                     "--kv-precision", "fp8", "--export", "vllm")
    (command,) = [line for line in out.splitlines() if not line.startswith("#")]
    assert command.startswith("vllm serve meta-llama/Meta-Llama-3-8B ")
    flags = _flags(command)
    assert set(flags) <= VLLM_FLAGS, set(flags) - VLLM_FLAGS
    assert flags["--max-model-len"] == "8192" and flags["--gpu-memory-utilization"] == "0.85"  # (llama-3-8b's context)
    assert flags["--max-num-seqs"] == "64" and flags["--tensor-parallel-size"] == "2"
    assert flags["--kv-cache-dtype"] in VLLM_KV and flags["--dtype"] in VLLM_DTYPES
    assert _comments(out)[1].startswith("keys: vLLM")


@pytest.mark.parametrize("engine, env", [("vllm", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"),
                                         ("sglang", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")])
def test_an_export_beyond_the_models_context_carries_the_engines_variable(engine, env):
    """serve --allow-long-context printed `VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve ...` but --export wrote the
    command without it, which vLLM refuses to start at a length beyond max_position_embeddings."""
    argv = ["serve", "--model", "llama-2-7b", "--gpu", "a100-80gb-sxm", "--engine", engine, "--max-model-len"]
    long, _ = _export(*argv, "8192", "--allow-long-context", "--export", engine)
    (command,) = [line for line in long.splitlines() if not line.startswith("#")]
    assert command.startswith(env + " ") and "8192" in command
    within, _ = _export(*argv, "4096", "--export", engine)
    (command,) = [line for line in within.splitlines() if not line.startswith("#")]
    assert "ALLOW" not in command


def test_vllm_command_carries_a_pinned_kv_cache_in_place_of_the_share():
    out, _ = _export("serve", "--model", "llama-3-8b", "--gpu", "a100-40gb-sxm", "--engine", "vllm", "--max-model-len",
                     "8192", "--kv-cache-memory-bytes", "4000000000", "--export", "vllm")
    (command,) = [line for line in out.splitlines() if not line.startswith("#")]
    flags = _flags(command)
    assert flags["--kv-cache-memory-bytes"] == "4000000000" and "--gpu-memory-utilization" not in flags


def test_vllm_export_of_a_kv_type_it_has_no_flag_for_is_refused():
    """vLLM has no int4 KV cache (engine/serving.py KV_ENGINE_TYPES): serve refuses the plan before any export (exit 2,
    naming the value and the types accepted), so no command launches another cache than the one planned."""
    code, out, err = run_cli("serve", "--model", "llama-3-8b", "--gpu", "rtx-4090", "--engine", "vllm", "--max-model-len",
                             "4096", "--kv-precision", "int4", "--export", "vllm")
    assert code == 2 and out == ""
    assert "kv-precision 'int4' is not accepted for vllm; accepted: auto, fp16, bf16, fp8" in err


def test_sglang_command_uses_its_own_flags():
    out, _ = _export("serve", "--model", "llama-3-8b", "--gpu", "rtx-4090", "--gpus", "2", "--engine", "sglang",
                     "--max-model-len", "8192", "--kv-precision", "fp8", "--export", "sglang")
    (command,) = [line for line in out.splitlines() if not line.startswith("#")]
    assert command.startswith("python -m sglang.launch_server ")
    flags = _flags(command.removeprefix("python -m sglang.launch_server "))
    assert set(flags) <= SGLANG_FLAGS and flags["--context-length"] == "8192" and flags["--tp-size"] == "2"
    assert 0 < float(flags["--mem-fraction-static"]) < 1 and flags["--kv-cache-dtype"] in SGLANG_KV
    assert flags["--dtype"] in VLLM_DTYPES  # (SGLang's --dtype choices are vLLM's)


def test_llama_server_quantized_cache_turns_flash_attention_on():
    out, _ = _export("serve", "--model", "llama-3-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp", "--max-model-len",
                     "8192", "--max-num-seqs", "2", "--kv-precision", "int8", "--export", "llama-server")
    (command,) = [line for line in out.splitlines() if not line.startswith("#")]
    flags = _flags(command)
    assert set(flags) <= LLAMA_FLAGS, set(flags) - LLAMA_FLAGS
    assert flags["-c"] == str(8192 * 2) and flags["-np"] == "2"  # the slots share one context
    assert flags["-ctk"] in LLAMA_CACHE_TYPES and flags["-ctv"] == "q8_0" and flags["-fa"] == "on"


def test_the_serving_exports_carry_fp8_and_the_planned_draft_model():
    out, _ = _export("serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--engine", "vllm", "--precision", "fp8",
                     "--draft-model", "llama-3.2-1b", "--max-model-len", "8192", "--export", "vllm")
    (command,) = [line for line in out.splitlines() if not line.startswith("#")]
    flags = _flags(command)
    assert set(flags) <= VLLM_FLAGS, set(flags) - VLLM_FLAGS
    assert flags["--quantization"] == "fp8"
    spec = json.loads(flags["--speculative-config"])
    assert spec["model"] == "meta-llama/Llama-3.2-1B" and spec["num_speculative_tokens"] > 0
    out, _ = _export("serve", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp", "--precision",
                     "q4_k_m", "--draft-model", "llama-3.2-1b", "--max-model-len", "8192", "--export", "llama-server")
    (command,) = [line for line in out.splitlines() if not line.startswith("#")]
    flags = _flags(command)
    assert set(flags) <= LLAMA_FLAGS and flags["-md"] == "llama-3.2-1b-Q4_K_M.gguf" and flags["-ngld"] == "99"
    assert "-cd" not in flags and "--mmproj" not in flags  # -cd: gone from llama.cpp (tests/test_serving_launch.py)
    out, _ = _export("serve", "--model", "gemma-3-4b", "--gpu", "rtx-4090", "--engine", "llama.cpp", "--precision",
                     "q4_k_m", "--max-model-len", "8192", "--export", "llama-server")
    (command,) = [line for line in out.splitlines() if not line.startswith("#")]
    assert _flags(command)["--mmproj"] == "mmproj-gemma-3-4b-f16.gguf"  # its vision tower (issue 25)


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


# Accelerate 1.15.0.dev0 @16cb6eb: commands/config/config_args.py (ClusterConfig), cluster.py
# (fsdp_config keys), utils/constants.py (FSDP_AUTO_WRAP_POLICY, FSDP2_STATE_DICT_TYPE)
ACCELERATE_TOP = {"compute_environment", "distributed_type", "mixed_precision", "num_machines", "num_processes",
                  "machine_rank", "main_training_function", "use_cpu", "fsdp_config", "deepspeed_config",
                  "parallelism_config"}  # config_args.py ClusterConfig.parallelism_config
# cluster.py's parallelism_config keys (prefix parallelism_config_), as examples/torch_native_parallelism/configs/cp.yaml
ACCELERATE_PARALLELISM = {"parallelism_config_dp_replicate_size", "parallelism_config_dp_shard_size",
                          "parallelism_config_tp_size", "parallelism_config_cp_size", "parallelism_config_cp_comm_strategy"}
ACCELERATE_FSDP = {"fsdp_version", "fsdp_reshard_after_forward", "fsdp_offload_params", "fsdp_auto_wrap_policy",
                   "fsdp_state_dict_type", "fsdp_cpu_ram_efficient_loading", "fsdp_activation_checkpointing",
                   "fsdp_backward_prefetch", "fsdp_forward_prefetch", "fsdp_min_num_params", "fsdp_sync_module_states",
                   "fsdp_transformer_layer_cls_to_wrap", "fsdp_use_orig_params"}
# LLaMA-Factory 0.9.6.dev0 @ff6d4d1: hparams/{model,data,finetuning}_args.py fields and the
# TrainingArguments ones its examples set; extras/constants.py AttentionFunction
LLAMA_FACTORY_KEYS = {"model_name_or_path", "flash_attn", "quantization_bit", "quantization_method",
                      "quantization_type", "enable_liger_kernel", "disable_gradient_checkpointing", "stage", "do_train",
                      "finetuning_type", "lora_rank", "lora_alpha", "lora_target", "freeze_trainable_layers",
                      "pure_bf16", "dataset", "template", "cutoff_len", "packing", "output_dir",
                      "per_device_train_batch_size", "gradient_accumulation_steps", "optim", "bf16", "fp16", "deepspeed",
                      "lora_dropout",  # finetuning_args.py LoraArguments.lora_dropout, line 73 (default 0.0)
                      "double_quantization",  # model_args.py QuantizationArguments.double_quantization (default True)
                      # finetuning_args.py FinetuningArguments.use_adam_mini (line 472), .use_muon (line 522)
                      "use_adam_mini", "use_muon", "learning_rate"}
LLAMA_FACTORY_ATTENTION = {"auto", "disabled", "sdpa", "fa2", "fa3"}
# axolotl 0.18.0 @067b021: utils/schemas/{config,model,training,peft}.py, integrations/liger/args.py
AXOLOTL_KEYS = {"base_model", "load_in_8bit", "load_in_4bit", "adapter", "lora_r", "lora_alpha", "lora_target_modules",
                "lora_target_linear", "unfrozen_parameters", "datasets", "output_dir", "sequence_len", "sample_packing",
                "micro_batch_size", "gradient_accumulation_steps", "optimizer", "gradient_checkpointing",
                "attn_implementation", "bf16", "fp16", "chunked_cross_entropy", "plugins",
                "liger_fused_linear_cross_entropy", "activation_offloading", "deepspeed",
                "liger_rope", "liger_rms_norm", "liger_glu_activation",  # integrations/liger/args.py LigerArgs
                "lora_dropout",  # utils/schemas/peft.py LoraConfig.lora_dropout, line 80 (default 0.0)
                "bnb_config_kwargs",  # utils/schemas/peft.py line 149; loaders/model.py line 718 updates from it
                "context_parallel_size",  # utils/schemas/config.py line 1107 (ring-flash-attn)
                "learning_rate"}  # utils/schemas/training.py line 116 (required: no default)
# torchtune 0.7.0 @bd2a0fc: the keys of recipes/configs/llama3_1/*.yaml
TORCHTUNE_KEYS = {"batch_size", "gradient_accumulation_steps", "dtype", "enable_activation_checkpointing",
                  "enable_activation_offloading", "compile", "dataset", "tokenizer", "optimizer", "optimizer_in_bwd",
                  "loss", "model", "fsdp_cpu_offload",
                  "context_parallel_dim"}  # recipes/{full,lora}_finetune_distributed.py cfg.get("context_parallel_dim", 1)
TORCHTUNE_LORA = {"lora_attn_modules", "apply_lora_to_mlp", "apply_lora_to_output", "lora_rank", "lora_alpha",
                  "lora_dropout",  # 8B_lora_single_device.yaml model.lora_dropout: 0.0
                  "quantize_base"}  # models/llama3_1/_model_builders.py lora_llama3_1_8b(quantize_base=False); qlora_*'s True


def test_accelerate_fsdp_shards_as_zero_3_and_offloads():
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "full", "--zero", "3", "--gpus", "8",
                     "--offload", "all", "--grad-checkpointing", "--export", "accelerate-fsdp")
    cfg = yaml.safe_load(out)
    assert set(cfg) <= ACCELERATE_TOP and set(cfg["fsdp_config"]) <= ACCELERATE_FSDP
    # pure bf16 (the default) trained whole: no mixed precision, else accelerate would upcast the trained
    # weights to fp32 (its fsdp2_prepare_model), which the plan does not count
    assert (cfg["distributed_type"], cfg["num_processes"], cfg["mixed_precision"]) == ("FSDP", 8, "no")
    assert any("mixed_precision no" in n for n in _comments(out))
    mixed, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "full", "--precision", "mixed_bf16",
                       "--zero", "3", "--gpus", "8", "--export", "accelerate-fsdp")
    assert yaml.safe_load(mixed)["mixed_precision"] == "bf16"
    fsdp = cfg["fsdp_config"]
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_reshard_after_forward"] is True
    assert fsdp["fsdp_offload_params"] is True and fsdp["fsdp_activation_checkpointing"] is True
    assert fsdp["fsdp_auto_wrap_policy"] in {"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"}
    assert fsdp["fsdp_state_dict_type"] in {"SHARDED_STATE_DICT", "FULL_STATE_DICT"}


def test_accelerate_fsdp_says_zero_2_is_written_as_no_reshard():
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "full", "--zero", "2", "--gpus", "4",
                     "--export", "accelerate-fsdp")
    assert yaml.safe_load(out)["fsdp_config"]["fsdp_reshard_after_forward"] is False
    assert any(n.startswith("not expressed: ZeRO stage 2") for n in _comments(out))


def test_accelerate_fsdp_says_an_fsdp1_plan_is_not_what_it_launches():
    """The config is FSDP2; a plan of FSDP1's flat parameters (--flat-params on / mixed) counts other memory."""
    args = ("estimate", "--model", "llama-2-7b", "--method", "lora", "--zero", "3", "--gpus", "8", "--precision",
            "amp_bf16", "--grad-checkpointing", "--export", "accelerate-fsdp")
    out, _ = _export(*args, "--flat-params", "mixed")
    assert yaml.safe_load(out)["fsdp_config"]["fsdp_version"] == 2
    assert any(n.startswith("not expressed: flat parameters mixed") for n in _comments(out))
    out, _ = _export(*args)
    assert not any("flat parameters" in n for n in _comments(out))


def test_the_accumulation_note_says_what_no_sync_holds_under_fsdp():
    """engine/stacks.py accum_sync: accumulating keeps the step's gradients alive between micro-batches (unsharded under
    FSDP's no_sync); DeepSpeed accumulates into its partitions: 'the plan does not depend on it' holds there only."""
    base = ("estimate", "--model", "llama-3.1-8b", "--method", "full", "--zero", "3", "--gpus", "8")
    fsdp, _ = _export(*base, "--export", "accelerate-fsdp")
    assert any("unsharded under FSDP's no_sync: plan that run with --accum-sync last" in n for n in _comments(fsdp))
    _, ds_notes = _export(*base, "--export", "deepspeed")  # (a JSON file: its notes go to stderr)
    assert "the plan's memory does not depend on it (DeepSpeed accumulates into its gradient partitions" in ds_notes
    lit, _ = _export(*base, "--recipe", "litgpt", "--export", "litgpt")
    assert any("the plan counts the gradients kept between micro-batches (--accum-sync last)" in n for n in _comments(lit))
    # one GPU: accumulation keeps the full gradients alive through the next forward too
    one, _ = _export("estimate", "--model", "llama-3.2-1b", "--method", "full", "--export", "accelerate-fsdp")
    assert any("alive through the next micro-batches: plan that run with --accum-sync last" in n for n in _comments(one))


def test_llama_factory_qlora_and_full_pure_bf16():
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "qlora", "--lora-rank", "32", "--lora-targets",
                     "q_proj,k_proj,v_proj", "--seq", "4096", "--attention", "flash", "--export", "llama-factory")
    cfg = yaml.safe_load(out)
    assert set(cfg) <= LLAMA_FACTORY_KEYS, set(cfg) - LLAMA_FACTORY_KEYS
    assert (cfg["finetuning_type"], cfg["quantization_bit"], cfg["quantization_type"]) == ("lora", 4, "nf4")
    assert (cfg["lora_rank"], cfg["lora_target"], cfg["cutoff_len"]) == (32, "q_proj,k_proj,v_proj", 4096)
    assert cfg["flash_attn"] == "fa2" and cfg["flash_attn"] in LLAMA_FACTORY_ATTENTION and cfg["optim"] in HF_OPTIMIZERS
    assert cfg["disable_gradient_checkpointing"] is True  # the plan did not checkpoint; LLaMA-Factory would
    full, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "full", "--precision", "bf16",
                      "--export", "llama-factory")
    cfg = yaml.safe_load(full)
    assert cfg["pure_bf16"] is True and "bf16" not in cfg and "quantization_bit" not in cfg


def test_axolotl_freeze_unfreezes_the_last_layers():
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "freeze", "--freeze-layers", "2",
                     "--packing", "on", "--export", "axolotl")
    cfg = yaml.safe_load(out)
    assert set(cfg) <= AXOLOTL_KEYS, set(cfg) - AXOLOTL_KEYS
    assert cfg["unfrozen_parameters"] == ["^model[.]layers[.]30[.].*", "^model[.]layers[.]31[.].*", "^lm_head[.].*"]
    assert cfg["sample_packing"] is True and "adapter" not in cfg and cfg["optimizer"] in HF_OPTIMIZERS


def test_axolotl_qlora_all_linear():
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "qlora", "--lora-targets", "all",
                     "--batch", "2", "--export", "axolotl")
    cfg = yaml.safe_load(out)
    assert set(cfg) <= AXOLOTL_KEYS
    assert (cfg["adapter"], cfg["load_in_4bit"], cfg["lora_target_linear"], cfg["micro_batch_size"]) == ("qlora", True,
                                                                                                        True, 2)


@pytest.mark.parametrize("optimizer, lr", [("adamw_8bit", 2e-5), ("sgd", 1e-3)])
def test_axolotl_writes_the_learning_rate_its_schema_requires(optimizer, lr):
    """axolotl 0.18.0 utils/schemas/training.py line 116 `learning_rate: str | float` has no default: validate_config
    (utils/config/__init__.py) refused every export without it ("learning_rate Field required"). The placeholder is
    the DeepSpeed file's own (its optimizer lr), which the Trainer requires equal to learning_rate."""
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "lora", "--optimizer", optimizer,
                     "--export", "axolotl")
    assert yaml.safe_load(out)["learning_rate"] == lr
    assert any(f"learning rate {lr:g}: a placeholder" in n for n in _comments(out))


@pytest.mark.parametrize("target, flags, bf16, fp16", [
    ("trl", ("--precision", "fp32"), False, False),
    ("trl", ("--precision", "fp16", "--zero", "3", "--gpus", "2", "--offload", "optimizer"), False, False),
    ("trl", ("--precision", "amp_fp16"), False, True),
    ("axolotl", ("--precision", "fp32"), False, None)])
def test_an_fp32_plan_turns_the_targets_default_bf16_off(target, flags, bf16, fp16):
    """An unset bf16 is on in TRL when fp16 is off (TRL 1.16.0 trl/trainer/base_config.py line 108) and 'auto' in
    axolotl, on where the GPU has it (axolotl 0.18.0 utils/config/__init__.py resolve_dtype): an fp32 plan, or a pure
    fp16 ZeRO-3 plan TRL launches with fp16 off, would run under bf16 autocast. Both say it: false."""
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "full", "--optimizer", "adamw_8bit", *flags,
                     "--export", target)
    cfg = yaml.safe_load(out)
    assert cfg["bf16"] is bf16 and cfg.get("fp16") is fp16


def test_torchtune_lora_keys_and_module_names():
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "lora", "--lora-targets", "q_proj,v_proj,o_proj",
                     "--grad-checkpointing", "--export", "torchtune")
    cfg = yaml.safe_load(out)
    assert set(cfg) <= TORCHTUNE_KEYS and set(cfg["model"]) <= TORCHTUNE_LORA
    assert cfg["model"]["lora_attn_modules"] == ["q_proj", "v_proj", "output_proj"]  # torchtune's name for o_proj
    assert cfg["model"]["apply_lora_to_mlp"] is False and cfg["enable_activation_checkpointing"] is True
    assert cfg["dtype"] in {"bf16", "fp32"} and set(cfg["dataset"]) == {"packed"} and set(cfg["tokenizer"]) == {"max_seq_len"}
    assert any("tune run lora_finetune_single_device" in n for n in _comments(out))


def test_torchtune_distributed_full_offloads_to_cpu():
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "full", "--zero", "3", "--gpus", "4",
                     "--offload", "all", "--export", "torchtune")
    cfg = yaml.safe_load(out)
    assert set(cfg) <= TORCHTUNE_KEYS and cfg["fsdp_cpu_offload"] is True and "model" not in cfg
    assert any("tune run full_finetune_distributed" in n for n in _comments(out))


@pytest.mark.parametrize("target", exports.TRAIN_TARGETS)
def test_every_training_export_names_its_source_version(target):
    assert target in exports.EXPORTERS and target in exports.SOURCES
    assert re.search(r"@[0-9a-f]{7}|\d+\.\d+", exports.SOURCES[target])


@pytest.mark.parametrize("target, where", [("trl", ()), ("llama-factory", ()), ("axolotl", ()), ("torchtune", ("model",))])
def test_lora_dropout_reaches_each_targets_own_key(target, where):
    """--lora-dropout is the plan's (its masks are memory): written in each target's lora_dropout key, at 0 too
    (TRL's ModelConfig defaults to 0.05, so leaving it out would run another plan than the one estimated)."""
    keys = {"trl": TRL_KEYS, "llama-factory": LLAMA_FACTORY_KEYS, "axolotl": AXOLOTL_KEYS, "torchtune": TORCHTUNE_LORA}
    for asked, written in (("0.05", 0.05), ("0", 0.0)):
        out, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "lora", "--lora-targets", "all",
                         "--lora-dropout", asked, "--export", target)
        cfg = yaml.safe_load(out)
        for key in where:
            cfg = cfg[key]
        assert "lora_dropout" in keys[target] and cfg["lora_dropout"] == written, (target, asked)
        assert not any("dropout" in n for n in _comments(out) if n.startswith("not expressed")), target
    full, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "full", "--lora-dropout", "0.1",
                      "--export", target)
    assert "lora_dropout" not in full  # no adapters: no dropout key
# LitGPT 0.5.13 @2685705: the top-level keys of config_hub/finetune/llama-3.2-1B/{lora,qlora,full}.yaml (the
# setup() arguments of litgpt/finetune/lora.py and full.py) and litgpt/args.py TrainArgs's fields
LITGPT_KEYS = {"checkpoint_dir", "out_dir", "precision", "quantize", "devices", "num_nodes", "lora_r", "lora_alpha",
               "lora_dropout", "lora_query", "lora_key", "lora_value", "lora_projection", "lora_mlp", "lora_head",
               "data", "train", "eval", "optimizer", "logger_name", "seed", "resume"}
LITGPT_TRAIN = {"save_interval", "log_interval", "global_batch_size", "micro_batch_size", "lr_warmup_steps",
                "lr_warmup_fraction", "epochs", "max_tokens", "max_steps", "max_time", "max_seq_length",
                "tie_embeddings", "max_norm", "min_lr"}
LITGPT_PRECISIONS = {"bf16-true", "bf16-mixed", "16-true", "16-mixed", "32-true"}
LITGPT_QUANTIZE = {"bnb.nf4", "bnb.nf4-dq", "bnb.fp4", "bnb.fp4-dq", "bnb.int8-training"}


def test_litgpt_qlora_is_its_config_hub_yaml_with_the_plans_values():
    out, _ = _export("estimate", "--model", "llama-3.2-1b", "--method", "qlora", "--recipe", "litgpt", "--batch", "2",
                     "--seq", "512", "--lora-rank", "32", "--lora-targets", "q_proj,v_proj", "--optimizer",
                     "paged_adamw_32bit", "--export", "litgpt")
    cfg = yaml.safe_load(out)
    assert set(cfg) <= LITGPT_KEYS, set(cfg) - LITGPT_KEYS
    assert set(cfg["train"]) <= LITGPT_TRAIN
    assert cfg["precision"] in LITGPT_PRECISIONS and cfg["quantize"] == "bnb.nf4"  # the litgpt QLoRA base: no double quant
    assert (cfg["lora_r"], cfg["lora_query"], cfg["lora_key"], cfg["lora_value"], cfg["lora_mlp"]) == (32, True, False, True, False)
    assert cfg["train"]["micro_batch_size"] == 2 and cfg["train"]["max_seq_length"] == 512
    assert cfg["optimizer"]["class_path"] == "bitsandbytes.optim.PagedAdamW"
    assert any("litgpt finetune_lora --config" in n for n in _comments(out))


def test_litgpt_full_and_the_double_quantized_base_and_what_it_cannot_say():
    out, _ = _export("estimate", "--model", "llama-3.2-1b", "--method", "full", "--gpus", "2", "--export", "litgpt")
    cfg = yaml.safe_load(out)
    assert set(cfg) <= LITGPT_KEYS and "lora_r" not in cfg and cfg["devices"] == 2
    notes = _comments(out)
    assert any("litgpt finetune_full" in n for n in notes)
    assert any("checkpoints every block" in n for n in notes) and any("ZeRO stage 0" in n for n in notes)
    assert any("loss unfused" in n for n in notes)  # planned under hf: LitGPT's own loss is not that one
    out, _ = _export("estimate", "--model", "llama-3.2-1b", "--method", "qlora", "--base-precision", "nf4",
                     "--export", "litgpt")
    cfg = yaml.safe_load(out)
    assert cfg["quantize"] == "bnb.nf4-dq" and cfg["quantize"] in LITGPT_QUANTIZE
    assert any("PagedAdamW whatever the config" in n for n in _comments(out))


@pytest.mark.parametrize("flags, nested", [((), True), (("--bnb-double-quant", "off"), False),
                                           (("--base-precision", "nf4_nodq"), False)])
def test_a_4bit_base_is_launched_at_the_double_quantization_estimated(flags, nested):
    """The engine's nf4 is double-quantized (4.127 bits a weight), nf4_nodq and --bnb-double-quant off are not
    (4.5): each target's own key says which, since their defaults differ (TRL off, LLaMA-Factory and axolotl on)
    and a launch at the other setting holds other bytes than the estimate."""
    args = ("estimate", "--model", "llama-3.1-8b", "--method", "qlora", *flags, "--export")
    trl = yaml.safe_load(_export(*args, "trl")[0])
    assert trl["load_in_4bit"] is True and trl["use_bnb_nested_quant"] is nested
    lf = yaml.safe_load(_export(*args, "llama-factory")[0])
    assert lf["quantization_bit"] == 4 and lf["double_quantization"] is nested
    ax = yaml.safe_load(_export(*args, "axolotl")[0])
    assert ax["load_in_4bit"] is True and ax["bnb_config_kwargs"] == {"bnb_4bit_use_double_quant": nested}


def test_litgpt_export_carries_the_plans_dropout_and_double_quantization():
    """LitGPT's lora_dropout key is the plan's (its configs use 0.05, whose masks the estimate counts); under
    --bnb-double-quant off a nf4 base is LitGPT's bnb.nf4, not bnb.nf4-dq."""
    out, _ = _export("estimate", "--model", "llama-3.2-1b", "--method", "qlora", "--recipe", "litgpt", "--base-precision",
                     "nf4", "--lora-dropout", "0.05", "--bnb-double-quant", "off", "--export", "litgpt")
    cfg = yaml.safe_load(out)
    assert cfg["lora_dropout"] == 0.05 and cfg["quantize"] == "bnb.nf4"
    assert not any("dropout" in n for n in _comments(out) if n.startswith("not expressed"))
    out, _ = _export("estimate", "--model", "llama-3.2-1b", "--method", "qlora", "--recipe", "litgpt", "--base-precision",
                     "nf4", "--export", "litgpt")
    assert yaml.safe_load(out)["quantize"] == "bnb.nf4-dq" and yaml.safe_load(out)["lora_dropout"] == 0.0


def test_a_plan_with_ligers_kernels_launches_them_or_says_it_cannot():
    """--liger on: TRL's use_liger_kernel, LLaMA-Factory's enable_liger_kernel and axolotl's Liger plugin with its
    norm, SwiGLU and RoPE keys (and its fused loss where the plan's loss is fused, as --liger on makes an auto loss);
    DeepSpeed's file names the script's switch; torchtune has no Liger kernels, and its config says the run holds
    more than the plan. Per-module checkpointing is written as whole-layer checkpointing, which holds less."""
    argv = ("estimate", "--model", "llama-3.1-8b", "--method", "lora", "--liger", "on", "--checkpointing", "module")
    trl = yaml.safe_load(_export(*argv, "--export", "trl")[0])
    assert set(trl) <= TRL_KEYS and trl["use_liger_kernel"] is True and trl["gradient_checkpointing"] is True
    lf = yaml.safe_load(_export(*argv, "--export", "llama-factory")[0])
    assert set(lf) <= LLAMA_FACTORY_KEYS and lf["enable_liger_kernel"] is True
    text = _export(*argv, "--export", "axolotl")[0]
    ax = yaml.safe_load(text)
    assert set(ax) <= AXOLOTL_KEYS, set(ax) - AXOLOTL_KEYS
    assert ax["plugins"] == ["axolotl.integrations.liger.LigerPlugin"]
    assert ax["liger_rms_norm"] and ax["liger_glu_activation"] and ax["liger_rope"] and ax["liger_fused_linear_cross_entropy"]
    assert any("per-module activation checkpointing" in c and "holds less" in c for c in _comments(text))
    tt = _export(*argv, "--export", "torchtune")[0]
    assert any("Liger's kernels: torchtune's modules have none" in c and "--liger off" in c for c in _comments(tt))
    ds = _export(*argv, "--export", "deepspeed")
    assert "use_liger_kernel=True" in ds[0] + ds[1]
    # with the loss asked unfused, axolotl gets the kernels without the fused loss
    ax2 = yaml.safe_load(_export(*argv, "--loss", "unfused", "--export", "axolotl")[0])
    assert ax2["liger_rms_norm"] and "liger_fused_linear_cross_entropy" not in ax2


@pytest.mark.parametrize("target", exports.TRAIN_TARGETS)
@pytest.mark.parametrize("method, base", [("qlora", "q8_0"), ("qlora", "q4_k_m"), ("lora", "q4_k_m")])
def test_a_gguf_base_is_refused_by_every_training_export(target, method, base):
    """A QLoRA plan over a GGUF base (q8_0: 8.5 bits a weight) was written as bitsandbytes' NF4 (TRL load_in_4bit,
    LLaMA-Factory quantization_type nf4, axolotl load_in_4bit), and a LoRA one over it as a 16-bit base: a launch
    holding other bytes than the plan. No target keeps a GGUF base in its bits: bad input, the base and what the
    target takes named."""
    code, out, err = run_cli("estimate", "--model", "llama-3.1-8b", "--method", method, "--base-precision", base,
                             "--export", target)
    assert code == 2 and out == "" and err.count("\n") == 1, (target, err)
    assert f"base precision '{base}'" in err and f"--export {target}: auto, " in err and "GGUF" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("flags, named", [(("--base-precision", "int8"), "'int8'"),
                                          (("--base-precision", "int4"), "'int4'"),
                                          (("--base-precision", "nf4_nodq"), "'nf4_nodq'"),
                                          (("--base-precision", "nf4", "--bnb-double-quant", "off"),
                                           "'nf4 with --bnb-double-quant off'")])
def test_torchtune_refuses_a_base_other_than_its_nf4(flags, named):
    """torchtune's one quantized base is torchao's double-quantized NF4 (quantize_base): an 8-bit, fp4 or
    single-quantized base was written as that NF4 (the QLoRA note), a run the plan did not estimate."""
    code, out, err = run_cli("estimate", "--model", "llama-3.1-8b", "--method", "qlora", *flags, "--export", "torchtune")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"base precision {named}" in err and "accepted for --export torchtune: auto, nf4" in err


@pytest.mark.parametrize("method, flags", [("qlora", ()), ("qlora", ("--base-precision", "nf4")),
                                           ("lora", ("--base-precision", "nf4"))])
def test_torchtune_builds_the_planned_nf4_base(method, flags):
    """An NF4 base (qlora, or lora over nf4, which wrote a 16-bit base) is the lora builders' quantize_base."""
    cfg = yaml.safe_load(_export("estimate", "--model", "llama-3.1-8b", "--method", method, *flags,
                                 "--export", "torchtune")[0])
    assert set(cfg["model"]) <= TORCHTUNE_LORA and cfg["model"]["quantize_base"] is True
    plain = yaml.safe_load(_export("estimate", "--model", "llama-3.1-8b", "--method", "lora", "--export", "torchtune")[0])
    assert "quantize_base" not in plain["model"]  # a 16-bit base: the builder's default


def test_an_8bit_and_an_int4_base_are_written_in_each_targets_keys():
    """int8: bitsandbytes' 8-bit load in each target that has it (LitGPT's bnb.int8-training); int4: its fp4, which
    LitGPT has too (bnb.fp4-dq; the export wrote no quantize mode, a 16-bit base); DeepSpeed's and accelerate's
    files hold no model, and say what the script loads."""
    args = ("estimate", "--model", "llama-3.1-8b", "--method", "qlora", "--base-precision")
    trl = yaml.safe_load(_export(*args, "int8", "--export", "trl")[0])
    assert trl["load_in_8bit"] is True and "load_in_4bit" not in trl
    lf = yaml.safe_load(_export(*args, "int8", "--export", "llama-factory")[0])
    assert (lf["quantization_bit"], lf["quantization_method"]) == (8, "bnb") and "quantization_type" not in lf
    ax = yaml.safe_load(_export(*args, "int8", "--export", "axolotl")[0])
    assert (ax["load_in_8bit"], ax["load_in_4bit"], ax["adapter"]) == (True, False, "lora")
    lit = yaml.safe_load(_export(*args, "int8", "--export", "litgpt")[0])
    assert lit["quantize"] == "bnb.int8-training"
    for base, quantize in (("int4", "bnb.fp4-dq"), ("nf4", "bnb.nf4-dq")):
        lit = yaml.safe_load(_export(*args, base, "--export", "litgpt")[0])
        assert lit["quantize"] == quantize and lit["quantize"] in LITGPT_QUANTIZE
    lit = yaml.safe_load(_export(*args, "int4", "--bnb-double-quant", "off", "--export", "litgpt")[0])
    assert lit["quantize"] == "bnb.fp4"
    _, err = _export(*args, "int8", "--export", "deepspeed")
    assert "frozen base int8: the training script loads it (BitsAndBytesConfig(load_in_8bit=True))" in err
    out, _ = _export(*args, "int8", "--export", "accelerate-fsdp")
    assert any("BitsAndBytesConfig(load_in_8bit=True)" in n for n in _comments(out))


def test_the_litgpt_recipes_qlora_base_is_launched_without_double_quantization():
    """Under --recipe litgpt a QLoRA base left auto is counted as nf4_nodq (4.5 bits a weight: LitGPT's bnb.nf4), yet
    TRL, LLaMA-Factory and axolotl were told to double-quantize it (4.127 bits); torchtune, whose NF4 always is,
    refuses it and names the base to plan with."""
    args = ("estimate", "--model", "llama-3.1-8b", "--method", "qlora", "--recipe", "litgpt", "--export")
    assert yaml.safe_load(_export(*args, "trl")[0])["use_bnb_nested_quant"] is False
    assert yaml.safe_load(_export(*args, "llama-factory")[0])["double_quantization"] is False
    assert yaml.safe_load(_export(*args, "axolotl")[0])["bnb_config_kwargs"] == {"bnb_4bit_use_double_quant": False}
    assert yaml.safe_load(_export(*args, "litgpt")[0])["quantize"] == "bnb.nf4"
    code, out, err = run_cli(*args, "torchtune")
    assert code == 2 and out == "" and "'auto (nf4_nodq under --recipe litgpt)'" in err
    assert err.rstrip().endswith("accepted for --export torchtune: nf4")


def test_the_global_batch_counts_the_data_parallel_ranks_not_every_gpu():
    """gpus = tp x pp x cp x data-parallel ranks (engine/scenarios.py): 16 GPUs at tp 2, pp 2, cp 2 are 2 data-parallel
    ranks, and DeepSpeed checks train_batch_size against those (runtime/config.py _batch_assertion, with the
    script's model-parallel groups). LitGPT's devices are all data-parallel (no tp, pp or cp): its global batch stays
    micro-batch x devices (TrainArgs.batch_size asserts global_batch_size // devices > 0), and says so."""
    argv = ("estimate", "--model", "llama-3.1-8b", "--method", "full", "--tp", "2", "--pp", "2", "--cp", "2",
            "--gpus", "16", "--batch", "2")
    out, err = _export(*argv, "--export", "deepspeed")
    cfg = json.loads(out)
    # left to DeepSpeed (micro x accumulation x its data-parallel world): a Trainer naming the file counts every
    # process (transformers 5.24.0 integrations/deepspeed.py trainer_config_process) and refused 4 against 32
    assert "train_batch_size" not in cfg and cfg["train_micro_batch_size_per_gpu"] == 2
    assert "micro-batch 2 x the plan's 2 data-parallel ranks" in err
    assert json.loads(_export(*argv[:5], "--gpus", "16", "--batch", "2", "--export", "deepspeed")[0])[
        "train_batch_size"] == 32  # (no tp, pp or cp: every GPU a data-parallel rank, as the Trainer counts)
    out, _ = _export(*argv, "--export", "litgpt")
    cfg = yaml.safe_load(out)
    assert cfg["devices"] == 16 and cfg["train"]["global_batch_size"] // cfg["devices"] == cfg["train"]["micro_batch_size"]
    assert any("LitGPT runs its 16 devices all data-parallel" in n and "the plan's 2 data-parallel ranks" in n
               and "take 4 a step" in n for n in _comments(out))


@pytest.mark.parametrize("optimizer, switch", [("muon", "use_muon"), ("adam_mini", "use_adam_mini")])
def test_llama_factory_switches_on_its_own_muon_and_adam_mini(optimizer, switch):
    """Adam-mini and Muon have no transformers optim name; LLaMA-Factory builds them from its own switches
    (finetuning_args.py use_adam_mini / use_muon; trainer_utils.py create_custom_optimizer, which does not read
    optim): written there, with no optim key. The other HF-Trainer exports still refuse them, naming this one."""
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--optimizer", optimizer, "--recipe", "llama-factory",
                     "--export", "llama-factory")
    cfg = yaml.safe_load(out)
    assert set(cfg) <= LLAMA_FACTORY_KEYS, set(cfg) - LLAMA_FACTORY_KEYS
    assert cfg[switch] is True and "optim" not in cfg
    assert not any("optimizer" in n for n in _comments(out) if n.startswith("not expressed"))
    code, out, err = run_cli("estimate", "--model", "llama-3.1-8b", "--optimizer", optimizer, "--export", "trl")
    assert code == 2 and out == "" and f"optimizer {optimizer!r}" in err and f"writes it as {switch}: true" in err


def test_llama_factory_muon_planned_under_another_recipe_says_its_step_differs():
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--optimizer", "muon", "--export", "llama-factory")
    assert yaml.safe_load(out)["use_muon"] is True
    assert any("LLaMA-Factory's own Muon" in n and "--recipe llama-factory" in n for n in _comments(out))


@pytest.mark.parametrize("target, recipe", [("deepspeed", "deepspeed"), ("llama-factory", "llama-factory"),
                                            ("axolotl", "axolotl")])
def test_a_pure_bf16_zero_3_plan_launched_on_deepspeed_says_it_holds_more(target, recipe):
    """Under the hf recipe a pure bf16 ZeRO-3 plan is FSDP's, with no fp32 copy (26 GiB a GPU here); DeepSpeed's bf16
    mode, which these exports launch, keeps an fp32 master copy and fp32 states (the planner's --recipe deepspeed:
    37 GiB). The note says so and what to plan or launch instead, and no longer calls the plan mixed_bf16."""
    out, err = _export("estimate", "--model", "llama-3.1-8b", "--method", "full", "--zero", "3", "--gpus", "8",
                       "--export", target)
    notes = err.splitlines() if target == "deepspeed" else _comments(out)
    (note,) = [n for n in notes if "DeepSpeed's bf16 mode" in n]
    assert "plan's bf16 does not count: this run holds more than the plan" in note
    assert f"--recipe {recipe}" in note and "--precision mixed_bf16" in note and "--export accelerate-fsdp" in note
    assert "the plan's mixed_bf16" not in out + err
    # planned as DeepSpeed's run, nothing more to say
    out, err = _export("estimate", "--model", "llama-3.1-8b", "--method", "full", "--zero", "3", "--gpus", "8",
                       "--recipe", recipe, "--export", target)
    assert "holds more than the plan" not in out + err


def test_deepspeed_names_what_its_16_bit_mode_does_to_lora_and_autocast_plans():
    _, err = _export("estimate", "--model", "llama-3.1-8b", "--method", "lora", "--zero", "2", "--gpus", "2",
                     "--export", "deepspeed")
    assert "fp32 master copies of the trained parameters (here the lora adapters" in err and "mixed_bf16" not in err
    _, err = _export("estimate", "--model", "llama-3.1-8b", "--method", "full", "--precision", "amp_bf16", "--zero",
                     "3", "--gpus", "8", "--export", "deepspeed")
    assert "precision amp_bf16 (fp32 weights under bf16 autocast)" in err and "--precision mixed_bf16" in err


@pytest.mark.parametrize("target", ["trl", "axolotl"])
@pytest.mark.parametrize("method", ["full", "freeze"])
def test_a_pure_fp16_plan_of_whole_weights_is_refused_where_the_trainers_grad_scaler_would_stop_it(target, method):
    """fp16: true on fp16 weights: accelerate's GradScaler (mixed_precision fp16 outside DeepSpeed) raises 'Attempting
    to unscale FP16 gradients.' (torch/amp/grad_scaler.py _unscale_grads_); fp16: false trains them unscaled. No
    Trainer setting runs the plan: refused, naming the precisions that export. LoRA's adapters are fp32 (peft), and
    DeepSpeed scales the loss over its own fp32 copy: those still export."""
    code, out, err = run_cli("estimate", "--model", "llama-3.2-1b", "--method", method, "--precision", "fp16",
                             "--gpu", "a10", "--export", target)
    assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1 and "…" not in err
    assert f"precision 'fp16' with method {method}" in err and "Attempting to unscale FP16 gradients." in err
    assert "accepted: fp32, amp_bf16, amp_fp16, bf16, mixed_bf16, mixed_fp16" in err
    lora, _ = _export("estimate", "--model", "llama-3.2-1b", "--method", "lora", "--precision", "fp16", "--export", target)
    assert yaml.safe_load(lora)["fp16"] is True


def test_trl_refuses_a_pure_fp16_zero_3_plan_too():
    """TRL launches ZeRO-3 on FSDP (fp16 off, no DeepSpeed): its fp16 gradients would go unscaled."""
    code, _, err = run_cli("estimate", "--model", "llama-3.2-1b", "--method", "full", "--precision", "fp16", "--gpus",
                           "4", "--zero", "3", "--export", "trl")
    assert code == 2 and "precision 'fp16' with method full at ZeRO 3 cannot be exported to trl" in err


def test_axolotl_launches_a_pure_fp16_zero_3_plan_on_deepspeed_and_says_it_holds_more():
    out, _ = _export("estimate", "--model", "llama-3.2-1b", "--method", "full", "--precision", "fp16", "--gpus", "4",
                     "--zero", "3", "--export", "axolotl")
    cfg = yaml.safe_load(out)
    assert cfg["fp16"] is True and cfg["deepspeed"] == "ds_config.json"
    assert any("DeepSpeed's fp16 mode" in n and "--precision mixed_fp16" in n for n in _comments(out))


@pytest.mark.parametrize("method, plan", [("full", "plan it with --precision amp_fp16"),
                                          ("freeze", "the frozen layers stay fp16")])
def test_llama_factory_says_it_upcasts_a_pure_fp16_plans_trained_weights(method, plan):
    """LLaMA-Factory has no pure fp16 (pure_bf16 only): with fp16 it casts the trainable parameters to fp32
    (model/adapter.py init_adapter, _setup_full_tuning) and scales the loss over them, which the plan's fp16
    weights do not count."""
    out, _ = _export("estimate", "--model", "llama-3.2-1b", "--method", method, "--precision", "fp16", "--gpu", "a10",
                     "--export", "llama-factory")
    assert yaml.safe_load(out)["fp16"] is True
    (note,) = [n for n in _comments(out) if n.startswith("not expressed: precision fp16")]
    assert "upcasts the trained parameters to fp32" in note and "holds more than the plan" in note and plan in note


def _peak_gib(*argv: str) -> float:
    code, out, err = run_cli("estimate", *argv, "--json")
    assert code == 0, err
    return json.loads(out)["peak_bytes"] / 2**30


@pytest.mark.parametrize("target", exports.TRAIN_TARGETS)
def test_expert_parallel_no_target_expresses_is_said_with_what_the_launched_run_holds(target):
    """No training export's config has expert parallel: each says so, with the peak of the run it launches (--ep 1,
    which does not fit the H100 this plan fits at ep 8), not a plain data-parallel file with no word of it."""
    plan = ("--model", "qwen3-30b-a3b", "--method", "lora", "--gpus", "8", "--gpu", "h100-sxm-80gb")
    out, err = _export("estimate", *plan, "--ep", "8", "--export", target)
    notes = err.splitlines() if target == "deepspeed" else _comments(out)
    (note,) = [n for n in notes if "expert parallel 8" in n]
    launched, planned = _peak_gib(*plan, "--ep", "1"), _peak_gib(*plan, "--ep", "8")
    assert launched > planned + 40
    assert f"the run holds about {launched:.1f} GiB per GPU where the plan holds {planned:.1f} GiB" in note
    assert "launched without it (--ep 1)" in note


def test_context_parallel_is_written_where_the_target_has_it():
    """accelerate's parallelism_config (FSDP2 over dp_shard x cp, as the plan shards over the data x context ranks),
    torchtune's context_parallel_dim and axolotl's context_parallel_size (flash attention only) carry cp; the other
    exports say what they launch without it."""
    plan = ("estimate", "--model", "llama-3.1-8b", "--method", "full", "--gpus", "4", "--cp", "2", "--zero", "3",
            "--seq", "32768")
    out, _ = _export(*plan, "--export", "accelerate-fsdp")
    cfg = yaml.safe_load(out)
    assert set(cfg) <= ACCELERATE_TOP and set(cfg["parallelism_config"]) <= ACCELERATE_PARALLELISM
    par = cfg["parallelism_config"]
    assert par["parallelism_config_cp_size"] == 2 and par["parallelism_config_dp_replicate_size"] == 1
    assert par["parallelism_config_dp_shard_size"] * par["parallelism_config_cp_size"] == cfg["num_processes"] == 4
    assert any("maybe_context_parallel" in n for n in _comments(out))
    assert not any("launched without it" in n for n in _comments(out))
    cfg = yaml.safe_load(_export(*plan, "--export", "torchtune")[0])
    assert set(cfg) <= TORCHTUNE_KEYS and cfg["context_parallel_dim"] == 2
    out, _ = _export(*plan, "--attention", "flash", "--export", "axolotl")
    assert yaml.safe_load(out)["context_parallel_size"] == 2 and any("ring-flash-attn" in n for n in _comments(out))
    launched = _peak_gib(*plan[1:], "--cp", "1")
    for target in ("trl", "llama-factory", "litgpt"):
        out, _ = _export(*plan, "--export", target)
        assert "context_parallel" not in yaml.safe_load(out)
        assert any(n.startswith("not expressed: context parallel 2") and f"about {launched:.1f} GiB per GPU" in n
                   for n in _comments(out)), target
    _, err = _export(*plan, "--export", "deepspeed")
    assert "# not expressed: context parallel 2" in err and f"about {launched:.1f} GiB per GPU" in err


@pytest.mark.parametrize("target, flags, why", [
    ("axolotl", (), "needs flash attention (plan it with --attention flash)"),
    ("axolotl", ("--attention", "flash", "--packing", "on", "--batch", "2"), "takes micro-batch 1 with sample packing"),
    ("accelerate-fsdp", ("--attention", "flash"), "takes SDPA only"),
    ("accelerate-fsdp", ("--zero", "0", "--method", "lora"), "runs under FSDP2 only"),
])
def test_context_parallel_a_target_would_refuse_is_said_not_written(target, flags, why):
    out, _ = _export("estimate", "--model", "llama-3.1-8b", "--method", "full", "--gpus", "4", "--cp", "2", "--zero",
                     "3", *flags, "--export", target)
    cfg = yaml.safe_load(out)
    assert "context_parallel_size" not in cfg and "parallelism_config" not in cfg
    assert any(n.startswith("not expressed: context parallel 2") and why in n and "launched without it (--cp 1)" in n
               for n in _comments(out))


@pytest.mark.parametrize("argv, message", [
    # LLaMA-Factory 0.9.6.dev0 hparams/finetuning_args.py line 616; hparams/parser.py line 519
    (("--method", "lora", "--optimizer", "galore_adamw", "--export", "llama-factory"),
     "optimizer 'galore_adamw' with its LoRA cannot be exported to llama-factory"),
    (("--method", "full", "--optimizer", "galore_adamw", "--gpus", "2", "--zero", "2", "--export", "llama-factory"),
     "optimizer 'galore_adamw' with DeepSpeed (ZeRO or offload) cannot be exported to llama-factory"),
    # axolotl 0.18.0 utils/schemas/validation.py line 1447 check_activation_offloading_wo_gc
    (("--method", "lora", "--activation-offload", "on", "--export", "axolotl"),
     "activation offload without checkpointing cannot be exported to axolotl"),
])
def test_an_export_the_target_refuses_to_start_is_refused_naming_why(argv, message):
    code, out, err = run_cli("estimate", "--model", "llama-3.1-8b", "--gpu", "a100-80gb-sxm", *argv)
    assert code == 2 and out == "" and message in err and "accepted for --export" in err


def test_the_exports_those_refusals_leave_alone_still_export():
    for argv in (("--method", "full", "--optimizer", "galore_adamw", "--export", "llama-factory"),
                 ("--method", "lora", "--activation-offload", "on", "--grad-checkpointing", "--export", "axolotl")):
        code, out, err = run_cli("estimate", "--model", "llama-3.1-8b", "--gpu", "a100-80gb-sxm", *argv)
        assert code == 0 and out, err


def test_torchtune_export_says_to_replace_the_optimizer_block_whole():
    """The copied torchtune configs' optimizer block holds torch AdamW's keys (llama3_1/8B_full_single_device.yaml:
    `fused: True`), which bitsandbytes.optim.AdamW8bit does not take: merged key by key, instantiating it stops."""
    code, out, err = run_cli("estimate", "--model", "llama-3.1-8b", "--method", "full", "--optimizer", "adamw_8bit",
                             "--gpu", "a100-80gb-sxm", "--export", "torchtune")
    assert code == 0, err
    assert "_component_: bitsandbytes.optim.AdamW8bit" in out and "replace its optimizer block whole" in out


def test_serve_exports_name_the_users_own_files(tmp_path):
    """serve --model-file's command named the user's GGUF / safetensors folder, its --export the catalog download's
    name with a note to convert or download it (QA: a GGUF of the user's own already on disk)."""
    from tests.clirun import run_cli
    from tests.test_checkpoints import hf_tensors, write_config, write_gguf, write_safetensors
    folder = tmp_path / "my models"
    folder.mkdir()
    gguf = write_gguf(folder / "tiny-Q8_0.gguf")
    code, out, err = run_cli("serve", "--model-file", str(gguf), "--gpu", "rtx-4090", "--engine", "llama.cpp",
                             "--max-model-len", "256", "--export", "llama-server")
    assert code == 0, err
    assert f"llama-server -m '{gguf}' " in out and "convert or download" not in out
    code, out, err = run_cli("serve", "--model-file", str(gguf), "--gpu", "rtx-4090", "--engine", "ollama",
                             "--max-model-len", "256", "--export", "ollama")
    assert code == 0, err
    assert f"\nFROM {gguf}\n" in out and "library tag" not in out
    # another precision than the file's is a re-quantized file: the download's name and its note stay
    code, out, _ = run_cli("serve", "--model-file", str(gguf), "--gpu", "rtx-4090", "--engine", "llama.cpp",
                           "--precision", "q4_k_m", "--max-model-len", "256", "--export", "llama-server")
    assert code == 0 and "-Q4_K_M.gguf" in out and "convert or download it" in out
    st = tmp_path / "st model"
    st.mkdir()
    write_config(st)
    write_safetensors(st / "model.safetensors", hf_tensors())
    code, out, err = run_cli("serve", "--model-file", str(st), "--gpu", "h100-sxm-80gb", "--engine", "vllm",
                             "--max-model-len", "256", "--export", "vllm")
    assert code == 0, err
    assert f"vllm serve '{st}' " in out and "no Hugging Face repository" not in out
