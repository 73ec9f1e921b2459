"""What `serve` says about the KV cache and the device, the same under every engine (a QA pass):

- `kv_cache_bytes_available` is what is left for the KV cache once the weights, the activation peak and the
  overheads are counted, as vLLM's budget (gpu_worker.py determine_available_memory) is, under llama.cpp / Ollama and
  ExLlamaV2 too, which printed their own allocation there (16 GiB "available" on a 12 GiB card); that allocation is
  `kv_cache_bytes_allocated`, and a plan whose KV cache is larger than the room left says so;
- ExLlamaV2 runs on CUDA and ROCm GPUs only (turboderp-org/exllamav2 setup.py: a CUDAExtension, HIP under ROCm);
- a Mac is one device (catalog/gpus.yaml rule no-multi-device-on-apple): `--gpus` above 1 on it is refused.

Expected values are computed here from the plan's own byte columns and the engines' constants, not read back from the
column under test."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine import serving as S
from planner.serving import SERVE_JSON_KEYS, capacity_curve, cheapest, fits_with, format_serve
from tests.clirun import run_cli
from tests.test_serving_engines import rows  # (serve() of the requests, on `frames`)

GIB = 2**30
APPLE = "apple-m4-max-128gb"


@pytest.fixture(scope="module")
def frames(models, gpus):  # (the shipped catalog's frames, as rows() takes them; conftest's session fixtures)
    return models, gpus


# --- kv_cache_bytes_available: what is left for the KV cache, under every engine ----------------------------------

BASE = dict(model="llama-3-8b", gpu="rtx-4090", max_model_len=8192)
EVERY_ENGINE = [("vllm", "bf16"), ("sglang", "bf16"), ("transformers", "bf16"), ("llama.cpp", "q4_k_m"),
                ("ollama", "q4_k_m"), ("exllamav2", "exl2-4.0"), ("mlc-llm", "q4f16_1")]


def test_kv_available_is_the_room_left_beside_the_weights_under_every_engine(frames):
    """Every engine: the weights on the GPU, the activation peak and what is left for the KV cache fit in the card; the
    requests held are that room over one request's K/V. ExLlamaV2 printed its cache of -l tokens (16 GiB on a 12 GiB
    RTX 3060 at 131,072 tokens) and llama.cpp the K/V of -c tokens (1 GiB beside 90 requests on an M4 Max)."""
    out = rows(frames, *({**BASE, "engine": e, "precision": p} for e, p in EVERY_ENGINE))
    room, used = out["kv_cache_bytes_available"], out["weights_gpu_bytes"] + out["activation_peak_bytes"]
    assert ((room > 0) & (room + used <= out["usable_bytes"])).all(), out[["engine", "kv_cache_bytes_available"]]
    # the engines that split layers hold the room over one request of max_model_len (every layer on the GPU here)
    split = out[out["engine"].isin(("llama.cpp", "ollama", "exllamav2"))]
    assert (split["gpu_layers"] == split["total_layers"] + np.where(split["engine"] == "exllamav2", 0, 1)).all()
    assert (split["max_concurrency"] == np.floor(split["kv_cache_bytes_available"]
                                                 / (split["kv_bytes_per_token"] * 8192))).all()


def test_exllamav2_room_and_its_own_cache_on_a_12_gb_card(frames):
    """The QA case: Llama 3 8B EXL2 4.0 bpw on an RTX 3060 12GB at 131,072 tokens. Its cache of one 131,072-token
    sequence is 16 GiB (32 layers x 8 KV heads x 128 x 2 x 2 B a token); the room is what the card keeps after the
    weights, the scratch, the 192 + 256 MiB the loader keeps free and the CUDA context: 6.80 GiB."""
    r = rows(frames, {**BASE, "gpu": "rtx-3060-12gb", "engine": "exllamav2", "precision": "exl2-4.0",
                      "max_model_len": 131072}).iloc[0]
    assert r["kv_cache_bytes_allocated"] == 2 * 32 * 8 * 128 * 2 * 131072 == 16 * GIB
    room = r["usable_bytes"] - r["weights_gpu_bytes"] - r["activation_peak_bytes"] - S.EXL_RESERVE_BYTES - r["non_torch_bytes"]
    assert r["kv_cache_bytes_available"] == pytest.approx(room, rel=1e-12)
    assert round(r["kv_cache_bytes_available"] / GIB, 2) == 6.80 and r["kv_cache_bytes_available"] < r["usable_bytes"]
    assert r["max_concurrency"] == 0 and not r["fits"]


def test_llamacpp_room_and_its_own_context_on_an_m4_max(frames):
    """llama.cpp on an M4 Max (96 GiB of the 128 for the GPU): every layer of Llama 3 8B Q4_K_M and a compute buffer,
    --fit's 1,024 MiB margin and no CUDA context on Metal; the rest is the room, 90 slots of 8,192 tokens. Its own
    allocation is llama-server's -c 8192 (one slot): 1 GiB of f16 K/V."""
    r = rows(frames, {**BASE, "gpu": APPLE, "engine": "llama.cpp", "precision": "q4_k_m"}).iloc[0]
    assert r["kv_cache_bytes_allocated"] == 2 * 32 * 8 * 128 * 2 * 8192 == GIB
    room = r["usable_bytes"] - S.FIT_MARGIN_BYTES - r["weights_gpu_bytes"] - r["compute_buffer_bytes"]
    assert r["non_torch_bytes"] == 0 and r["kv_cache_bytes_available"] == pytest.approx(room, rel=1e-12)
    assert r["max_concurrency"] == np.floor(room / GIB) == 90


