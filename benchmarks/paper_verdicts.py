"""The verdict table of docs/reports/reproduction.md from a paper-scale ``portfed compare --seeds`` directory.

Paper 000 (§8.2, Table 1, Fig. 1 and 3) makes five claims a comparison of the eight algorithms decides:

1. FedAvg, FedProx, RFA and CoMed suffer training collapse (Fig. 1b);
2. the collapse comes with large spikes of the parameter change at aggregation (Fig. 1a);
3. the Fed+ variants do not collapse (Fig. 3b);
4. Fed+ beats those four by 26.01 points of annualized return and 1.26 of Sharpe on 2019 (Table 1) — the
   mean of the three Fed+ rows minus the mean of the four baselines' rows: (32.93 + 32.23 + 32.47)/3 −
   (0.99 − 1.46 + 4.90 + 21.71)/4 = 26.01, and (1.67 + 1.64 + 1.65)/3 − (0.11 − 0.02 + 0.30 + 1.17)/4 = 1.26;
5. for the four, "a full step towards averaging (or using the median for) all parties, i.e. λ = 1, degrades
   local performance" (Fig. 1c, §2): a party's own model (λ = 0) does better on its own data than the
   aggregate (λ = 1); and "for FedAvg, RFA and FedProx, performance of the subsequent aggregation is worse than
   the previous value (dashed line)".

Claims 1–3 are read from the collapse criteria every comparison applies (``seed_metrics.csv``, each seed's
``collapse.csv``; the verdict is the noise-aware criterion's, the first criterion's count beside it); claim 4
as the paper computes it, per seed, with the Student t 95 % interval paired over seeds
(:mod:`portfed.evaluation.intervals`): "no difference" when it holds 0; claim 5 from each algorithm's Fig. 1c
rows (``interpolation.csv``: the mean daily log return on the party's last training year along
``(1 − λ) w_k + λ r_k``, at the config's ``diagnostics.interpolation_rounds``) — per seed the mean over parties
and rounds of ``log return(λ = 0) − log return(λ = 1)`` (5a) and of ``log return(λ = 1) −`` the previous
aggregate's (5b), in basis points a day, with the Student t interval over seeds.  Run times are the sum over
seeds of each algorithm's ``elapsed_seconds`` (``run.json``, every resumed leg included).  With one seed
finished, the tables give its numbers and no verdict.

Usage: ``python benchmarks/paper_verdicts.py COMPARISON`` (e.g. ``runs/reproduce/paper_sp500``, step 3 of
``benchmarks/reproduce_paper.sh``): prints the two tables as markdown and writes them to
``COMPARISON/verdicts.md``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from portfed.evaluation.intervals import Interval, paired_interval, t_interval, verdict

#: Paper 000's Table 1 (S&P 500 technology stocks, 2019): annualized return (%), Sharpe.
PAPER: dict[str, tuple[float, float]] = {
    "fedavg": (0.99, 0.11), "fedprox": (-1.46, -0.02), "rfa": (4.90, 0.30), "comed": (21.71, 1.17),
    "fedavg+": (32.93, 1.67), "fedgeomed+": (32.23, 1.64), "fedcomed+": (32.47, 1.65),
}
BASELINES = ("fedavg", "fedprox", "rfa", "comed")
#: Claim 5b's algorithms: "for FedAvg, RFA and FedProx" (paper 000 §2, Fig. 1c).
BELOW_DASHED = ("fedavg", "rfa", "fedprox")
FED_PLUS = ("fedavg+", "fedgeomed+", "fedcomed+")
#: The verdict cell of every claim while fewer than two seeds have finished.
NO_VERDICT = "— (one seed: no verdict)"
#: Claim 4's gaps as the paper's Table 1 gives them (module docstring).
PAPER_GAP = {"annualized_return": 26.01, "sharpe": 1.26}


def _cell(interval: Interval, scale: float = 1.0, digits: int = 2) -> str:
    if interval.n < 2:
        return f"{interval.mean * scale:.{digits}f} (one seed)"
    return f"{interval.mean * scale:.{digits}f} [{interval.low * scale:.{digits}f}, {interval.high * scale:.{digits}f}]"


def _flagged(per_seed: pd.DataFrame, algorithm: str, column: str) -> tuple[int, int]:
    """How many of the seeds of ``algorithm`` the criterion ``column`` flags, and of how many."""
    flags = per_seed.loc[per_seed["strategy"] == algorithm, column].dropna().astype(bool)
    return int(flags.sum()), int(flags.size)


def _spike_collapses(comparison: Path, seeds: list[int], algorithms: tuple[str, ...]) -> tuple[int, int]:
    """Runs of ``algorithms`` the noise-aware criterion calls a drop after an aggregation spike, and runs read."""
    spikes = runs = 0
    for seed in seeds:
        table = pd.read_csv(comparison / f"seed_{seed}" / "collapse.csv", keep_default_na=False)
        rows = table[table["algorithm"].isin(algorithms)]
        runs += len(rows)
        spikes += int((rows["noise_kind"] == "spike").sum())
    return spikes, runs


def _gap(per_seed: pd.DataFrame, metric: str) -> Interval:
    """Claim 4's statistic per seed (mean of the Fed+ rows minus mean of the baselines'), paired over seeds."""
    wide = per_seed.pivot(index="seed", columns="strategy", values=metric)
    return paired_interval(wide[list(FED_PLUS)].mean(axis=1).to_numpy(), wide[list(BASELINES)].mean(axis=1).to_numpy())


def _collapse_verdict(flagged: dict[str, tuple[int, int]], expect_collapse: bool) -> str:
    hits = {a for a, (n, _) in flagged.items() if n}
    every = {a for a, (n, of) in flagged.items() if of and n == of}
    if expect_collapse:
        if every == set(flagged):
            return "**reproduced**"
        return "**not reproduced**" if not hits else f"**partly**: {', '.join(sorted(hits))}"
    return "**reproduced**" if not hits else f"**not reproduced**: {', '.join(sorted(hits))} flagged"


def _interpolation_gaps(comparison: Path, seeds: list[int], algorithm: str) -> tuple[Interval, Interval] | None:
    """Claim 5's two statistics of ``algorithm`` over ``seeds`` (module docstring), in basis points a day, or
    ``None`` where a seed has no Fig. 1c rows (``diagnostics.interpolation_rounds`` empty)."""
    own_minus_aggregate, aggregate_minus_dashed = [], []
    for seed in seeds:
        path = comparison / f"seed_{seed}" / algorithm / "interpolation.csv"
        rows = pd.read_csv(path) if path.is_file() else pd.DataFrame()
        if rows.empty:
            return None
        own, aggregate = rows[np.isclose(rows["lam"], 0.0)], rows[np.isclose(rows["lam"], 1.0)]
        keyed = own.set_index(["round", "party"]).join(aggregate.set_index(["round", "party"]), rsuffix="_aggregate")
        own_minus_aggregate.append(1e4 * float((keyed["log_return"] - keyed["log_return_aggregate"]).mean()))
        aggregate_minus_dashed.append(1e4 * float((keyed["log_return_aggregate"]
                                                   - keyed["previous_global_log_return"]).mean()))
    return t_interval(np.array(own_minus_aggregate)), t_interval(np.array(aggregate_minus_dashed))


def _signed_verdict(cells: dict[str, Interval], sign: float) -> str:
    """Reproduced when every interval lies on the claimed side of 0 (``sign``: +1 above, −1 below)."""
    held = {a for a, i in cells.items() if i.n >= 2 and (i.low > 0 if sign > 0 else i.high < 0)}
    reversed_ = {a for a, i in cells.items() if i.n >= 2 and (i.high < 0 if sign > 0 else i.low > 0)}
    if held == set(cells):
        return "**reproduced**"
    if not held:
        return "**not reproduced**" + (f" (reversed: {', '.join(sorted(reversed_))})" if reversed_ else " (no difference)")
    return f"**partly**: {', '.join(sorted(held))}"


def run_hours(comparison: Path, seeds: list[int], algorithm: str) -> float | None:
    """Hours of training of ``algorithm`` summed over ``seeds`` (``None`` when a record lacks the time)."""
    total = 0.0
    for seed in seeds:
        record = json.loads((comparison / f"seed_{seed}" / algorithm / "run.json").read_text())
        if "elapsed_seconds" not in record:
            return None
        total += float(record["elapsed_seconds"])
    return total / 3600.0


def table1_markdown(comparison: Path, per_seed: pd.DataFrame, seeds: list[int]) -> str:
    """Table 1 side by side: the paper's row, ours as mean [95 % interval] over seeds, collapse counts, hours."""
    lines = ["| algorithm | paper: return (%) | paper: Sharpe | ours: return (%) | ours: Sharpe | "
             "collapsed seeds (noise-aware / first) | training hours (all seeds) |", "|---|---:|---:|---:|---:|---|---:|"]
    for algorithm in dict.fromkeys(per_seed["strategy"]):
        at = per_seed[per_seed["strategy"] == algorithm]
        paper = PAPER.get(algorithm)
        noise, first = _flagged(per_seed, algorithm, "noise_collapsed"), _flagged(per_seed, algorithm, "collapsed")
        trained = (comparison / f"seed_{seeds[0]}" / algorithm / "run.json").is_file()
        hours = run_hours(comparison, seeds, algorithm) if trained else None
        cells = [algorithm, f"{paper[0]:.2f}" if paper else "—", f"{paper[1]:.2f}" if paper else "—",
                 _cell(t_interval(at["annualized_return"].to_numpy()), 100.0),
                 _cell(t_interval(at["sharpe"].to_numpy())),
                 f"{noise[0]} / {first[0]} of {noise[1]}" if noise[1] else "—",
                 "—" if hours is None else f"{hours:.1f}"]
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


