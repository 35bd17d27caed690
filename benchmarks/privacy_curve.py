"""The privacy–utility curve's table and figure from the cells of benchmarks/privacy_curve.sh.

Reads every cell ``OUT/<mode>_eps<ε>/`` and ``OUT/none/`` (``portfed compare --seeds`` directories) and writes

* ``OUT/curve.csv`` — one row per cell, algorithm and seed: ``mode`` (``central``, ``local``, ``none``), the
  ``target_epsilon`` the noise was calibrated to (``inf`` without DP), the ``epsilon`` the run reports
  (Table 1's party-level ε: the run's in central mode, the most exposed party's in local mode), and the
  held-out ``annualized_return``, ``fapv`` and ``sharpe`` (means over parties, Table 1);
* ``OUT/curve.png`` — held-out annualized return against ε (log scale, ∞ at the right), mean over seeds
  with the seeds' standard deviation as error bars, one line per algorithm and mode; local training (which
  uses nothing the server sends) as a horizontal band;
* ``OUT/curve.md`` — the table of docs/privacy.md: per ε the noise multiplier z (the cell's Table 1 note), the
  annualized return in % of each cell's algorithms as the mean over seeds with its Student t 95 % interval
  (:func:`portfed.evaluation.intervals.t_interval`) and the Fed+ variant minus FedAvg paired over the seeds
  both finished (:func:`~portfed.evaluation.intervals.paired_interval`); the ε = ∞ row from the non-private cell.

Usage: ``python benchmarks/privacy_curve.py OUT``.
"""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from portfed.evaluation.intervals import paired_interval, t_interval  # noqa: E402

CELL = re.compile(r"^(central|local)_eps([0-9.]+)$")
METRICS = {"annualized_return": "Annualized return (fraction)", "fapv": "fAPV (× initial value)",
           "sharpe": "Sharpe ratio (annualized)"}
#: Where ε = ∞ is drawn on the log axis (a factor 2 past the largest finite ε).
INFINITY_FACTOR = 2.0
#: The table's pairs per mode: (FedAvg, the Fed+ variant the script runs beside it).
PAIRS = {"central": ("fedavg", "fedavg+"), "local": ("fedavg", "fedcomed+")}
NAMES = {"fedavg": "FedAvg", "fedavg+": "FedAvg+", "fedcomed+": "FedCoMed+"}
NOISE = re.compile(r"noise multiplier z = ([0-9.eE+-]+)")


def cell_rows(cell: Path, mode: str, target: float) -> list[dict[str, object]]:
    """The rows of one cell: every algorithm it compared, every seed it finished."""
    rows = []
    for seed_dir in sorted(cell.glob("seed_*")):
        table_path = seed_dir / "table1.csv"
        if not table_path.is_file():
            continue
        algorithms = yaml.safe_load((seed_dir / "config.yaml").read_text())["federation"]["algorithms"]
        table = pd.read_csv(table_path, index_col="Strategy")
        eps_column = next((c for c in table.columns if c.endswith("(party-level)")), None)
        for algorithm in algorithms:
            epsilon = math.inf if eps_column is None else float(table.at[algorithm, eps_column])
            rows.append({"mode": mode, "target_epsilon": target, "algorithm": algorithm,
                         "seed": int(seed_dir.name.removeprefix("seed_")), "epsilon": epsilon,
                         **{key: float(table.at[algorithm, column]) for key, column in METRICS.items()}})
    return rows


def collect(out: Path) -> pd.DataFrame:
    """Every finished cell's rows (module docstring)."""
    rows: list[dict[str, object]] = []
    if (out / "none").is_dir():
        rows += cell_rows(out / "none", "none", math.inf)
    for cell in sorted(out.iterdir()):
        match = CELL.match(cell.name)
        if match and cell.is_dir():
            rows += cell_rows(cell, match[1], float(match[2]))
    if not rows:
        raise SystemExit(f"no finished cell under {out}")
    return pd.DataFrame(rows)


