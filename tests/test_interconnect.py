"""Training communication over the intra-node interconnect (engine/speed.py, comm_hours).

Expected values are worked out here by hand from the catalog's published figures (parameter
counts, interconnect_gbps) and the ring formulas: NCCL docs ("Collective operations": ring
all-reduce sends 2(n-1)/n of the buffer per rank; all-gather and reduce-scatter (n-1)/n),
PyTorch DDP's 25 MiB gradient buckets, ~6 us per collective (NVIDIA/nccl issue #1259). None of
them is produced by calling the code under test.
"""

import math

import numpy as np
import pandas as pd
import pytest

from engine import estimate

LATENCY = 6e-6             # NVIDIA/nccl issue #1259: ~6 us small all-reduce
BUCKET = 25 * 2**20        # torch DDP bucket_cap_mb = 25
TOKENS, SEQ, BATCH = 1e9, 2048, 4


def _model(models, model_id):
    return models.set_index("id").loc[model_id]


def _gpu(gpus, gpu_id):
    return gpus.set_index("id").loc[gpu_id]


def _run(models, gpu_table, **kw):
    base = dict(model="llama-3-8b", task="train", method="full", precision="bf16", seq=SEQ, batch=BATCH,
                tokens=TOKENS)
    return estimate(pd.DataFrame([{**base, **kw}]), models, gpu_table).iloc[0]


def _allreduce_hours(params, grad_bytes, dp, link_gbps):
    link = link_gbps * 1e9 / 2            # one direction of the link
    size = params * grad_bytes
    per_step = 2 * (dp - 1) / dp * size / link + max(1, math.ceil(size / BUCKET)) * LATENCY
    steps = TOKENS / (BATCH * SEQ * dp)
    return steps * per_step / 3600


@pytest.mark.parametrize("gpu_id", ["l40s", "h100-sxm-80gb"])  # both: 8 in one server (catalog max_per_node)
def test_data_parallel_all_reduce_by_hand(models, gpus, gpu_id):
    N = float(_model(models, "llama-3-8b")["params"])
    link = float(_gpu(gpus, gpu_id)["interconnect_gbps"])
    one = _run(models, gpus, gpu=gpu_id, gpus=1)
    eight = _run(models, gpus, gpu=gpu_id, gpus=8)
    assert one["comm_hours"] == 0
    expected = _allreduce_hours(N, 2, 8, link)       # bf16 gradients: 2 bytes each
    assert eight["comm_hours"] == pytest.approx(expected, rel=1e-9)
    # no overlap assumed: the compute of one GPU split eight ways, plus the communication
    assert eight["train_hours"] == pytest.approx(one["train_hours"] / 8 + expected, rel=1e-9)
    assert eight["gpu_hours"] == pytest.approx(8 * eight["train_hours"], rel=1e-12)


def test_pcie_costs_more_time_than_nvlink(models, gpus):
    pcie = _run(models, gpus, gpu="l40s", gpus=8)
    nvlink = _run(models, gpus, gpu="h100-sxm-80gb", gpus=8)
    # 64 GB/s (PCIe 4.0 x16) against 900 GB/s (NVLink 4): 14 times the transfer time; the same
    # per-collective latency on both brings the ratio a little under that
    assert 10 < pcie["comm_hours"] / nvlink["comm_hours"] < 900 / 64


def test_zero3_gathers_weights_twice_and_reduce_scatters_gradients(models, gpus):
    m = _model(models, "llama-2-13b")
    N, L = float(m["params"]), float(m["num_layers"])
    link = float(_gpu(gpus, "a100-80gb-sxm")["interconnect_gbps"]) * 1e9 / 2
    got = _run(models, gpus, model="llama-2-13b", gpu="a100-80gb-sxm", gpus=4, zero=3)
    dp = 4
    per_step = (2 * (dp - 1) / dp * N * 2 + (dp - 1) / dp * N * 2) / link + 3 * L * LATENCY
    expected = TOKENS / (BATCH * SEQ * dp) * per_step / 3600
    assert got["comm_hours"] == pytest.approx(expected, rel=1e-9)


def test_tensor_parallel_only_has_no_data_parallel_traffic_and_inference_none(models, gpus):
    tp_only = _run(models, gpus, gpu="h100-sxm-80gb", gpus=2, tp=2)
    assert tp_only["comm_hours"] == 0
    infer = estimate(pd.DataFrame([dict(model="llama-3-8b", task="infer", precision="bf16", seq=1024,
                                        gpu="h100-sxm-80gb", gpus=2)]), models, gpus).iloc[0]
    assert np.isnan(infer["comm_hours"])


def test_estimate_json_carries_the_communication_hours():
    import json
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "engine", "estimate", "--model", "llama-3-8b", "--method", "full",
                           "--gpu", "l40s", "--gpus", "8", "--batch", "4", "--tokens", "1e9", "--json"],
                          cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["comm_hours"] > 0 and data["train_hours"] > data["comm_hours"]
    one = subprocess.run([sys.executable, "-m", "engine", "estimate", "--model", "llama-3-8b", "--method", "lora",
                          "--gpu", "rtx-4090", "--json"], cwd=root, capture_output=True, text=True, timeout=120)
    assert json.loads(one.stdout)["comm_hours"] == 0  # one GPU: nothing to exchange


def test_gpus_over_several_nodes_get_no_intra_node_figure(models, gpus):
    # 8 RTX 4090s are 4 workstations (max_per_node 2): the network between them is not in the
    # catalog, so no communication time is claimed (empty) and train_hours is the compute alone
    one = _run(models, gpus, gpu="rtx-4090", gpus=1)
    spread = _run(models, gpus, gpu="rtx-4090", gpus=8)
    assert np.isnan(spread["comm_hours"])
    assert spread["train_hours"] == pytest.approx(one["train_hours"] / 8, rel=1e-9)
    two = _run(models, gpus, gpu="rtx-4090", gpus=2)  # one workstation: the PCIe figure applies
    assert two["comm_hours"] > 0
