"""A cross-market federation: parties in three markets, each backtested on its own held-out final days."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import yaml

from portfed.data import load_bundled
from portfed.experiment.config import parse_config
from portfed.experiment.studies import compare

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())
MARKETS = [{"source": "nyse_o", "test_days": 30}, {"source": "tse", "test_days": 40},
           {"source": "msci", "test_days": 30, "n_assets": 2}]


def _raw() -> dict:
    raw = copy.deepcopy(TINY)
    raw["parties"].update({"count": 6, "markets": MARKETS, "generators": [None]})
    raw["parties"].pop("generator_params")
    raw["federation"].update({"algorithms": ["fedavg", "fedavg+"], "rounds": 3})
    raw["diagnostics"]["interpolation_rounds"] = [2]
    return raw


def test_three_markets_run_end_to_end_each_party_on_its_own_held_out_period(tmp_path: Path) -> None:
    config = parse_config(_raw())
    assert sorted({m for _, m in config.party_sizes()}) == [2, 3]  # universes of 3 and 2 assets: one engine
    result = compare(config, tmp_path, progress=False)
    values = pd.read_csv(tmp_path / "fedavg" / "portfolio_values.csv", index_col="date", parse_dates=True)
    for k in range(6):
        market = MARKETS[k % 3]
        dates = load_bundled(market["source"]).dates
        path = values[f"fedavg/party_{k}"].dropna()
        assert path.index[0] == dates[-market["test_days"] - 1]  # the last training close
        assert path.index[-1] == dates[-1] and len(path) == market["test_days"] + 1
    metrics = result.party_metrics
    assert (metrics.groupby("strategy").size() == 6).all()
    assert (tmp_path / "fig3a_portfolio_values.png").stat().st_size > 0