def test_allocated_is_the_budget_for_paged_engines_and_null_for_transformers(frames):
    """vLLM, SGLang and MLC-LLM set their whole KV budget aside (blocks, pool, max_total_seq_length): allocated equals
    available; transformers' cache grows with each sequence: none set aside."""
    out = rows(frames, *({**BASE, "engine": e, "precision": p} for e, p in EVERY_ENGINE)).set_index("engine")
    for e in ("vllm", "sglang", "mlc-llm"):
        assert out.loc[e, "kv_cache_bytes_allocated"] == out.loc[e, "kv_cache_bytes_available"]
    assert np.isnan(out.loc["transformers", "kv_cache_bytes_allocated"])
    assert list(SERVE_JSON_KEYS).index("kv_cache_bytes_allocated") < list(SERVE_JSON_KEYS).index("fits_with")


@pytest.mark.parametrize("args, expected", [
    (("--gpu", "rtx-3060-12gb", "--engine", "exllamav2", "--precision", "exl2-4.0", "--max-model-len", "131072",
      "--allow-long-context"),
     ["DOES NOT FIT: one 131,072-token request's KV cache (16.00 GiB per GPU) is more than the 6.80 GiB left for it "
      "after the weights (3.62 GiB per GPU) and the activation peak (0.72 GiB)",
      "KV cache available: 6.80 GiB (ExLlamaV2's cache of 1 x 131,072 tokens: 16.00 GiB) -> max concurrency 0.00"]),
    (("--gpu", "rtx-3060-12gb", "--engine", "exllamav2", "--precision", "exl2-4.0", "--max-model-len", "8192",
      "--max-num-seqs", "8"),
     ["DOES NOT FIT: ExLlamaV2's cache of --max-num-seqs 8 sequences of 8,192 tokens (8.00 GiB per GPU) is more than "
      "the 6.80 GiB left for it"]),
    # vLLM likewise: room is left after the weights, less than one request's K/V
    (("--gpu", "rtx-4090", "--engine", "vllm", "--max-model-len", "131072", "--allow-long-context"),
     ["DOES NOT FIT: one 131,072-token request's KV cache (16.00 GiB per GPU) is more than the 5.67 GiB left for it"]),
    (("--gpu", APPLE, "--engine", "llama.cpp", "--max-model-len", "8192"),
     ["KV cache available: 90.39 GiB (llama.cpp's -c 8,192 tokens on the GPU layers: 1.00 GiB) -> max concurrency "
      "90.00 requests"]),
])
def test_serve_text_names_the_kv_cache_and_the_room(args, expected):
    code, out, err = run_cli("serve", "--model", "llama-3-8b", *args)
    assert code == 0, err
    for text in expected:
        assert text in out, out
    assert "leave no room" not in out


