"""Published serving measurements (catalog/serving_measurements.yaml): the evidence the
serving speed model (engine/serving.py) is fitted on (`role: fit`) and checked against
(`role: holdout`), and vLLM start-up logs for the KV budget. Validated like the shipped
catalog (catalog/schema.py's Field checks; one clear CatalogError naming file, entry and field).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from catalog.schema import IDENT, NOTE, Field, boolean, choice, number, optional, read_yaml, text, top_level, \
    validate_entries, year_month

PATH = Path(__file__).resolve().parent / "serving_measurements.yaml"

MEASUREMENT_FIELDS: dict[str, Field] = {
    "id": Field(IDENT),
    "metric": Field(choice("decode_tokens_per_s", "prefill_tokens_per_s", "kv_cache_available_gib")),
    "role": Field(choice("fit", "holdout")),
    # a fit row of an engine fitted term by term (transformers at batch 1; vLLM's FP8): the constant it sets
    # (benchmarks/serving_accuracy.py fit_torch_engines): efficiency (a GPU-bound row), layer_cost (a host-bound row) or
    # dequant (its precision's extra per-layer cost), step_cost (a fixed cost a decode step pays: vLLM V0's) or allreduce
    # (a TP 1 / TP 2 pair of one rig: the all-reduce latency over its link)
    "fit_term": Field(optional(choice("efficiency", "layer_cost", "dequant", "step_cost", "allreduce")), required=False),
    # tensor-parallel rows: how the GPUs reach each other (pcie: no GPU link, NCCL over PCIe or the host; nvlink: NVLink,
    # NVSwitch or another GPU fabric), which sets the all-reduce latency (engine/serving.py tp_allreduce_s)
    "gpu_link": Field(optional(choice("pcie", "nvlink")), required=False),
    "engine": Field(choice("llama.cpp", "vllm", "sglang", "ollama", "transformers", "exllamav2", "exllamav3", "mlc-llm", "mlx-lm")),
    "backend": Field(choice("cuda", "rocm", "metal", "vulkan")),
    "gpu_name": Field(text(120)),
    "gpu_family": Field(choice("nvidia", "amd", "apple")),
    "bandwidth_gbps": Field(number(0, 1e6)),
    "tflops": Field(optional(number(0, 1e6)), required=False),  # dense 16-bit tensor TFLOPS (prefill)
    "model_name": Field(text(120)),
    "model": Field(optional(text(64)), required=False),  # catalog model id where the catalog has it
    "weights_gib": Field(optional(number(0, 1e6)), required=False),  # the file size llama-bench prints
    "params_b": Field(number(0, 1e5)),
    "layers": Field(number(0, 1000, integer=True)),
    "hidden": Field(optional(number(0, 1e6, integer=True)), required=False),
    "prompt_tokens": Field(optional(number(0, 1e7, integer=True)), required=False),
    # a decode row's average context (the prompt and half the tokens generated): the K/V a step reads beside the weights
    # (mlx-lm's BENCHMARKS.md runs decode after a 2,048-token prompt); rows without it read the weights alone
    "context_tokens": Field(optional(number(0, 1e7, integer=True)), required=False),
    # the weights' format (engine/constants.py names: fp16, nf4 = bitsandbytes 4-bit, int8 =
    # LLM.int8, int4 = AWQ/GPTQ, a GGUF type): sets the per-layer dequantization cost it pays
    "precision": Field(optional(text(16)), required=False),  # exl2-B / exl3-B: ExLlamaV2's EXL2 / ExLlamaV3's EXL3 at B bits per weight
    # vLLM start-up logs: the logged components (GiB) and the settings of the run
    "total_gpu_memory_gib": Field(optional(number(0, 1e5)), required=False),
    "gpu_memory_utilization": Field(optional(number(0, 1)), required=False),
    "max_num_seqs": Field(optional(number(0, 1e6, integer=True)), required=False),
    "max_num_batched_tokens": Field(optional(number(0, 1e7, integer=True)), required=False),
    "max_model_len": Field(optional(number(0, 1e7, integer=True)), required=False),
    "engine_version": Field(optional(text(32)), required=False),  # vLLM X.Y (V0 before 0.8), SGLang X.Y.Z
    "tensor_parallel_size": Field(optional(number(1, 1024, integer=True)), required=False),  # vLLM -tp (1 when not given)
    "logged_weights_gib": Field(optional(number(0, 1e5)), required=False),
    "logged_activation_gib": Field(optional(number(0, 1e5)), required=False),
    "logged_non_torch_gib": Field(optional(number(0, 1e5)), required=False),
    "value": Field(number(0, 1e9)),
    "build": Field(text(120)),
    "date": Field(year_month),
    "source": Field(NOTE),
    "url": Field(text(300)),
    "setup_note": Field(NOTE),
    "era_note": Field(optional(NOTE), required=False),
    "quoted": Field(boolean, required=False, default=False),  # a figure quoted by another text, not read first-hand
}


def load_measurements(path: Path = PATH) -> pd.DataFrame:
    """The validated measurements, one row each."""
    name = path.name
    doc = top_level(read_yaml(path), name, {"measurements": True})
    rows = validate_entries(doc["measurements"], MEASUREMENT_FIELDS, name, "measurements")
    return pd.DataFrame(rows, columns=list(MEASUREMENT_FIELDS))
