"""Read back the runs that ``portfed supervised run CONFIG --out OUT`` stored under ``OUT/runs``.

Three tables, one line per stored run:

* ``--bmta``: its BMTA (best mean test accuracy over rounds, paper 004's metric, in %; the lowest mean
  for an error metric), which the config's table averages over seeds;
* ``--group-size G`` (FedAMP and HeurFedAMP runs): do the final message weights ξ
  (``RunTrace.message_weights``) show the client groups, as paper 004 reads them (§7, Fig. 3)?
  - the range of ξ off the diagonal and the median / largest self-weight ξ_ii;
  - per client ``i``, the *own-group excess*: its mean weight on the other members of its group minus
    its mean weight on the clients of the other groups (> 0 when ξ prefers the own group);
  - for FedAMP, the squared model distances that ξ implies.  Paper 004 eq. 5 with ``A(x) = 1 − e^{−x/σ}``
    gives ``ξ_ij = α A'(‖w_i − w_j‖²) = (α/σ) e^{−‖w_i − w_j‖²/σ}`` (j ≠ i), so
    ``‖w_i − w_j‖² = −σ ln(ξ_ij σ / α)``, with ``α`` of the round after the last and ``σ`` of the run's
    algorithm (``portfed.federation.make_algorithm``).
  Groups are blocks of ``G`` consecutive clients, the order in which the ``group_dominant`` partition
  (paper 004's practical non-IID) numbers them;
* ``--compare OTHER``: for the runs stored in both directories with the same row, algorithm, knobs and
  seed (e.g. a CPU and a GPU run of one config), both BMTAs and their difference.

    python examples/supervised_runs.py runs/sup_fedamp_cnn --bmta --group-size 4
    python examples/supervised_runs.py runs/sup_fedamp_cnn --compare runs/sup_fedamp_cnn_gpu

docs/reports/benchmarks.md quotes these outputs for ``configs/supervised/fedamp_practical_cnn.yaml``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from portfed.federation import make_algorithm
from portfed.supervised.metrics import RunTrace

KEY = ["row", "algorithm", "knobs", "seed"]  # what identifies a run of one config across output directories


def stored_runs(out: Path) -> list[tuple[dict, RunTrace]]:
    """Every stored run below ``out/runs``: its record (row, algorithm, name, params, seed) and its trace."""
    paths = sorted((out / "runs").rglob("*.json"))
    if not paths:
        raise SystemExit(f"no stored runs below {out / 'runs'}")
    runs = []
    for path in paths:
        record = json.loads(path.read_text())
        runs.append((record, RunTrace.from_dict(record.pop("trace"))))
    return runs


def own_group_excess(xi: np.ndarray, group_size: int) -> np.ndarray:
    """Per client ``i``: mean ξ_ij over the other members of its group minus mean ξ_ij over the other groups."""
    n = xi.shape[0]
    if group_size < 2 or n % group_size or n == group_size:
        raise ValueError(f"group_size={group_size!r} must be >= 2, divide the {n} clients and leave >= 2 groups")
    group = np.arange(n) // group_size
    excess = np.empty(n)
    for i in range(n):
        same = (group == group[i]) & (np.arange(n) != i)
        excess[i] = xi[i, same].mean() - xi[i, group != group[i]].mean()
    return excess


def implied_squared_distances(xi: np.ndarray, alpha: float, sigma: float) -> np.ndarray:
    """FedAMP's off-diagonal ``‖w_i − w_j‖² = −σ ln(ξ_ij σ / α)`` (paper 004 eq. 5 inverted), flattened."""
    off = xi[~np.eye(xi.shape[0], dtype=bool)]
    return -sigma * np.log(off * sigma / alpha)


def weight_table(out: Path, group_size: int) -> pd.DataFrame:
    """One line per stored FedAMP / HeurFedAMP run of ``out``: ξ's ranges and the own-group excess."""
    rows = []
    for record, trace in stored_runs(out):
        xi = trace.message_weights
        if xi is None:
            continue
        off = xi[~np.eye(xi.shape[0], dtype=bool)]
        excess = own_group_excess(xi, group_size)
        row = {"row": record["row"], "algorithm": record["algorithm"], "knobs": _knobs(record["params"]),
               "seed": record["seed"], "xi_off_min": off.min(), "xi_off_max": off.max(),
               "xi_self_median": float(np.median(np.diag(xi))), "xi_self_max": float(np.diag(xi).max()),
               "excess_max": excess.max(), "excess_positive": int((excess > 0).sum()),
               "sq_dist_min": np.nan, "sq_dist_max": np.nan}
        if record["name"] == "fedamp":
            spec = make_algorithm("fedamp", **record["params"])
            distances = implied_squared_distances(xi, spec.fedamp_alpha.at(trace.rounds[-1]), spec.attention_scale)
            row["sq_dist_min"], row["sq_dist_max"] = distances.min(), distances.max()
        rows.append(row)
    if not rows:
        raise SystemExit(f"no FedAMP / HeurFedAMP run below {out / 'runs'}")
    return pd.DataFrame(rows).sort_values(KEY, ignore_index=True)


def _knobs(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def bmta_table(out: Path) -> pd.DataFrame:
    """One line per stored run of ``out``: row, algorithm, knobs, seed and BMTA (accuracy in %, as the tables
    print it; an error metric as is)."""
    rows = [{"row": r["row"], "algorithm": r["algorithm"], "knobs": _knobs(r["params"]), "seed": r["seed"],
             "bmta": t.summary()["best"] * (100.0 if t.higher_is_better else 1.0)} for r, t in stored_runs(out)]
    return pd.DataFrame(rows).sort_values(KEY, ignore_index=True)


def bmta_differences(out: Path, other: Path) -> pd.DataFrame:
    """The runs stored in both ``out`` and ``other`` (same row, algorithm, knobs, seed): both BMTAs and
    ``out`` − ``other``."""
    both = bmta_table(out).merge(bmta_table(other), on=KEY, suffixes=("", "_other"))
    if both.empty:
        raise SystemExit(f"no run is stored in both {out} and {other}")
    return both.assign(difference=both["bmta"] - both["bmta_other"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the --out directory of `portfed supervised run`")
    parser.add_argument("--bmta", action="store_true", help="each run's BMTA")
    parser.add_argument("--group-size", type=int, help="FedAMP's ξ, groups of this many consecutive clients")
    parser.add_argument("--compare", type=Path, help="a second --out directory: BMTA differences of shared runs")
    args = parser.parse_args()
    if not (args.bmta or args.group_size or args.compare):
        parser.error("ask for at least one of --bmta, --group-size, --compare")
    tables = []
    if args.bmta:
        tables.append(bmta_table(args.out).to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    if args.group_size:
        tables.append(weight_table(args.out, args.group_size).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.compare is not None:
        diffs = bmta_differences(args.out, args.compare)
        tables.append(diffs.to_string(index=False, float_format=lambda v: f"{v:.2f}")
                      + f"\n{len(diffs)} runs in both; largest |difference| {diffs['difference'].abs().max():.2f}")
    with pd.option_context("display.width", 200, "display.max_columns", None):
        print("\n\n".join(tables))


if __name__ == "__main__":
    main()
