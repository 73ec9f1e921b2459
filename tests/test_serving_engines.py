"""Serving engines by version and with a draft model (issue 27 item 5, issue 25): vLLM's V0
profile run over a whole max_model_len prompt (no chunked prefill) against V1's chunked budget,
and a draft model's weights and KV cache beside the target's under vLLM, SGLang and llama.cpp.

Expected values are computed here from the published configs (catalog/models.yaml) and the
sources engine/serving.py cites, not read back from its columns."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from catalog import default_catalog
from engine import serving as S
from planner.serving import SERVE_JSON_KEYS
from tests.clirun import run_cli

GIB = 2**30
# Llama 3 8B: one layer's activation per token at 2 bytes (gate+up+product 3 x 14,336, q/k/v
# (32 + 2 x 8) x 128, four 4,096 buffers) and the sampler's two fp32 copies of 256 x 128,256
LLAMA3_8B_ACT_PER_TOKEN = 2 * (3 * 14336 + 48 * 128 + 4 * 4096)
SAMPLER_256 = 256 * 128256 * 4 * 2
LLAMA3_8B_KV = 2 * 32 * 8 * 128 * 2  # bytes per token, bf16
LLAMA32_1B_KV = 2 * 16 * 8 * 64 * 2  # Llama 3.2 1B: 16 layers, 8 KV heads of 64


@pytest.fixture(scope="module")
def cat():
    c = default_catalog()
    return c.models(), c.gpus()


def rows(cat, *requests):
    models, gpus = cat
    return S.serve(pd.DataFrame(list(requests)), models, gpus)


def vllm(model="llama-3-8b", gpu="rtx-4090", **kw):
    return dict(model=model, gpu=gpu, engine="vllm", precision="bf16", **kw)


# --- vLLM by version ----------------------------------------------------------------------------

def test_v0_profiles_a_whole_max_model_len_prompt_and_leaves_a_24gb_card_much_less_kv(cat):
    """V0 without chunked prefill: max_num_batched_tokens = max(max_model_len, 2048) (SchedulerConfig),
    so at 32,768 tokens the profile forwards 32,768 tokens; V1 chunks at 2,048 on a 24 GB card."""
    v1, v0, default = rows(cat, vllm(max_model_len=32768, engine_version="0.10"),
                           vllm(max_model_len=32768, engine_version="0.6.6"), vllm(max_model_len=32768)).itertuples()
    assert (v0.engine_generation, v0.profile_tokens, v0.chunked_prefill) == ("V0", 32768, False)
    assert (v1.engine_generation, v1.profile_tokens, v1.chunked_prefill) == ("V1", 2048, True)
    assert v0.activation_peak_bytes == 32768 * LLAMA3_8B_ACT_PER_TOKEN + SAMPLER_256
    # the budget is the same: the difference in KV is the activation difference, 4 GiB of 24
    assert v1.kv_cache_bytes_available - v0.kv_cache_bytes_available == pytest.approx(
        (32768 - 2048) * LLAMA3_8B_ACT_PER_TOKEN, rel=1e-12)
    assert v0.max_concurrency < 1 <= v1.max_concurrency  # vLLM 0.6 cannot hold one 32K request here
    # no --engine-version keeps today's numbers (the current V1 defaults)
    assert default.engine_version == "current" and default.kv_cache_bytes_available == v1.kv_cache_bytes_available


def test_v0_chunks_prefill_itself_above_32k_but_not_with_a_draft_model(cat):
    """arg_utils.py: chunked prefill on by default above 32K (logged with max_num_batched_tokens=512),
    skipped when a draft model is set."""
    plain, drafted = rows(cat, vllm(model="llama-3.1-8b", gpu="h100-sxm-80gb", max_model_len=65536, engine_version="0.7"),
                          vllm(model="llama-3.1-8b", gpu="h100-sxm-80gb", max_model_len=65536, engine_version="0.7",
                               draft_model="llama-3.2-1b")).itertuples()
    assert (plain.profile_tokens, plain.chunked_prefill, plain.max_num_seqs) == (512, True, 256)
    assert (drafted.profile_tokens, drafted.chunked_prefill) == (65536, False)


def test_v1_0_8_took_large_defaults_by_device_name_later_by_memory(cat):
    """0.8.x: 8,192 tokens / 1,024 sequences on H100/H200 by name (PR #12369); from 0.9 every card
    with >= 70 GiB but the A100 (PRs #17073, #17885): a 96 GB RTX PRO 6000 changes."""
    old_pro, new_pro, old_h100 = rows(cat, vllm(gpu="rtx-pro-6000-blackwell", max_model_len=8192, engine_version="0.8.4"),
                                      vllm(gpu="rtx-pro-6000-blackwell", max_model_len=8192),
                                      vllm(gpu="h100-sxm-80gb", max_model_len=8192, engine_version="0.8")).itertuples()
    assert (old_pro.profile_tokens, old_pro.max_num_seqs) == (2048, 256)
    assert (new_pro.profile_tokens, new_pro.max_num_seqs) == (8192, 1024)
    assert (old_h100.profile_tokens, old_h100.max_num_seqs) == (8192, 1024)


def test_the_v0_startup_log_of_pr_10511_is_reproduced_with_its_version_alone(cat):
    """The H100 log (V0 worker, 8,192 tokens): engine_version 0.6 gives the logged 8,192 profile
    tokens and 256 sequences without stating max_num_batched_tokens."""
    row = rows(cat, vllm(gpu="h100-sxm-80gb", max_model_len=8192, engine_version="0.6")).iloc[0]
    assert (row["profile_tokens"], row["max_num_seqs"]) == (8192, 256)
    act = 8192 * LLAMA3_8B_ACT_PER_TOKEN + SAMPLER_256
    assert row["activation_peak_bytes"] == act
    assert act / GIB == pytest.approx(1.26, rel=0.05)  # "PyTorch activation peak memory 1.26GiB"


@pytest.mark.parametrize("request_,message", [
    (dict(engine_version="0.5"), "engine_version '0.5' is not accepted; accepted: a vLLM version X.Y, 0.6 or later"),
    (dict(engine_version="new"), "engine_version 'new' is not accepted"),
    (dict(engine="sglang", engine_version="0.6"), "accepted: --engine vllm only"),
])
def test_a_bad_version_is_refused(cat, request_, message):
    with pytest.raises(ValueError, match=message):
        rows(cat, {**vllm(max_model_len=4096), **request_})


# --- draft models -------------------------------------------------------------------------------

def test_vllm_draft_weights_sit_beside_the_target_and_both_kv_caches_share_the_blocks(cat):
    """spec_decode_worker.split_num_cache_blocks_evenly: the same number of blocks for both
    models, so a token costs the target's KV plus the draft's."""
    alone, drafted = rows(cat, vllm(model="llama-3.1-8b", gpu="h100-sxm-80gb", max_model_len=8192),
                          vllm(model="llama-3.1-8b", gpu="h100-sxm-80gb", max_model_len=8192,
                               draft_model="llama-3.2-1b")).itertuples()
    draft_weights = 1_235_814_400 * 2  # Llama 3.2 1B in bf16 (tied embeddings)
    assert drafted.draft_weights_bytes == pytest.approx(draft_weights, rel=0.01)
    assert drafted.draft_kv_bytes_per_token == LLAMA32_1B_KV
    assert alone.kv_cache_bytes_available - drafted.kv_cache_bytes_available == pytest.approx(drafted.draft_weights_bytes)
    blocks = np.floor(drafted.kv_cache_bytes_available / (16 * (LLAMA3_8B_KV + LLAMA32_1B_KV)))
    assert drafted.num_gpu_blocks == blocks and drafted.max_concurrency == blocks * 16 / 8192
    assert "--speculative-config '{\"model\": \"meta-llama/Llama-3.2-1B\", \"num_speculative_tokens\": 5}'" in drafted.command
    assert alone.draft_weights_bytes == 0 and pd.isna(alone.draft_model)


def test_vllm_draft_at_tp_1_stays_whole_on_the_first_gpu(cat):
    tp_same, tp_one = rows(cat, vllm(model="llama-3.1-70b", gpu="h100-sxm-80gb", gpus=4, max_model_len=8192,
                                     draft_model="llama-3.2-1b"),
                           vllm(model="llama-3.1-70b", gpu="h100-sxm-80gb", gpus=4, max_model_len=8192,
                                draft_model="llama-3.2-1b", draft_tensor_parallel_size=1)).itertuples()
    assert tp_one.draft_weights_bytes == pytest.approx(4 * tp_same.draft_weights_bytes)
    assert tp_one.draft_kv_bytes_per_token == LLAMA32_1B_KV and tp_same.draft_kv_bytes_per_token == LLAMA32_1B_KV / 4
    assert '"draft_tensor_parallel_size": 1' in tp_one.command


def test_llamacpp_draft_takes_gpu_room_first_with_its_own_f16_context_per_slot(cat):
    """server.cpp: the draft's n_ctx = -cd or the target's per-slot context, K/V in f16; its weights
    and context are on the GPU before the target's layers are fitted."""
    alone, drafted = rows(cat, dict(model="llama-3.1-70b", gpu="rtx-4090", engine="llama.cpp", precision="q4_k_m",
                                    max_model_len=8192),
                          dict(model="llama-3.1-70b", gpu="rtx-4090", engine="llama.cpp", precision="q4_k_m",
                               max_model_len=8192, draft_model="llama-3.2-1b")).itertuples()
    assert drafted.draft_kv_bytes_per_token == LLAMA32_1B_KV  # f16, like bf16: 2 bytes
    assert drafted.draft_kv_cache_bytes == LLAMA32_1B_KV * 8192
    assert drafted.gpu_layers < alone.gpu_layers
    assert drafted.gpu_memory_used_bytes <= drafted.usable_bytes - S.FIT_MARGIN_BYTES
    assert drafted.command.endswith("-md llama-3.2-1b-Q4_K_M.gguf -ngld 99 -cd 8192")


def test_sglang_draft_is_the_standalone_algorithm(cat):
    row = rows(cat, dict(model="qwen2.5-32b", gpu="h100-sxm-80gb", engine="sglang", precision="bf16", max_model_len=8192,
                         draft_model="qwen2.5-7b")).iloc[0]
    assert row["draft_weights_bytes"] > 14 * GIB
    assert "--speculative-algorithm STANDALONE --speculative-draft-model-path Qwen/Qwen2.5-7B" in row["command"]


@pytest.mark.parametrize("request_,message", [
    (dict(draft_model="llama-2-7b"), "draft model 'llama-2-7b' does not share the tokenizer of 'llama-3-8b'"),
    (dict(draft_model="nope"), "draft model 'nope' is not in the catalog"),
    (dict(engine="ollama", precision="q4_k_m", draft_model="llama-3.2-1b"), "accepted: vllm, sglang, llama.cpp"),
    (dict(model="qwen2.5-7b", draft_model="qwen2-1.5b"), "vocabulary of 151,936 tokens, the target 'qwen2.5-7b' 152,064"),
    (dict(draft_model="llama-3.2-1b", draft_tensor_parallel_size=2), "accepted: 1 or the target's --gpus"),
])
def test_a_bad_draft_is_refused(cat, request_, message):
    with pytest.raises(ValueError, match=message):
        rows(cat, {**vllm(max_model_len=4096), **request_})


def test_llamacpp_accepts_a_vocabulary_within_128_tokens(cat):
    """common/speculative.cpp SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128: Qwen2 1.5B (151,936) drafts for
    Qwen2.5 7B (152,064) under llama.cpp, not under vLLM."""
    row = rows(cat, dict(model="qwen2.5-7b", gpu="rtx-4090", engine="llama.cpp", precision="q4_k_m", max_model_len=4096,
                         draft_model="qwen2-1.5b")).iloc[0]
    assert row["draft_model"] == "qwen2-1.5b"


# --- CLI ------------------------------------------------------------------------------------------

def test_serve_json_carries_the_version_and_draft_keys():
    code, out, err = run_cli("serve", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "vllm", "--max-model-len",
                             "16384", "--engine-version", "0.6", "--draft-model", "llama-3.2-1b", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert list(data) == [*SERVE_JSON_KEYS, "schema_version"]
    assert (data["engine_version"], data["engine_generation"], data["profile_tokens"]) == ("0.6", "V0", 16384)
    assert data["draft_model"] == "llama-3.2-1b" and data["draft_kv_bytes_per_token"] == LLAMA32_1B_KV
    assert "--speculative-model meta-llama/Llama-3.2-1B --num-speculative-tokens 5" in data["command"]


@pytest.mark.parametrize("args,message", [
    (("--engine", "vllm", "--engine-version", "zero"), "engine-version 'zero' is not accepted; accepted: a vLLM version X.Y"),
    (("--engine", "vllm", "--draft-model", "gpt-oss-20b"), "draft model 'gpt-oss-20b' does not share the tokenizer"),
])
def test_serve_bad_version_or_draft_exits_2_with_one_line(args, message):
    code, out, err = run_cli("serve", "--model", "llama-3-8b", "--gpu", "rtx-4090", "--max-model-len", "4096", *args)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1