def test_nothing_left_still_says_the_weights_leave_no_room(frames):
    """Where the weights alone fill the budget, no room is left: the verdict names them, not the KV cache."""
    r = rows(frames, {**BASE, "model": "llama-3.1-70b", "engine": "vllm", "precision": "bf16"}).iloc[0]
    assert r["kv_cache_bytes_available"] == 0 and not r["fits"]
    assert "DOES NOT FIT: the weights (131.45 GiB per GPU) leave no room" in format_serve(r)


def test_serve_json_carries_the_allocation():
    code, out, err = run_cli("serve", "--model", "llama-3-8b", "--gpu", "rtx-3060-12gb", "--engine", "exllamav2",
                             "--max-model-len", "131072", "--allow-long-context", "--json")
    data = json.loads(out)
    assert code == 0 and list(data) == [*SERVE_JSON_KEYS, "schema_version"], err
    assert data["kv_cache_bytes_allocated"] == 16 * GIB and data["kv_cache_bytes_available"] < 12 * GIB


# --- ExLlamaV2: CUDA and ROCm GPUs only ------------------------------------------------------------------------------

@pytest.mark.parametrize("gpu, vendor", [(APPLE, "apple"), ("gaudi3", "intel")])
def test_exllamav2_is_refused_on_a_gpu_without_cuda_or_rocm(frames, gpu, vendor):
    """turboderp-org/exllamav2 setup.py builds its kernels as a torch CUDAExtension (HIP under a ROCm torch): no Metal
    or Gaudi build. The QA pass: 91 requests at 64 tokens/s on an M4 Max."""
    with pytest.raises(ValueError, match=rf"engine 'exllamav2' is not accepted on gpu '{gpu}' \({vendor}\); "
                                         r"accepted: nvidia or amd GPUs"):
        rows(frames, {**BASE, "gpu": gpu, "engine": "exllamav2", "precision": "exl2-4.0"})
    code, out, err = run_cli("serve", "--model", "llama-3-8b", "--gpu", gpu, "--engine", "exllamav2",
                             "--max-model-len", "8192")
    assert code == 2 and out == "" and f"engine 'exllamav2' is not accepted on gpu '{gpu}' ({vendor})" in err
    assert ("--engine llama.cpp, ollama, mlc-llm or mlx-lm (Metal)" in err) is (vendor == "apple")


@pytest.mark.parametrize("gpu, what, instead", [(APPLE, "apple-m4", "mlx-lm (Metal)"), ("gaudi3", "gaudi3", None),
                                                ("rx-7900-xtx", "rdna3", "--engine exllamav2 (ROCm)"),
                                                ("t4", "turing", "--engine exllamav2 (EXL2)"),
                                                ("v100-32gb", "volta", "--engine exllamav2 (EXL2)")])
def test_exllamav3_is_refused_off_nvidia_ampere_or_newer(frames, models, gpus, gpu, what, instead):
    """turboderp-org/exllamav3: a CUDA extension with no ROCm build (README "What's missing?: ROCm support"), kernels
    that need sm_80 (cp.async, mma.m16n8k16: its issue #14, a T4 build). Refused in one line naming the card and what
    is accepted, and left out of the cheapest search (as ExLlamaV2 off CUDA / ROCm)."""
    with pytest.raises(ValueError, match=rf"engine 'exllamav3' is not accepted on gpu '{gpu}' \({what}\); accepted: NVIDIA "
                                         r"GPUs of compute capability 8.0 or newer"):
        rows(frames, {**BASE, "gpu": gpu, "engine": "exllamav3", "precision": "exl3-4.0"})
    code, out, err = run_cli("serve", "--model", "llama-3-8b", "--gpu", gpu, "--engine", "exllamav3",
                             "--max-model-len", "8192")
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert f"engine 'exllamav3' is not accepted on gpu '{gpu}' ({what})" in err and (instead is None or instead in err)
    best = cheapest("llama-3-8b", 1, 8192, 20.0, 10.0, models, gpus, engines=("exllamav3",),
                    precisions=("exl3-4.0",), gpu_ids=[gpu, "rtx-4090", "a100-80gb-sxm"], tp_choices=(1,))
    assert sorted(best["gpu"]) == ["a100-80gb-sxm", "rtx-4090"]


