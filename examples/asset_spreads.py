"""How much trained (or freshly initialised) EIIE policies tell their risky assets apart.

``asset_spread`` (:func:`portfed.evaluation.asset_spread`) is the mean over days of the risky weights'
std / mean: 0 when every risky asset gets the same weight, √(m − 1) when one takes all the risky
weight.  New runs carry it in ``party_metrics.csv``; this script reads it back from any run's
``weights.csv`` (runs recorded before the column existed included), and measures it for freshly
initialised networks:

    python examples/asset_spreads.py runs/study_collapse_paper          # every */weights.csv below it
    python examples/asset_spreads.py --initial --network rnn            # seeds 0–2, raw and centred inputs

``--initial`` evaluates ``build_network(config, seed)`` on the S&P 500 set that skfolio ships (its first
``--assets`` tickers, every 50th decision day, the previous portfolio all cash), for the raw and the
centred input scale.  docs/reports/reproduction_earlier.md §7 quotes both outputs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from portfed.agents.config import AgentConfig
from portfed.agents.market import market_tensors
from portfed.agents.networks import build_network
from portfed.data.bundled import load_bundled
from portfed.evaluation import asset_spread

TRADE_COLUMNS = ["party", "date", "value", "turnover", "cost"]


def run_spreads(root: Path) -> pd.DataFrame:
    """Per ``weights.csv`` below ``root``: the parties' asset spreads (mean, median, max), mean cash weight
    and the number of parties holding less than 99 % cash on average."""
    rows = []
    for path in sorted(root.rglob("weights.csv")):
        frame = pd.read_csv(path)
        spreads, cash = [], []
        for _, held in frame.groupby("party"):
            weights = held.drop(columns=TRADE_COLUMNS).dropna(axis=1, how="all").to_numpy()
            spreads.append(asset_spread(weights))
            cash.append(weights[:, 0].mean())
        spreads_array, cash_array = np.array(spreads), np.array(cash)
        finite = spreads_array[np.isfinite(spreads_array)]
        rows.append({"run": str(path.parent.relative_to(root)),
                     "spread_mean": finite.mean() if finite.size else np.nan,
                     "spread_median": np.median(finite) if finite.size else np.nan,
                     "spread_max": finite.max() if finite.size else np.nan,
                     "mean_cash": cash_array.mean(), "invested_parties": int((cash_array < 0.99).sum())})
    if not rows:
        raise SystemExit(f"no weights.csv below {root}")
    return pd.DataFrame(rows)


def initial_spreads(network: str, assets: int, seeds: list[int]) -> pd.DataFrame:
    """The asset spread of freshly initialised EIIEs on the bundled S&P 500 windows, raw and centred inputs."""
    panel = load_bundled("skfolio_sp500")
    panel = panel.select(list(panel.tickers[:assets]))
    rows = []
    for scale in ("raw", "centred"):
        config = AgentConfig(network=network, window=30, batch_size=50, input_scale=scale)
        market = market_tensors(panel, config)
        windows = market.windows[torch.arange(0, market.n_days, 50)]
        previous = torch.zeros(windows.shape[0], windows.shape[2])
        for seed in seeds:
            with torch.no_grad():
                weights = build_network(config, seed)(windows, previous).numpy()
            rows.append({"input_scale": scale, "seed": seed, "asset_spread": asset_spread(weights),
                         "mean_cash": float(weights[:, 0].mean())})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", nargs="?", type=Path, help="a run or study directory")
    parser.add_argument("--initial", action="store_true", help="freshly initialised networks instead")
    parser.add_argument("--network", default="rnn", choices=["cnn", "rnn", "lstm"])
    parser.add_argument("--assets", type=int, default=9)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    if args.initial == (args.root is not None):
        parser.error("give a run directory or --initial")
    table = initial_spreads(args.network, args.assets, args.seeds) if args.initial else run_spreads(args.root)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3g}"))


if __name__ == "__main__":
    main()
