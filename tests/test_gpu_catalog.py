"""The GPU catalog of issue 15 (item 4): at least 45 GPUs, the ones the issue names among them, every
figure a user sees with its source or an explicit reason, and spot checks of published figures.

The spot-check values below are the published figures, typed in from the source named in each comment;
they are never computed by the code under test."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.clirun import run_cli

# The GPUs issue 15 asks for (the consumer mid-range and the 2025-26 parts).
ISSUE_15_GPUS = {
    "rtx-3060-ti", "rtx-3080-10gb", "rtx-3090-ti", "rtx-4060-ti-16gb", "rtx-4070-ti-super", "rtx-4080-super",
    "rtx-5070-ti", "rtx-5080", "t4", "a40", "l40", "rtx-pro-6000-blackwell", "b300", "mi355x", "rx-7900-xtx",
    "apple-m2-ultra-192gb", "apple-m4-max-128gb", "amd-ryzen-ai-max-395-128gb", "nvidia-dgx-spark",
}
UNIFIED = {"apple-m2-ultra-192gb", "apple-m4-max-128gb", "amd-ryzen-ai-max-395-128gb", "nvidia-dgx-spark"}

# An empty figure must say why: "no ... found", "not sold as a card", "not rented by the GPU-hour", ...
REASON = re.compile(r"\b(no|not|n/a|rarely|left empty)\b", re.IGNORECASE)
YEAR_MONTH = re.compile(r"^(19|20)\d\d-(0[1-9]|1[0-2])$")
YEAR_OR_MONTH = re.compile(r"^(19|20)\d\d(-(0[1-9]|1[0-2]))?$")


@pytest.fixture(scope="module")
def cli_gpus():
    code, out, err = run_cli("catalog", "gpus", "--json")  # in this process (tests/clirun.py)
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def by_id(gpus):
    return gpus.set_index("id")


def _empty(value) -> bool:
    return value is None or (isinstance(value, float) and pd.isna(value)) or value is pd.NA


def _text(value) -> str:
    return "" if _empty(value) else str(value).strip()


# ---------------------------------------------------------------- size: CLI and DuckDB frames agree

def test_cli_lists_at_least_45_gpus_with_the_issue_15_parts(cli_gpus):
    ids = [g["id"] for g in cli_gpus]
    assert len(ids) >= 45
    assert len(ids) == len(set(ids))
    assert ISSUE_15_GPUS <= set(ids), sorted(ISSUE_15_GPUS - set(ids))


def test_catalog_frames_hold_the_same_gpus_as_the_cli(gpus, cli_gpus):
    assert len(gpus) >= 45
    assert gpus["id"].is_unique
    assert set(gpus["id"]) == {g["id"] for g in cli_gpus}
    assert ISSUE_15_GPUS <= set(gpus["id"])


def test_new_gpus_are_queryable_by_id(cat):
    # the parameterized DuckDB query the pages use
    row = cat.query("gpu_by_id", ["rtx-4080-super"])
    assert len(row) == 1
    assert row.iloc[0]["memory_gb"] == 16


# ---------------------------------------------------------------- every figure a user sees: a source or a reason

def test_every_gpu_price_has_a_source_date_or_a_reason(gpus):
    for _, g in gpus.iterrows():
        source = _text(g["price_source"])
        assert source, g["id"]
        assert YEAR_MONTH.match(_text(g["price_date"])), (g["id"], g["price_date"])
        if _empty(g["price_usd"]):
            assert REASON.search(source), (g["id"], source)
        else:
            assert g["price_usd"] > 0, g["id"]


def test_every_cloud_price_has_a_provider_source_or_a_reason(gpus):
    for _, g in gpus.iterrows():
        source = _text(g["cloud_source"])
        assert source, g["id"]
        assert YEAR_MONTH.match(_text(g["cloud_date"])), (g["id"], g["cloud_date"])
        if _empty(g["cloud_usd_per_hour"]):
            assert REASON.search(source), (g["id"], source)
        else:
            assert g["cloud_usd_per_hour"] > 0, g["id"]


def test_every_used_price_has_a_source_and_date_or_a_reason(gpus):
    for _, g in gpus.iterrows():
        source = _text(g["price_used_source"])
        assert source, g["id"]
        if _empty(g["price_used_usd"]):
            assert REASON.search(source), (g["id"], source)
            assert _empty(g["price_used_date"]), g["id"]
        else:
            assert YEAR_OR_MONTH.match(_text(g["price_used_date"])), (g["id"], g["price_used_date"])


def test_every_usable_memory_figure_says_where_it_comes_from(gpus):
    for _, g in gpus.iterrows():
        source = _text(g["usable_memory_source"])
        assert source, g["id"]
        # a measured total (nvidia-smi / rocm-smi / what the OS reports), a stated share of unified
        # memory, or an assumption flagged as one
        assert re.search(r"nvidia-smi|rocm-smi|unified memory|assign|GiB|ASSUMPTION", source), (g["id"], source)
        assert 0 < g["usable_memory_bytes"] <= g["memory_gb"] * 2**30 * 1.01, g["id"]


def test_every_gpu_has_its_system_fields_or_a_reason(gpus):
    for _, g in gpus.iterrows():
        source = _text(g["system_source"])
        assert source, g["id"]
        missing = [c for c in ("architecture", "form_factor", "max_per_node", "node_interconnect", "host_class")
                   if _empty(g[c])]
        if missing:
            assert re.search(r"no source|left empty", source), (g["id"], missing, source)


def test_new_gpus_state_their_derivations_in_notes(by_id):
    for gid in ISSUE_15_GPUS:
        assert len(_text(by_id.loc[gid, "notes"])) > 40, gid


def test_unified_memory_parts_follow_the_apple_convention(by_id):
    for gid in UNIFIED:
        g = by_id.loc[gid]
        assert bool(g["unified_memory"]), gid
        assert g["max_per_node"] == 1 and g["node_interconnect"] == "unified memory", gid
        assert g["usable_memory_bytes"] < g["memory_gb"] * 2**30, gid  # the GPU-usable share, not all of it


# ---------------------------------------------------------------- spot checks of published figures

@pytest.mark.parametrize("gid, field, published", [
    # svethardware.cz RTX 4000 Super launch table (2024-01); biggo.com RTX 5080 review: "RTX 4080 Super's 736 GB/s"
    ("rtx-4080-super", "memory_gb", 16),
    ("rtx-4080-super", "bandwidth_gbps", 736),
    ("rtx-4080-super", "tdp_w", 320),
    ("rtx-4080-super", "price_usd", 999),
    # svethardware.cz (2024-01): RTX 4070 Ti Super 672 GB/s, 285 W, $799
    ("rtx-4070-ti-super", "bandwidth_gbps", 672),
    ("rtx-4070-ti-super", "price_usd", 799),
    # tweaktown.com NVIDIA CES 2025 table: RTX 5080 960 GB/s, RTX 5070 Ti 896 GB/s; technologistmag.com: $999 / $749
    ("rtx-5080", "bandwidth_gbps", 960),
    ("rtx-5080", "price_usd", 999),
    ("rtx-5070-ti", "bandwidth_gbps", 896),
    ("rtx-5070-ti", "price_usd", 749),
    # tweaktown.com RTX 3090 Ti: 1,008 GB/s, 450 W
    ("rtx-3090-ti", "bandwidth_gbps", 1008),
    ("rtx-3090-ti", "tdp_w", 450),
    # fudzilla.net RTX 30 launch: RTX 3080 760 GB/s, 320 W, 29.8 TFLOPS, $699
    ("rtx-3080-10gb", "bandwidth_gbps", 760),
    ("rtx-3080-10gb", "fp32_tflops", 29.8),
    ("rtx-3080-10gb", "price_usd", 699),
    # pangoly.com (NVIDIA launch data): RTX 4060 Ti 288 GB/s; convly.ai (2026-05): 165 W, launch price $499 for 16 GB
    ("rtx-4060-ti-16gb", "bandwidth_gbps", 288),
    ("rtx-4060-ti-16gb", "price_usd", 499),
    ("rtx-4060-ti-16gb", "tdp_w", 165),
    # NVIDIA T4 datasheet (networkoutlet.com, deploybase.ai): 16 GB, 320 GB/s, FP16 65, INT8 130, 70 W
    ("t4", "memory_gb", 16),
    ("t4", "bandwidth_gbps", 320),
    ("t4", "fp16_tflops", 65),
    ("t4", "int8_tops", 130),
    ("t4", "tdp_w", 70),
    # NVIDIA A40 product brief (relationship-nepal.org reproduction): 48 GB, 696 GB/s, 300 W
    ("a40", "memory_gb", 48),
    ("a40", "bandwidth_gbps", 696),
    ("a40", "tdp_w", 300),
    # NVIDIA L40 datasheet (mullet.se): 864 GB/s, FP8 362 dense, 300 W
    ("l40", "bandwidth_gbps", 864),
    ("l40", "fp8_tflops", 362),
    ("l40", "tdp_w", 300),
    # hardware-corner.net / newgearhub.com: RTX PRO 6000 Blackwell 96 GB, 1,792 GB/s, 600 W, MSRP $8,565
    ("rtx-pro-6000-blackwell", "memory_gb", 96),
    ("rtx-pro-6000-blackwell", "bandwidth_gbps", 1792),
    ("rtx-pro-6000-blackwell", "tdp_w", 600),
    ("rtx-pro-6000-blackwell", "price_usd", 8565),
    # glennklockwood.com B300 (citing NVIDIA): 288 GB, 8 TB/s, BF16 2250 dense, 1,400 W
    ("b300", "memory_gb", 288),
    ("b300", "bandwidth_gbps", 8000),
    ("b300", "bf16_tflops", 2250),
    ("b300", "tdp_w", 1400),
    # Tom's Hardware (ISC 2025): MI355X 288 GB HBM3E, 8 TB/s, 1,400 W
    ("mi355x", "memory_gb", 288),
    ("mi355x", "bandwidth_gbps", 8000),
    ("mi355x", "tdp_w", 1400),
    # pcspecchart.com / mybroadband.co.za: RX 7900 XTX 24 GB, 960 GB/s, 355 W, $999
    ("rx-7900-xtx", "memory_gb", 24),
    ("rx-7900-xtx", "bandwidth_gbps", 960),
    ("rx-7900-xtx", "tdp_w", 355),
    ("rx-7900-xtx", "price_usd", 999),
    # Apple support 102027: Mac Studio M2 Ultra 76-core 192 GB, 295 W maximum
    ("apple-m2-ultra-192gb", "memory_gb", 192),
    ("apple-m2-ultra-192gb", "tdp_w", 295),
    # notebookcheck.net: M4 Max 40-core GPU, up to 128 GB at 546 GB/s
    ("apple-m4-max-128gb", "bandwidth_gbps", 546),
    # Framework Desktop: 128 GB, 256 GB/s (Framework blog via capitaldailynews.com), $1,999 (matthewjayhunter.com)
    ("amd-ryzen-ai-max-395-128gb", "memory_gb", 128),
    ("amd-ryzen-ai-max-395-128gb", "bandwidth_gbps", 256),
    ("amd-ryzen-ai-max-395-128gb", "price_usd", 1999),
    # meterpreter.org (Hot Chips 2025) / ai-infrastructure.net: DGX Spark 128 GB, 273 GB/s, 140 W, $3,999
    ("nvidia-dgx-spark", "memory_gb", 128),
    ("nvidia-dgx-spark", "bandwidth_gbps", 273),
    ("nvidia-dgx-spark", "tdp_w", 140),
    ("nvidia-dgx-spark", "price_usd", 3999),
])
def test_published_figure(by_id, gid, field, published):
    assert by_id.loc[gid, field] == pytest.approx(published), (gid, field)


@pytest.mark.parametrize("gid, mib", [
    # nvidia-smi memory.total lines quoted in public GitHub repositories (e.g. "NVIDIA GeForce RTX 4080 SUPER, 16376 MiB")
    ("rtx-4080-super", 16376),
    ("rtx-3090-ti", 24564),
    ("t4", 15360),
    ("a40", 46068),
    ("rtx-pro-6000-blackwell", 97887),
    ("b300", 275040),
])
def test_usable_memory_is_the_nvidia_smi_total(by_id, gid, mib):
    assert by_id.loc[gid, "usable_memory_bytes"] == mib * 1_048_576


def test_rx_7900_xtx_usable_memory_is_the_rocm_smi_total(by_id):
    # rocm-smi --json: "VRAM Total Memory (B)": "25753026560" (public GitHub repositories)
    assert by_id.loc["rx-7900-xtx", "usable_memory_bytes"] == 25_753_026_560


def test_turing_t4_has_no_bf16_and_datacenter_dense_rates(by_id):
    # Turing has no BF16 tensor cores (as V100): the figure is empty, never copied from FP16
    assert _empty(by_id.loc["t4", "bf16_tflops"])
    assert by_id.loc["t4", "architecture"] == "turing"


# ---------------------------------------------------------------- issue 25 item 6: systems and used prices, from the YAML

# Issue 25 asks for 10 cards with a used-market price; 11 have a sourced, dated quote (2026-12: the
# A100 80GB PCIe and H100 SXM5 joined the nine consumer / V100 cards, each quote naming the exact
# variant; the others have none, see each entry's price_used_source). Raise this as more are sourced.
USED_PRICES_SOURCED = 11


@pytest.fixture(scope="module")
def gpu_entries():
    path = Path(__file__).resolve().parent.parent / "catalog" / "gpus.yaml"
    return yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["gpus"]


def test_every_gpu_says_how_many_fit_in_one_node(gpu_entries):
    missing = [g["id"] for g in gpu_entries if not isinstance(g.get("max_per_node"), int) or g["max_per_node"] < 1]
    assert not missing, missing


def test_used_prices_each_have_a_source_and_a_date(gpu_entries):
    used = [g for g in gpu_entries if g.get("price_used_usd") is not None]
    assert len(used) >= USED_PRICES_SOURCED, [g["id"] for g in used]
    for g in used:
        assert g["price_used_usd"] > 0, g["id"]
        assert len(_text(g.get("price_used_source"))) > 20, g["id"]
        assert YEAR_OR_MONTH.match(_text(g.get("price_used_date"))), (g["id"], g.get("price_used_date"))


def test_a_datacenter_used_quote_names_the_form_factor_it_is_recorded_on(gpu_entries):
    # A100 / H100 come as PCIe cards and SXM modules at different prices: a used quote recorded on
    # one of them must name that form factor (e.g. 'A100 80GB PCIe', 'H100 SXM'), not just the chip.
    for g in gpu_entries:
        if g.get("price_used_usd") is None or g.get("segment") != "datacenter":
            continue
        word = {"pcie": "PCIe", "sxm": "SXM"}.get(g.get("form_factor"))
        if word:
            assert word in _text(g.get("price_used_source")), (g["id"], word)
    checked = {g["id"] for g in gpu_entries if g.get("price_used_usd") is not None}
    assert {"a100-80gb-pcie", "h100-sxm-80gb"} <= checked
