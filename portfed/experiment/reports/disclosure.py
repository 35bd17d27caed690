"""What of a party's held-out evaluation leaves it: ``evaluation.disclosure`` (issue 49, "Honest limits").

* ``per_party`` (the default): every backtest leaves its party — the metrics, the daily portfolio
  values, the weights held and the Fig. 1c rows — and the comparison directory publishes them
  (``party_metrics.csv``, each sub-run's ``weights.csv`` and ``portfolio_values.csv``, Table 1's spreads).
* ``averaged``: a party's evaluation leaves it as its **scalar metrics** only — one row per algorithm
  and baseline: :data:`~portfed.evaluation.metrics.SUMMARY_METRICS`, ``mean_cash``, ``asset_spread``,
  ``failed`` and the benchmark-relative metrics (computed where the party's value paths are, beside the
  baselines on its universe) — and the comparison directory publishes only their **mean over parties**:
  Table 1 without the std columns (:func:`averaged_table`), ``mean_metrics.csv`` (:func:`mean_metrics`)
  and the collapse verdicts, whose counts ("all cash: 2 parties") are aggregates but name no party.

For a strategy ``s`` and a metric ``m`` the published value is ``m̄_s = (1/|T_s|) Σ_{k ∈ T_s} m_{s,k}``
over the parties ``T_s`` whose backtest traded (a failed backtest has NaN metrics and is counted in
``failed``) — exactly Table 1's mean of a ``per_party`` run of the same config and seed.

**Who still sees what.**  The evaluator — the simulation in-process, the ServerApp on a plain Flower
deployment — receives each party's scalar row: far less than its holdings, but per party, and only what
is published is averaged.  On a Flower deployment with secure aggregation (``--secure``) the rows never
leave the parties: each party's evaluation is a SecAgg+ round (:mod:`portfed.flower.secure_metrics`)
and the server learns only sums over parties, which it reads as a :class:`SummedEvaluation` — the same
means, counts and verdicts, within the protocol's quantisation.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from portfed.evaluation.benchmark import BENCHMARK_COLUMN
from portfed.evaluation.tables import qualified
from portfed.experiment.config import FederatedConfig

PER_PARTY, AVERAGED = "per_party", "averaged"
#: The file of the party means of every scalar metric (the averaged counterpart of ``party_metrics.csv``).
MEANS_FILE = "mean_metrics.csv"
#: The sentence Table 1's note and the tearsheet carry in averaged mode.
WITHHELD = ("Evaluation disclosure: averaged — each party sent only its scalar held-out metrics and this table "
            "shows their mean over parties; per-party metrics, spreads, portfolio values, daily weights and "
            "Fig. 1c rows were withheld.")
#: What an averaged comparison does not produce, and why (logged, and said in the tearsheet).
SKIPPED = ("Fig. 1c, Fig. 3a, the weight composition, per-party tearsheet pages and portfed allocate from the "
           "comparison directory need per-party value paths, weights or snapshots' evaluations, which "
           "evaluation.disclosure=averaged keeps with the parties")


def is_averaged(config: FederatedConfig) -> bool:
    return config.evaluation.disclosure == AVERAGED


def run_record(config: FederatedConfig) -> dict[str, str]:
    """What ``run.json`` records of the mode: ``disclosure: averaged``, nothing for ``per_party`` (so a
    per_party run's record is what it was before the key existed)."""
    return {"disclosure": AVERAGED} if is_averaged(config) else {}


def averaged_table(table: pd.DataFrame, std_labels: list[str]) -> pd.DataFrame:
    """Table 1 (or the robustness table) less its columns of spreads across parties ``std_labels``, the
    note extended by :data:`WITHHELD`."""
    out = table.drop(columns=[c for c in std_labels if c in table.columns])
    out.attrs = {**table.attrs, "note": " ".join(p for p in (table.attrs.get("note", ""), WITHHELD) if p)}
    return out


def spread_labels(labels: list[str]) -> list[str]:
    """The std columns of metric ``labels`` (:func:`~portfed.evaluation.tables.qualified` ``std``)."""
    return [qualified(label, "std") for label in labels]


def mean_metrics(party_metrics: pd.DataFrame, days: int) -> pd.DataFrame:
    """Per strategy (first-seen order): ``hindsight``, the benchmark, ``parties`` (rows), ``failed`` (failed
    backtests), ``days`` (held-out trading days) and the mean over the parties that traded of every numeric
    metric of ``party_metrics`` (module docstring)."""
    rows = []
    skip = {"strategy", "party", "hindsight", "failed", BENCHMARK_COLUMN}
    numeric = [c for c in party_metrics.columns if c not in skip and pd.api.types.is_numeric_dtype(party_metrics[c])]
    for strategy in dict.fromkeys(party_metrics["strategy"]):
        at = party_metrics[party_metrics["strategy"] == strategy]
        row: dict[str, object] = {"strategy": strategy, "hindsight": bool(at["hindsight"].iloc[0])}
        if BENCHMARK_COLUMN in at.columns:
            row[BENCHMARK_COLUMN] = str(at[BENCHMARK_COLUMN].iloc[0])
        row |= {"parties": len(at), "failed": int((at["failed"].fillna("") != "").sum()), "days": int(days)}
        row |= {key: float(at[key].mean()) for key in numeric}
        rows.append(row)
    return pd.DataFrame(rows)


#: ``mean_metrics.csv``'s column of a :class:`SummedEvaluation`: values of that strategy outside the range the
#: secure evaluation can carry, clipped to it before they were summed (:mod:`portfed.flower.secure_metrics`).
CLIPPED_COLUMN = "clipped_values"


@dataclass(frozen=True)
class SummedEvaluation:
    """The parties' held-out evaluation as a server learns it from sums over parties only (module docstring).

    ``means``: :data:`MEANS_FILE`'s rows (:func:`mean_metrics`' columns, then :data:`CLIPPED_COLUMN`);
    ``all_cash``: per algorithm, how many parties traded with a mean held-out cash weight ``≥`` the collapse
    rule's ``all_cash_weight``; ``days``: the held-out trading days (the parties' mean when they differ).
    """

    means: pd.DataFrame
    all_cash: dict[str, int]
    days: int

    def outcomes(self) -> pd.DataFrame:
        """What the collapse rules read of the backtests (``strategy``, ``party``, ``mean_cash``, ``failed``), built
        from the counts: per algorithm its ``failed`` rows, then ``all_cash`` rows of cash weight 1, then rows of
        cash weight 0 — the rules count these rows, so their verdicts are a per-party run's.  ``party`` is a
        position in that list, **not** a party's index: the server never learns which party stayed in cash, and
        the averaged ``collapse.csv`` drops the indices."""
        rows = []
        for _, at in self.means.iterrows():
            name = str(at["strategy"])
            if name not in self.all_cash:
                continue
            failed, cash, parties = int(at["failed"]), self.all_cash[name], int(at["parties"])
            kinds = [("failed", float("nan"))] * failed + [("", 1.0)] * cash + [("", 0.0)] * (parties - failed - cash)
            rows += [{"strategy": name, "party": i, "mean_cash": c, "failed": f} for i, (f, c) in enumerate(kinds)]
        return pd.DataFrame(rows, columns=["strategy", "party", "mean_cash", "failed"])
