"""Every price a user sees has a date and a source (README, Prices): estimate's costs (purchase_usd = the card's new
list price x GPUs, cloud_cost_usd and rent_usd_per_month from its cloud $/GPU-hour) printed `buy: $3,198` and
`cloud cost $228` with neither, in the text, in `--json` and in the sweep CSV, while budget and the pages date theirs."""

from __future__ import annotations

import io
import json

import pandas as pd

from tests.clirun import run_cli

SCENARIO = ("--model", "llama-3.1-8b", "--method", "lora", "--gpu", "rtx-4090")


def test_estimate_text_names_each_price_with_its_date_and_source(gpus):
    g = gpus.set_index("id").loc["rtx-4090"]
    code, out, err = run_cli("estimate", *SCENARIO)
    assert code == 0, err
    line = next(s for s in out.splitlines() if s.startswith("prices: "))
    assert f"card ${g['price_usd']:,.0f} new list price ({g['price_date']}: {g['price_source']})" in line
    assert f"cloud ${g['cloud_usd_per_hour']:,.2f}/GPU-hour ({g['cloud_date']}: {g['cloud_source']})" in line


def test_estimate_and_check_json_carry_the_dates_and_sources(gpus):
    g = gpus.set_index("id").loc["rtx-4090"]
    for command in ("estimate", "check"):
        code, out, err = run_cli(command, *SCENARIO, "--json")
        assert code in (0, 1), err
        data = json.loads(out)
        assert (data["price_date"], data["price_source"]) == (g["price_date"], g["price_source"]), command
        assert (data["cloud_date"], data["cloud_source"]) == (g["cloud_date"], g["cloud_source"]), command
    # no price: nothing dated (the catalog's date of a missing price is not shown as if it dated one)
    code, out, err = run_cli("estimate", "--model", "llama-3.1-8b", "--gpu", "a100-40gb-pcie", "--json")
    data = json.loads(out)
    assert data["purchase_usd"] is None and data["price_date"] is None and data["cloud_date"] is None
    code, out, err = run_cli("estimate", "--model", "llama-3.1-8b", "--gpu", "a100-40gb-pcie")
    assert "prices: " not in out


def test_sweep_rows_carry_the_dates_and_sources(gpus):
    code, out, err = run_cli("sweep", "--models", "llama-3.1-8b", "--gpu-ids", "rtx-4090,h100-sxm-80gb,a100-40gb-pcie",
                             "--methods", "lora")
    assert code == 0, err
    rows = pd.read_csv(io.StringIO(out)).set_index("gpu")
    by_id = gpus.set_index("id")
    for gpu in ("rtx-4090", "h100-sxm-80gb"):
        assert rows.loc[gpu, "price_date"] == by_id.loc[gpu, "price_date"]
        assert rows.loc[gpu, "price_source"] == by_id.loc[gpu, "price_source"]
        assert rows.loc[gpu, "cloud_date"] == by_id.loc[gpu, "cloud_date"]
    assert pd.isna(rows.loc["a100-40gb-pcie", "purchase_usd"]) and pd.isna(rows.loc["a100-40gb-pcie", "price_date"])