def claims_markdown(comparison: Path, per_seed: pd.DataFrame, seeds: list[int]) -> str:
    """The five claims' rows (module docstring)."""
    base = {a: _flagged(per_seed, a, "noise_collapsed") for a in BASELINES}
    plus = {a: _flagged(per_seed, a, "noise_collapsed") for a in FED_PLUS}
    first = {a: _flagged(per_seed, a, "collapsed")[0] for a in (*BASELINES, *FED_PLUS)}
    spikes, runs = _spike_collapses(comparison, seeds, BASELINES)
    n = len(seeds)
    counts = ", ".join(f"{a} {base[a][0]}/{n}" for a in BASELINES)
    rows = [
        ("1", "FedAvg, FedProx, RFA, CoMed collapse in training (Fig. 1b)", "all four",
         f"seeds flagged (noise-aware): {counts}; first criterion: "
         + ", ".join(f"{a} {first[a]}" for a in BASELINES), _collapse_verdict(base, True)),
        ("2", "the collapse comes with aggregation spikes (Fig. 1a)", "spike, then drop",
         f"{spikes} of {runs} baseline runs flagged as a drop after a spike",
         "**reproduced**" if runs and spikes == runs else ("**not reproduced**" if not spikes else "**partly**")),
        ("3", "the Fed+ variants do not collapse (Fig. 3b)", "none",
         ", ".join(f"{a} {plus[a][0]}/{n}" for a in FED_PLUS), _collapse_verdict(plus, False)),
    ]
    for metric, label, scale in (("annualized_return", "points of return", 100.0), ("sharpe", "of Sharpe", 1.0)):
        gap = _gap(per_seed, metric)
        said = verdict(gap, "Fed+ ahead", "Fed+ behind")
        paper_held = gap.n >= 2 and gap.holds(PAPER_GAP[metric] / scale)
        word = ("**reproduced**" if paper_held else "**direction reproduced, size not**") if said == "Fed+ ahead" \
            else ("**not reproduced (reversed)**" if said == "Fed+ behind" else f"**not reproduced** ({said})")
        rows.append(("4", f"Fed+ − the four baselines, {label} (Table 1)", f"{PAPER_GAP[metric]:+.2f}",
                     _cell(gap, scale), word))
    gaps = {a: _interpolation_gaps(comparison, seeds, a) for a in BASELINES}
    if any(g is None for g in gaps.values()):
        rows.append(("5", "the aggregate does worse on a party's own data than its own model (Fig. 1c)", "yes",
                     "not measured: no Fig. 1c rows (diagnostics.interpolation_rounds is empty)", "—"))
    else:
        own = {a: g[0] for a, g in gaps.items() if g is not None}
        dashed = {a: g[1] for a, g in gaps.items() if g is not None and a in BELOW_DASHED}
        rows.append(("5a", "own model (λ = 0) minus the aggregate (λ = 1) on the party's own data, bp a day (Fig. 1c)",
                     "> 0 for all four", "; ".join(f"{a} {_cell(i)}" for a, i in own.items()),
                     _signed_verdict(own, +1.0)))
        rows.append(("5b", "the aggregate (λ = 1) minus the previous aggregate (dashed line), bp a day (Fig. 1c)",
                     "< 0 for FedAvg, RFA, FedProx", "; ".join(f"{a} {_cell(i)}" for a, i in dashed.items()),
                     _signed_verdict(dashed, -1.0)))
    if n < 2:  # a verdict rests on an interval over seeds: with one seed, the numbers only
        rows = [(*row[:-1], NO_VERDICT) for row in rows]
    ours = "one seed" if n == 1 else f"{n} seeds: mean [95 % interval]"
    lines = [f"| # | claim of paper 000 | paper | ours ({ours}) | verdict |", "|---|---|---|---|---|"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python benchmarks/paper_verdicts.py COMPARISON", file=sys.stderr)
        return 2
    comparison = Path(argv[0])
    path = comparison / "seed_metrics.csv"
    if not path.is_file():
        print(f"{comparison} has no seed_metrics.csv: not a finished `portfed compare --seeds` directory", file=sys.stderr)
        return 1
    per_seed = pd.read_csv(path)
    seeds = sorted(int(s) for s in np.unique(per_seed["seed"]))
    missing = [a for a in (*BASELINES, *FED_PLUS) if a not in set(per_seed["strategy"])]
    if missing:
        print(f"{comparison} lacks {', '.join(missing)}: the claims need all eight algorithms", file=sys.stderr)
        return 1
    text = (f"Seeds {', '.join(map(str, seeds))}; Student t 95 % intervals over seeds (paired for differences).\n\n"
            + claims_markdown(comparison, per_seed, seeds) + "\n\n" + table1_markdown(comparison, per_seed, seeds) + "\n")
    temporary = comparison / ".verdicts.md.tmp"
    temporary.write_text(text)
    temporary.replace(comparison / "verdicts.md")  # never a half-written table
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
