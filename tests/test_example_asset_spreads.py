"""examples/asset_spreads.py: the spreads it reports from a run's weights.csv, and on fresh networks."""

from __future__ import annotations

from pathlib import Path

import asset_spreads  # examples/asset_spreads.py: tests/conftest.py puts examples/ on the path
import numpy as np
import pandas as pd
import pytest


def test_run_spreads_read_each_party_from_weights_csv(tmp_path: Path) -> None:
    run = tmp_path / "study" / "base" / "fedavg"
    run.mkdir(parents=True)
    rows = [
        # party 0 holds its two assets alike (spread 0), party 1 one of them (spread 1), party 2 only cash
        {"party": 0, "date": "2019-01-02", "value": 1.0, "turnover": 0, "cost": 0, "cash": 0.2, "A": 0.4, "B": 0.4},
        {"party": 1, "date": "2019-01-02", "value": 1.0, "turnover": 0, "cost": 0, "cash": 0.5, "A": 0.5, "B": 0.0},
        {"party": 2, "date": "2019-01-02", "value": 1.0, "turnover": 0, "cost": 0, "cash": 1.0, "A": 0.0, "B": 0.0},
    ]
    pd.DataFrame(rows).to_csv(run / "weights.csv", index=False)
    table = asset_spreads.run_spreads(tmp_path / "study")
    row = table.set_index("run").loc[str(Path("base") / "fedavg")]
    assert row["spread_mean"] == pytest.approx(0.5) and row["spread_max"] == pytest.approx(1.0)
    assert row["mean_cash"] == pytest.approx((0.2 + 0.5 + 1.0) / 3) and row["invested_parties"] == 2


def test_fresh_recurrent_eiies_spread_less_on_raw_price_ratios_than_on_centred_ones() -> None:
    table = asset_spreads.initial_spreads("rnn", assets=9, seeds=[0])
    spread = table.set_index("input_scale")["asset_spread"]
    assert np.isfinite(spread).all() and spread["raw"] < 0.01 < spread["centred"]
