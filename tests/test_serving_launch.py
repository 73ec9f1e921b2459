"""The serving commands `serve` prints (--json `command`) and exports (`serve --export`), against the engines' own
argument parsers at the releases named: each flag and value one the engine takes, so the command starts the plan.

Read in the engines' published sources (PyPI wheels / sdists, unpacked outside the repo); the tests assert on the
printed text only (no engine imported)."""

from __future__ import annotations

import json
import shlex

import pytest

from tests.clirun import run_cli


def _command(*args: str) -> list[str]:
    code, out, err = run_cli("serve", *args, "--json")
    assert code == 0, err
    return shlex.split(json.loads(out)["command"])


def _export(*args: str, target: str) -> list[str]:
    code, out, err = run_cli("serve", *args, "--export", target)
    assert code == 0, err
    (line,) = [x for x in out.splitlines() if x and not x.startswith("#")]
    return shlex.split(line)


VLLM_INT4 = ("--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--engine", "vllm", "--max-model-len", "8192",
             "--precision", "int4")


def test_vllm_from_028_is_not_given_bitsandbytes():
    """vllm 0.28.0 / 0.34.0 wheels: vllm/model_executor/layers/quantization/__init__.py QuantizationMethods has no
    "bitsandbytes" (0.27.0's lists it), and vllm/config/model.py ModelConfig._verify_quantization raises "Unknown
    quantization method: bitsandbytes. Must be one of [...]": the current release's command (no --engine-version)
    must not carry it; a release up to 0.27 still takes it."""
    for args in ((), ("--engine-version", "0.28")):
        for words in (_command(*VLLM_INT4, *args), _export(*VLLM_INT4, *args, target="vllm")):
            assert "bitsandbytes" not in words and "--quantization" not in words, words
    for words in (_command(*VLLM_INT4, "--engine-version", "0.27"),
                  _export(*VLLM_INT4, "--engine-version", "0.27", target="vllm")):
        assert words[words.index("--quantization") + 1] == "bitsandbytes"


def test_vllm_nf4_is_refused_where_vllm_has_no_bitsandbytes():
    """NF4 is bitsandbytes' format: from 0.28 vLLM has no method that loads or makes it (see above)."""
    nf4 = [a if a != "int4" else "nf4" for a in VLLM_INT4]
    code, out, err = run_cli("serve", *nf4, "--json")
    assert code == 2 and "vLLM 0.28 removed bitsandbytes" in err
    code, out, err = run_cli("serve", *nf4, "--engine-version", "0.27", "--json")
    assert code == 0 and "--quantization bitsandbytes" in json.loads(out)["command"]


LLAMA_DRAFT = ("--model", "llama-3.1-70b", "--gpu", "rtx-4090", "--engine", "llama.cpp", "--precision", "q4_k_m",
               "--max-model-len", "8192", "--draft-model", "llama-3.2-1b")


def test_llamacpp_draft_command_has_no_cd():
    """llama.cpp @0c1e57098 (vendored in llama-cpp-python 0.3.36) common/arg.cpp: the draft options are -md
    (--spec-draft-model), -ngld (--spec-draft-ngl) and the other --spec-draft-*; -cd / --ctx-size-draft is gone and
    llama-server stops at an unknown argument. The draft's context is the target's (common/speculative.cpp
    cparams.n_ctx = llama_n_ctx(ctx_tgt)), the length planned by default."""
    for words in (_command(*LLAMA_DRAFT), _export(*LLAMA_DRAFT, target="llama-server")):
        assert "-cd" not in words and "--ctx-size-draft" not in words, words
        assert words[words.index("-md") + 1] == "llama-3.2-1b-Q4_K_M.gguf" and words[words.index("-ngld") + 1] == "99"
    code, out, err = run_cli("serve", *LLAMA_DRAFT, "--draft-context", "4096", "--json")
    assert code == 2 and "-cd / --ctx-size-draft removed" in err
    assert run_cli("serve", *LLAMA_DRAFT, "--draft-context", "8192", "--json")[0] == 0


@pytest.mark.parametrize("engine, argv, present, absent", [
    # vLLM 0.6 - 0.8.1 load in-flight bitsandbytes only with --load-format bitsandbytes (taken through 0.27)
    ("vllm", ("--precision", "int4", "--engine-version", "0.8"), "--quantization bitsandbytes --load-format bitsandbytes",
     None),
    # SGLang before 0.4.2 has only fp8_e5m2 among --kv-cache-dtype's 8-bit choices (the same bytes)
    ("sglang", ("--kv-precision", "fp8", "--engine-version", "0.4.1"), "--kv-cache-dtype fp8_e5m2", "fp8_e4m3"),
    ("sglang", ("--kv-precision", "fp8", "--engine-version", "0.4.2"), "--kv-cache-dtype fp8_e4m3", "fp8_e5m2"),
    ("sglang", ("--kv-precision", "fp8"), "--kv-cache-dtype fp8_e4m3", "fp8_e5m2"),
])
def test_older_engine_versions_get_the_flags_they_take(engine, argv, present, absent):
    base = ("serve", "--engine", engine, "--model", "llama-3.1-8b", "--gpu", "a100-80gb-sxm", "--max-model-len", "4096",
            *argv)
    code, out, err = run_cli(*base, "--json")
    assert code == 0, err
    command = json.loads(out)["command"]
    code, text, err = run_cli(*base, "--export", engine)
    assert code == 0, err
    for line in (command, text.strip().splitlines()[-1]):
        assert present in line and (absent is None or absent not in line)


def test_sglang_before_0_5_2_takes_no_separate_draft_model():
    argv = ("serve", "--engine", "sglang", "--model", "llama-3.1-70b", "--draft-model", "llama-3.2-1b", "--gpu",
            "h100-sxm-80gb", "--gpus", "4", "--max-model-len", "4096")
    code, out, err = run_cli(*argv, "--engine-version", "0.5.1")
    assert code == 2 and "no STANDALONE" in err and "accepted: --engine-version 0.5.2 or later" in err
    code, out, err = run_cli(*argv, "--engine-version", "0.5.2")
    assert code == 0, err


def test_vllm_before_0_10_has_no_kv_cache_memory_bytes():
    argv = ("serve", "--engine", "vllm", "--model", "llama-3.1-8b", "--gpu", "a100-80gb-sxm", "--max-model-len", "4096",
            "--kv-cache-memory-bytes", "10000000000")
    code, out, err = run_cli(*argv, "--engine-version", "0.8")
    assert code == 2 and "from 0.10.2" in err and "accepted: --engine-version 0.10 or later" in err
    for ok in (("--engine-version", "0.11"), ()):
        code, out, err = run_cli(*argv, *ok)
        assert code == 0 and "--kv-cache-memory-bytes 10000000000" in out, err
