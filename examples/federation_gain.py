"""What a federated algorithm gains over local training, party by party, in each cell of a study.

Paper 000's claim 6 reads: "compared with single-party training (no-fusion), the maximum improvement in
annualized return are 4.06%, 12.57% and 35.50%, and in Sharpe ratio are 0.19, 0.63 and 1.52 when K = 5,
25 and 50" (FedAvg+, §8.2).  A study that varies the number of parties (``configs/study_parties_paper.yaml``)
runs both arms on the same parties in every cell; this script reads each run's ``party_metrics.csv``
(held-out year, one row per party) and prints, per cell:

* each arm's mean annualized return and Sharpe over its parties and its parties holding ≥ 99 % cash;
* the gain — the algorithm's return minus local training's, party by party — as its mean, and as its
  maximum over parties, the paper's "maximum improvement" (also for the Sharpe ratio).  A maximum over
  K parties grows with K even where the federation changes nothing: it is the largest of K noisy
  differences, so the mean is printed beside it;
* the mean gain on the first ``n`` parties, ``n`` the smallest cell's party count: party k's universe,
  data, generator and initial model depend on the seed and k only (``portfed.experiment.party.build``), so
  these are the same parties in every cell of one seed — local training gives them the same results —
  federated in larger and larger federations.

    python examples/federation_gain.py runs/study_parties_paper            # fedavg+ against local
    python examples/federation_gain.py runs/study_collapse_paper --algorithm fedavg
    python examples/federation_gain.py runs/paper_sp500 --algorithm fedavg  # one comparison: one row

A comparison directory (``portfed compare --out``: ``<root>/<algorithm>/``) is read as one cell, ``compare``.

docs/reports/reproduction_earlier.md §7 quotes its output for claim 6.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

CASH = 0.99  # a party holding at least this cash weight on average is counted as in cash


def _metrics(run: Path, algorithm: str) -> pd.DataFrame:
    frame = pd.read_csv(run / "party_metrics.csv")
    return frame[frame["strategy"] == algorithm].set_index("party").sort_index()


def federation_gains(root: Path, algorithm: str = "fedavg+", control: str = "local") -> pd.DataFrame:
    """One row per cell and seed of the study in ``root`` (``runs/<cell>/seed<s>/<algorithm>/``) where both
    arms finished."""
    pairs = []
    cells = sorted(root.glob("runs/*/seed*")) or [root]  # a study's cells, or one comparison
    for seed_dir in cells:
        if (seed_dir / algorithm / "party_metrics.csv").exists() and (seed_dir / control / "party_metrics.csv").exists():
            pairs.append((seed_dir, _metrics(seed_dir / control, control), _metrics(seed_dir / algorithm, algorithm)))
    if not pairs:
        raise SystemExit(f"no cell below {root} has finished runs of both {control!r} and {algorithm!r}")
    for seed_dir, local, federated in pairs:
        if not local.index.equals(federated.index):
            raise SystemExit(f"{seed_dir}: {control} and {algorithm} report different parties")
    common = min(len(local) for _, local, _ in pairs)
    rows = []
    for seed_dir, local, federated in pairs:
        gain = federated["annualized_return"] - local["annualized_return"]
        sharpe_gain = federated["sharpe"] - local["sharpe"]
        rows.append({
            "cell": seed_dir.parent.name if seed_dir != root else "compare",
            "seed": seed_dir.name.removeprefix("seed") if seed_dir != root else "", "parties": len(local),
            f"{control}_return": local["annualized_return"].mean(), f"{control}_sharpe": local["sharpe"].mean(),
            f"{control}_in_cash": int((local["mean_cash"] >= CASH).sum()),
            f"{algorithm}_return": federated["annualized_return"].mean(),
            f"{algorithm}_sharpe": federated["sharpe"].mean(),
            f"{algorithm}_in_cash": int((federated["mean_cash"] >= CASH).sum()),
            "gain_mean": gain.mean(), "gain_median": gain.median(), "gain_max": gain.max(),
            "sharpe_gain_max": sharpe_gain.max(),
            f"gain_mean_first_{common}": gain.iloc[:common].mean(),
        })
    return pd.DataFrame(rows).sort_values(["parties", "seed"], ignore_index=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="a study directory (portfed study collapse --out)")
    parser.add_argument("--algorithm", default="fedavg+", help="the federated arm (default fedavg+)")
    parser.add_argument("--control", default="local", help="the arm it is compared with (default local)")
    args = parser.parse_args()
    table = federation_gains(args.root, args.algorithm, args.control)
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(table.to_string(index=False, float_format=lambda x: f"{x:.4f}"))


if __name__ == "__main__":
    main()
