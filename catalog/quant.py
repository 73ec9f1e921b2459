"""The precision a checkpoint's quantization_config stores its weights in, where the engine models that layout.

Read by both config readers: catalog/user.py (a config.json alone: the record's stored_precision, which serve plans
it at without --precision) and catalog/checkpoints.py (a checkpoint's files, beside its stored bytes).
"""

from __future__ import annotations


def quant_precision(quant) -> str | None:
    """The engine's precision of a checkpoint's quantization_config (issue 27), where its layout is
    one the engine models: quant_method fp8 (e4m3 weights, per-tensor or 128 x 128 block scales:
    Qwen3-*-FP8, DeepSeek-V3), mxfp4 (gpt-oss: the routed experts), gptq / awq at 4 bits (int4, group
    128), nvfp4 (ModelOpt's NVFP4 export, compressed-tensors' 4-bit float groups of 16); None for the others (their bytes are still the stored ones beside the estimate).
    Two more FP8 layouts are fp8 rows whose weights are the files' stored bytes (the arithmetic's fp8
    puts every linear layer at 8 bits; these keep some in BF16, which only the tensors' dtypes say):
    - fbgemm_fp8 (transformers' FbgemmFp8Config: e4m3 weights with an fp32 scale per output row, the
      modules_to_not_convert left in BF16). Meta's Llama 3.1 FP8 checkpoints are these; Meta's own
      loader (meta-llama/llama-models, models/llama3/quantization/loader.py, fp8_mixed) quantizes only
      the feed-forward w1 / w3 / w2 of every layer but the first and the last.
    - compressed-tensors whose every config group stores its weights as 8-bit floats (format
      float-quantized: the FP8 checkpoints of llm-compressor, RedHatAI / neuralmagic), `ignore` in BF16."""
    if not isinstance(quant, dict):
        return None
    method = str(quant.get("quant_method", "")).lower()
    if method in ("fp8", "mxfp4"):
        return method
    if method == "fbgemm_fp8":
        return "fp8"
    if method == "compressed-tensors" and float8_groups(quant.get("config_groups")):
        return "fp8"
    if method == "compressed-tensors" and float_groups(quant.get("config_groups"), bits=4, group_size=16):
        return "nvfp4"  # compressed-tensors' NVFP4 preset (format nvfp4-pack-quantized): e2m1 weights, groups of 16
    if method == "modelopt":
        # NVIDIA ModelOpt's export (nvidia/*-FP4, *-FP8): quant_algo at the top level or under `quantization`, as vLLM
        # reads it (vllm/model_executor/layers/quantization/modelopt.py ModelOptNvFp4Config / ModelOptFp8Config
        # override_quantization_method: "FP4" in quant_algo -> modelopt_fp4, "FP8" -> modelopt). Before, such a
        # checkpoint fell back to bf16 without a --precision: a Llama 3.1 8B NVFP4 (6,027,749,120 bytes stored) was
        # estimated at 16,060,522,496
        nested = quant.get("quantization")
        algo = str(quant.get("quant_algo") or (nested.get("quant_algo") if isinstance(nested, dict) else "") or "").upper()
        if "NVFP4" in algo:
            return "nvfp4"
        if algo.startswith("FP8"):
            return "fp8"
    if method in ("gptq", "awq") and quant.get("bits", 4) == 4 and quant.get("group_size", 128) == 128:
        return "int4"
    return None


def float8_groups(groups) -> bool:
    """compressed-tensors' config_groups: every group's weights are 8-bit floats (and there is one)."""
    return float_groups(groups, bits=8)


def float_groups(groups, bits: int, group_size: int | None = None) -> bool:
    """compressed-tensors' config_groups: every group's weights are `bits`-bit floats (in groups of `group_size`
    where given), and there is one (compressed-tensors QuantizationArgs: num_bits, type, group_size)."""
    if not isinstance(groups, dict) or not groups:
        return False
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict) or weights.get("num_bits") != bits or str(weights.get("type", "")).lower() != "float":
            return False
        if group_size is not None and weights.get("group_size") != group_size:
            return False
    return True