def figure(frame: pd.DataFrame):
    """Held-out annualized return against ε (module docstring)."""
    finite = frame.loc[frame["target_epsilon"] < math.inf, "target_epsilon"]
    right = (finite.max() if len(finite) else 1.0) * INFINITY_FACTOR
    fig, ax = plt.subplots(figsize=(7, 4.5))
    plain = frame[frame["mode"] == "none"]
    local = plain[plain["algorithm"] == "local"]["annualized_return"] * 100
    if len(local):
        ax.axhspan(local.mean() - local.std(ddof=0), local.mean() + local.std(ddof=0), color="grey", alpha=0.2)
        ax.axhline(local.mean(), color="grey", label="local training (no sharing)")
    for (mode, algorithm), group in frame[frame["mode"] != "none"].groupby(["mode", "algorithm"], sort=True):
        at_infinity = plain[plain["algorithm"] == algorithm].assign(target_epsilon=right)
        points = pd.concat([group, at_infinity]).groupby("target_epsilon")["annualized_return"]
        ax.errorbar(points.mean().index, points.mean() * 100, yerr=points.std(ddof=0).fillna(0) * 100, marker="o",
                    capsize=3, label=f"{algorithm} ({mode} DP)")
    ax.set_xscale("log", base=2)
    ticks = sorted(set(finite)) + [right]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks[:-1]] + ["∞"])
    ax.set_xlabel("ε at δ (party-level; ∞ = no DP)")
    ax.set_ylabel("Held-out annualized return (%)")
    ax.set_title("Privacy–utility: mean over seeds ± std")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _returns(frame: pd.DataFrame, mode: str, target: float, algorithm: str) -> pd.Series:
    """Annualized return in % by seed of one cell's algorithm (the non-private cell for ``target`` ∞)."""
    cell = frame[(frame["mode"] == ("none" if target == math.inf else mode)) & (frame["algorithm"] == algorithm)]
    if target != math.inf:
        cell = cell[cell["target_epsilon"] == target]
    return cell.set_index("seed")["annualized_return"].sort_index() * 100


def _mean(values: pd.Series) -> str:
    if len(values) < 2:
        return "—"
    iv = t_interval(values.to_numpy())
    return f"{iv.mean:.2f} [{iv.low:.2f}, {iv.high:.2f}]".replace("-", "−")


def _difference(variant: pd.Series, fedavg: pd.Series) -> str:
    seeds = variant.index.intersection(fedavg.index)
    if len(seeds) < 2:
        return "—"
    iv = paired_interval(variant[seeds].to_numpy(), fedavg[seeds].to_numpy())
    return f"{iv.mean:+.2f} [{iv.low:.2f}, {iv.high:.2f}]".replace("-", "−")


def table(frame: pd.DataFrame, noise: dict[float, str]) -> str:
    """The markdown table of ``OUT/curve.md`` (module docstring); ``noise``: ε → z as its cell's note prints it."""
    header = ["ε", "z"]
    for mode, (fedavg, variant) in PAIRS.items():
        header += [f"{mode}: {NAMES[fedavg]}", f"{mode}: {NAMES[variant]}", f"{NAMES[variant]} − {NAMES[fedavg]}"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    targets = sorted(set(frame.loc[frame["mode"] != "none", "target_epsilon"])) + [math.inf]
    for target in targets:
        cells = [f"{target:g}" if target != math.inf else "∞", noise.get(target, "0" if target == math.inf else "—")]
        for mode, (fedavg, variant) in PAIRS.items():
            base, other = _returns(frame, mode, target, fedavg), _returns(frame, mode, target, variant)
            cells += [_mean(base), _mean(other), _difference(other, base)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def noise_multipliers(out: Path) -> dict[float, str]:
    """ε → the z its cells were calibrated to (central and local share it), as a finished seed's Table 1 note prints it."""
    found: dict[float, str] = {}
    for cell in sorted(out.iterdir()):
        match = CELL.match(cell.name)
        notes = sorted(cell.glob("seed_*/table1.md")) if match and cell.is_dir() else []
        hit = next((m for note in notes if (m := NOISE.search(note.read_text()))), None)
        if hit is not None:
            found.setdefault(float(match[2]), hit[1])  # type: ignore[index]
    return found


def main(out: Path) -> None:
    frame = collect(out)
    tmp = out / "curve.csv.tmp"
    frame.to_csv(tmp, index=False)
    os.replace(tmp, out / "curve.csv")
    fig = figure(frame)
    tmp_png = out / "curve.tmp.png"
    fig.savefig(tmp_png, dpi=120)
    os.replace(tmp_png, out / "curve.png")
    tmp_md = out / "curve.md.tmp"
    tmp_md.write_text(table(frame, noise_multipliers(out)))
    os.replace(tmp_md, out / "curve.md")
    print(frame.groupby(["mode", "algorithm", "target_epsilon"])[["epsilon", "annualized_return"]].mean())


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python benchmarks/privacy_curve.py OUT")
    main(Path(sys.argv[1]))
