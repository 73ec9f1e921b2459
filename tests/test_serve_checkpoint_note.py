"""serve's text report says when the command's repository is not the checkpoint the plan was sized for: a vLLM or
SGLang plan at a precision those engines read from a checkpoint's quantization_config (int4, int8, nf4) names the
model's own 16-bit repository, which would load twice to four times the planned weights
(planner/serving.py quantized_checkpoint_needed)."""

import json

import pytest

from tests.clirun import run_cli

LLAMA_31_8B_PARAMS = 8_030_261_248  # catalog/models.yaml


def serve(*args):
    code, out, err = run_cli("serve", "--gpu", "rtx-4090", "--max-model-len", "8192", *args)
    assert code == 0, err
    return out


@pytest.mark.parametrize("engine, precision", [("vllm", "int4"), ("vllm", "int8"), ("sglang", "int4")])
def test_a_quantized_plan_says_the_checkpoint_must_be_quantized(engine, precision):
    out = serve("--model", "llama-3.1-8b", "--engine", engine, "--precision", precision)
    planned = json.loads(serve("--model", "llama-3.1-8b", "--engine", engine, "--precision", precision, "--json"))
    line = next(x for x in out.splitlines() if x.strip().startswith(f"weights {precision}:"))
    assert "the command names the model's own repository, stored in 16 bits" in line
    assert f"loads about {LLAMA_31_8B_PARAMS * 2 / 2**30:.1f} GiB of weights a GPU" in line
    assert f"not the {planned['weights_gpu_bytes'] / 2**30:.1f} planned" in line
    assert out.splitlines().index(line) == out.splitlines().index(next(x for x in out.splitlines() if "run it:" in x)) + 1


@pytest.mark.parametrize("model, engine, precision, extra", [
    ("llama-3.1-8b", "vllm", "bf16", ()),             # a dtype
    ("llama-3.1-8b", "vllm", "fp8", ()),              # --quantization fp8: quantized at load
    ("llama-3.1-8b", "vllm", "int4", ("--engine-version", "0.10")),  # in-flight bitsandbytes
    ("gpt-oss-20b", "vllm", "mxfp4", ()),             # the model's own format (stored_precision)
    ("llama-3.1-8b", "transformers", "int4", ()),     # a BitsAndBytesConfig load
])
def test_no_such_line_where_the_command_loads_what_was_planned(model, engine, precision, extra):
    out = serve("--model", model, "--engine", engine, "--precision", precision, *extra)
    assert "the command names the model's own repository" not in out
