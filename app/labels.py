"""Words and names the dashboard shows people: labels of every choice, component and phase,
and the display names of catalog entries. No Streamlit, no state."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from engine.constants import INFER_PRECISIONS
from engine.scenarios import KV_PRECISIONS
from planner.report import COMPONENT_LABELS, PHASE_LABELS  # noqa: F401 (re-exported for the pages)

GIB = 2**30
GB = 10**9
APP_NAME = "LLM hardware planner"

# ---- labels shown to people ----------------------------------------------------------------
# the Catalog page's tabs: the URL's catalog_tab key -> the tab's label
CATALOG_TABS = {"gpus": "GPUs", "models": "Models", "references": "References", "add_gpu": "Add a GPU",
                "add_model": "Add a model", "file": "Your catalog file", "run_log": "Your run's log"}
TASK_LABELS = {"train": "Train / fine-tune", "infer": "Serve (inference)"}
METHOD_LABELS = {"full": "Full fine-tuning", "lora": "LoRA", "qlora": "QLoRA (4-bit base)",
                 "freeze": "Freeze (train the last layers)"}
TRAIN_PRECISION_LABELS = {
    "bf16": "bf16 (pure 16-bit)", "fp16": "fp16 (pure 16-bit)",
    "amp_bf16": "AMP bf16 (fp32 weights)", "amp_fp16": "AMP fp16 (fp32 weights)",
    "mixed_bf16": "Mixed bf16 (fp32 master)", "mixed_fp16": "Mixed fp16 (fp32 master)",
    "fp32": "fp32",
}
INFER_PRECISION_LABELS = {p: p.upper() if not p.startswith("q") else f"GGUF {p.upper()}" for p in INFER_PRECISIONS}
INFER_PRECISION_LABELS.update({"int8": "INT8 (LLM.int8)", "int4": "INT4 (GPTQ/AWQ, g128)", "nf4": "NF4 (bitsandbytes)",
                               "fp8": "FP8 (e4m3 checkpoint)", "nvfp4": "NVFP4 (ModelOpt)",
                               "mxfp4": "MXFP4 (gpt-oss: experts only on MoE)", "mxfp4_moe": "GGUF MXFP4_MOE"})
OPTIMIZER_LABELS = {"adamw": "AdamW (PyTorch default)", "adamw_fused": "AdamW fused", "adamw_8bit": "AdamW 8-bit",
                    "paged_adamw_8bit": "Paged AdamW 8-bit", "sgd": "SGD with momentum", "adafactor": "Adafactor",
                    "paged_adamw_32bit": "Paged AdamW 32-bit (bitsandbytes)", "adamw_8bit_torchao": "AdamW 8-bit (torchao)",
                    "lion_32bit": "Lion 32-bit (bitsandbytes)", "lion_8bit": "Lion 8-bit (bitsandbytes)",
                    "galore_adamw": "GaLore AdamW", "galore_adamw_8bit": "GaLore AdamW 8-bit",
                    "galore_adamw_layerwise": "GaLore AdamW, layer-wise step",
                    "galore_adamw_8bit_layerwise": "GaLore AdamW 8-bit, layer-wise step",
                    "adam_mini": "Adam-mini", "muon": "Muon (+ AdamW on embeddings, head, norms)"}
# the software stack (engine/stacks.py, docs/stacks.md)
RECIPE_LABELS = {"hf": "Hugging Face Trainer + peft", "torchtune": "torchtune", "unsloth": "Unsloth",
                 "llama-factory": "LLaMA-Factory", "axolotl": "axolotl", "deepspeed": "DeepSpeed (HF Trainer)",
                 "torchtitan": "torchtitan (FSDP2 + TP/SP + CP)", "litgpt": "LitGPT (Lightning Fabric)",
                 "automodel": "NeMo Automodel (FSDP2, Liger, per-module checkpointing)"}
SWITCH_LABELS = {"adapter_dtype": "LoRA adapter dtype", "loss": "Loss implementation",
                 "logits_upcast": "Logits upcast (transformers version)", "checkpointing": "Activation checkpointing",
                 "optimizer_in_backward": "Optimizer step in backward", "activation_offload": "Activation offload to CPU",
                 "attention": "Attention kernel", "compile": "torch.compile", "packing": "Sequence packing",
                 "kbit_prep": "QLoRA k-bit prep (peft)", "padding": "Batch padding (attention mask)",
                 "loop": "Training loop (trainer keeps the loss; manual keeps the outputs)",
                 "use_cache": "KV cache in the training forward (use_cache)",
                 "sequence_parallel": "Sequence parallel (with tensor parallel)", "float8": "Float8 training (torchao)",
                 "decode_cache": "generate() cache (tuple: transformers < 4.36)",
                 "bnb_4bit_input": "bitsandbytes 4-bit input (kept: < 0.43.2)",
                 "int4_kernel": "int4 inference library (exllama temp_dq, AutoAWQ fused modules)",
                 "bnb_double_quant": "bitsandbytes 4-bit double quantization (off: 4.5 bits)",
                 "quantize_experts": "MoE experts quantized at load (axolotl quantize_moe_experts)",
                 "rope_cache": "Rotary cos/sin caches per layer (transformers 4.32-4.40)",
                 "vision_tower": "Vision tower of a VL model (off: the language model alone)",
                 "liger": "Liger kernels (RMSNorm, SwiGLU, fused linear cross-entropy)",
                 "dpo_reference": "DPO reference model (copy / adapters off / precomputed log-probs)"}
OBJECTIVE_LABELS = {"sft": "SFT (next-token loss)", "dpo": "DPO (preference pairs, a reference model)"}
ZERO_LABELS = {0: "0: none (plain data parallel)", 1: "1: shard optimizer states", 2: "2: + gradients",
               3: "3: + parameters (FSDP full shard)"}
OFFLOAD_LABELS = {"none": "none", "optimizer": "optimizer states to CPU", "all": "parameters + optimizer to CPU"}
KV_LABELS = {"auto": "auto (as the activations)", **{k: k.upper() for k in KV_PRECISIONS if k != "auto"}}
KV_POLICY_LABELS = {"auto": "auto (transformers: full; a GGUF on llama.cpp: windowed)",
                    "windowed": "windowed (sliding layers keep their window)",
                    "full": "full (every layer at full length)",
                    "latent": "latent (MLA latent; sliding layers full, as vLLM)"}
BASE_LABELS = {"auto": "auto (NF4; litgpt: NF4 without double quant)", "nf4": "NF4", "nf4_nodq": "NF4, no double quant",
               "int8": "INT8", "int4": "INT4"}
COMPONENT_NAMES = {k.removesuffix("_bytes"): v for k, v in COMPONENT_LABELS.items()}


# Shorter GPU names for chart axes and tables: vendor brand words and parentheticals dropped
# (the id is added back wherever two names would collide).
SHORT_NAME_RULES = ((r"^NVIDIA (GeForce |Tesla )?", ""), (r"^AMD Instinct ", "AMD "),
                    (r" Grace Hopper Superchip \((\d+) GB [^)]*\)", r" \1GB"),
                    (r" \(OAM [^)]*\)", ""), (r"\s*\([^)]*\)$", ""))


def display_names(frame: pd.DataFrame, short: bool = False) -> dict:
    """id -> name shown in charts and tables (the id is added where two entries share a name).
    A shipped entry keeps its name when a user's entry resembles it: only the added entry gets
    its id (adding "RTX 4090" must not rename the catalog's RTX 4090)."""
    names = frame["name"].astype(str)
    if short:
        for pattern, repl in SHORT_NAME_RULES:
            names = names.str.replace(pattern, repl, regex=True)
    dup = names.duplicated(keep=False).to_numpy()
    if "origin" in frame.columns:
        shipped = (frame["origin"].astype(str) == "shipped").to_numpy()
        among_shipped = names.where(shipped).duplicated(keep=False).to_numpy() & shipped
        dup = np.where(shipped, among_shipped, dup)
    shown = np.where(dup, names + " (" + frame["id"].astype(str) + ")", names)
    return dict(zip(frame["id"].astype(str), shown))


# ---- user text inside Markdown ------------------------------------------------------------------
# Streamlit renders st.markdown / caption / subheader / title / alerts / toasts, metric labels,
# values and deltas, and every help tooltip as GitHub-flavoured Markdown. Catalog names are user
# text (the entries a user adds, and the saved ones every session loads): escaped, so a name such
# as "![p](http://evil.example/pixel.png)" is shown as typed instead of loading a remote image.
# CommonMark lets any ASCII punctuation be backslash-escaped; these are the ones that format:
# emphasis and code (* _ `), links and images (! [ ] ( )), raw HTML and entities (< > &), headings,
# lists and breaks at the start of a line (# + - . \), tables (|), strikethrough (~), LaTeX ($),
# Streamlit's directives (:red[...], :material/icon:) and the bare autolinks of GFM (www.x.y,
# http://x: the escaped '.' and ':' stop them).
MD_SPECIAL = frozenset("\\`*_{}[]()#+-.!|<>~$:&")
_MD_PATTERN = re.compile("[" + re.escape("".join(sorted(MD_SPECIAL))) + "]")


def md_escape(text) -> str:
    """User text (a catalog name or id, typed text, an exception message quoting them) for a
    Markdown string: shown as typed, never formatting, a link, an image, HTML or LaTeX. Line
    breaks become spaces (a break could start a heading or a list)."""
    one_line = " ".join(str(text).splitlines())
    return _MD_PATTERN.sub(lambda m: "\\" + m.group(0), one_line)



def moe_caption(params: int, active: int, kv_policy: str = "") -> str:
    """A mixture-of-experts model's total and active parameters, in words (Breakdown page)."""
    return (f"Mixture of experts: {params / 1e9:,.1f}B parameters resident (every expert's weights are in memory), "
            f"{active / 1e9:,.1f}B active per token (the routed experts a token uses, the shared ones, attention "
            "and embeddings): decode reads the active weights."
            + (f" KV cache policy: {kv_policy}." if kv_policy else ""))