def test_exllamav2_runs_on_nvidia_and_amd(frames):
    out = rows(frames, *({**BASE, "gpu": g, "engine": "exllamav2", "precision": "exl2-4.0"}
                         for g in ("rtx-4090", "rx-7900-xtx")))
    assert out["fits"].all() and (out["max_concurrency"] >= 1).all()


def test_cheapest_leaves_exllamav2_out_on_cards_it_does_not_run_on(models, gpus):
    """The Serving page's cheapest search over every card: the Apple and Gaudi rows are left out (as a format a card
    does not run is), not served and not a reason to refuse the search."""
    best = cheapest("llama-3-8b", 1, 8192, 20.0, 10.0, models, gpus, engines=("exllamav2",), precisions=("exl2-4.0",),
                    gpu_ids=[APPLE, "gaudi3", "rtx-4090"], tp_choices=(1,))
    assert best["gpu"].tolist() == ["rtx-4090"]


# --- a Mac is one device ---------------------------------------------------------------------------------------------

APPLE_ENGINES = [("llama.cpp", "q4_k_m"), ("ollama", "q4_k_m"), ("vllm", "bf16"), ("sglang", "bf16"),
                 ("transformers", "bf16"), ("mlc-llm", "q4f16_1"), ("mlx-lm", "mlx-4bit")]


@pytest.mark.parametrize("engine, precision", APPLE_ENGINES)
def test_several_apple_devices_are_refused_under_every_engine(frames, engine, precision):
    """catalog/gpus.yaml rule no-multi-device-on-apple ("a Mac is one device"): llama.cpp split Llama 3 8B's layers
    over 4 M4 Max "GPUs" and held 378 requests where one holds 90. One device is taken."""
    asked = {**BASE, "gpu": APPLE, "engine": engine, "precision": precision}
    with pytest.raises(ValueError, match=rf"gpus 4 is not accepted on gpu '{APPLE}' \(apple\): a Mac is one device "
                                         r".*no-multi-device-on-apple\); accepted: 1$"):
        rows(frames, {**asked, "gpus": 4})
    assert rows(frames, {**asked, "gpus": 1}).iloc[0]["gpus"] == 1


def test_serve_cli_refuses_several_macs():
    code, out, err = run_cli("serve", "--model", "llama-3-8b", "--gpu", APPLE, "--gpus", "4", "--engine", "llama.cpp",
                             "--max-model-len", "8192")
    assert code == 2 and out == "" and f"gpus 4 is not accepted on gpu '{APPLE}' (apple)" in err and "accepted: 1" in err


def test_cheapest_and_the_curve_take_one_mac(models, gpus):
    """The Serving page: the cheapest search over GPU counts keeps one Mac (not 2, 4 or 8 of them) beside the cards
    that take several; the curve at 2 GPUs per replica refuses the Mac (the page asks each card alone and names it)
    and sizes the others."""
    best = cheapest("llama-3-8b", 1, 8192, 20.0, 10.0, models, gpus, engines=("llama.cpp",), precisions=("q4_k_m",),
                    gpu_ids=[APPLE, "rtx-4090"], tp_choices=(1, 2, 4, 8))
    macs = best[best["gpu"] == APPLE]
    assert macs["gpus"].tolist() == [1] and sorted(best.loc[best["gpu"] == "rtx-4090", "gpus"]) == [1, 2, 4, 8]
    with pytest.raises(ValueError, match="gpus 2 is not accepted on gpu 'apple-m4-max-128gb'"):
        capacity_curve("llama-3-8b", [APPLE], "llama.cpp", "q4_k_m", models, gpus, contexts=(8192,), gpu_count=2)
    assert capacity_curve("llama-3-8b", ["rtx-4090"], "llama.cpp", "q4_k_m", models, gpus, contexts=(8192,),
                          gpu_count=2)["fits"].all()


def test_fits_with_on_a_mac_offers_smaller_weights_on_it_not_more_macs(models, gpus):
    """Llama 3 70B in bf16 does not fit one M4 Max under vLLM: the options are 4-bit weights on it, not 2 Macs (which
    were offered), and the refused counts do not hide the format that fits."""
    options = fits_with(dict(model="llama-3-70b", gpu=APPLE, engine="vllm", precision="bf16", max_model_len=8192),
                        models, gpus)
    assert [(int(o.gpus), o.precision, int(o.max_model_len)) for o in options.itertuples()] == [(1, "int4", 8192)]
