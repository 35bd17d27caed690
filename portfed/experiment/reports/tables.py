"""Table 1 of a comparison (paper 000 Table 1), its robustness table and both collapse criteria's verdicts.

A comparison's algorithms are judged on their parties' held-out metrics (mean and std over parties,
:mod:`portfed.evaluation.tables` for the units) and on their learning curves: the first collapse
criterion (:mod:`.collapse`) and the noise-aware one with local training as the control
(:mod:`.collapse_noise`), whose verdict is Table 1's ``Collapsed``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from portfed.evaluation.benchmark import BENCHMARK_COLUMN
from portfed.evaluation.tables import METRIC_LABELS, qualified, relative_labels, table_note
from portfed.experiment.config import FederatedConfig
from portfed.experiment.reports.collapse import CollapseReport, CollapseRule, detect_collapse
from portfed.experiment.reports.collapse_noise import NoiseCollapseReport, NoiseRule, detect_noise_collapse
from portfed.privacy.report import EPSILON_COLUMN, describe

#: Table 1 metrics: summary key → column label with its unit (the mean over parties).
TABLE_METRICS: dict[str, str] = {key: METRIC_LABELS[key] for key in
                                 ("annualized_return", "sharpe", "sharpe_per_period", "fapv", "max_drawdown")}
#: Table 1's verdict (the noise-aware criterion) and the first criterion's flag.
COLLAPSE_COLUMN, FIRST_CRITERION_COLUMN = "Collapsed", "Collapsed, first criterion"
COLLAPSE_NOTE = ("Collapsed: the noise-aware criterion's verdict (a drop large against the curve's noise, not shared "
                 "by local training); the first criterion alone can flag a flat, noisy curve.")
#: The metrics whose spread across parties (population std) gets a column too.
SPREAD_METRICS: tuple[str, ...] = ("annualized_return", "sharpe", "fapv", "max_drawdown")
#: The metrics of the robustness table (honest parties, with and without the faults).
ROBUSTNESS_METRICS: tuple[str, ...] = ("annualized_return", "sharpe", "fapv")

#: The algorithm whose learning curve is the second collapse criterion's control.
LOCAL_CONTROL = "local"

def collapse_rule(config: FederatedConfig) -> CollapseRule:
    return CollapseRule(**config.collapse.model_dump(exclude={"noise"}))


def noise_rule(config: FederatedConfig) -> NoiseRule:
    return NoiseRule(**config.collapse.noise.model_dump())


def collapse_verdict(report: CollapseReport | NoiseCollapseReport, first: CollapseReport | None = None) -> str:
    """``no`` or ``yes (…)`` of either criterion; a noise-aware ``report`` takes the counts of its blow-up
    and all-cash verdicts, which it carries over, from the ``first`` criterion's report."""
    counts = report if first is None else first
    if not report.collapsed:
        return "no"
    if report.kind == "spike":
        return f"yes (round {report.round})"
    if report.kind == "non_finite":
        return f"yes (blew up: {len(counts.failed)} parties cannot trade)"
    return f"yes (all cash: {len(counts.all_cash)} parties)"


def assess_collapse(curve: pd.DataFrame, metrics: pd.DataFrame, rule: CollapseRule) -> CollapseReport:
    """The detector on one algorithm's learning curve, its parties' held-out cash weights and failed backtests."""
    ordered = metrics.sort_values("party")
    failed = ordered.loc[ordered["failed"] != "", "party"].tolist()
    return detect_collapse(curve["train_reward"].to_numpy(), curve["aggregation_change_mean"].to_numpy(), rule,
                           ordered["mean_cash"].to_numpy(), failed=failed)


def assess_noise_collapse(curves: Mapping[str, pd.DataFrame], metrics: pd.DataFrame, config: FederatedConfig
                          ) -> dict[str, NoiseCollapseReport]:
    """The second criterion (:mod:`.collapse_noise`) on every algorithm's learning curve, local training's
    curve (when ``curves`` holds it) as the control; ``metrics``: the per-party metrics of all of them."""
    base, rule = collapse_rule(config), noise_rule(config)
    local = curves.get(LOCAL_CONTROL)
    reports = {}
    for name, curve in curves.items():
        ordered = metrics[metrics["strategy"] == name].sort_values("party")
        reports[name] = detect_noise_collapse(
            curve["train_reward"].to_numpy(), curve["aggregation_change_mean"].to_numpy(), base, rule,
            local=None if local is None else local["train_reward"].to_numpy(), is_local=name == LOCAL_CONTROL,
            mean_cash=ordered["mean_cash"].to_numpy(), failed=ordered.loc[ordered["failed"] != "", "party"].tolist())
    return reports


def comparison_table(party_metrics: pd.DataFrame, collapse: dict[str, CollapseReport],
                     noise: Mapping[str, NoiseCollapseReport] | None = None) -> pd.DataFrame:
    """Paper 000 Table 1: rows = algorithms (in ``collapse`` order) then baselines; mean and std over parties.

    Columns: :data:`TABLE_METRICS` (and the std of :data:`SPREAD_METRICS`), the means of the
    benchmark-relative metrics when ``party_metrics`` has them, then :data:`COLLAPSE_COLUMN` — the
    verdict, the noise-aware criterion's ``noise[name]`` (the first criterion's when ``noise`` is
    ``None``) — and :data:`FIRST_CRITERION_COLUMN`.  Hindsight baselines are labelled "(hindsight)";
    baselines have no collapse verdict ("—").  Means and stds are over the parties that could trade: a
    party whose policy blew up (a failed backtest, NaN metrics) is counted in the collapse verdict instead.
    """
    algorithms = list(collapse)
    baselines = [s for s in dict.fromkeys(party_metrics["strategy"]) if s not in collapse]
    relative = {}
    if BENCHMARK_COLUMN in party_metrics.columns:
        relative = relative_labels(str(party_metrics[BENCHMARK_COLUMN].iloc[0]))
    rows = {}
    for strategy in algorithms + baselines:
        at = party_metrics[party_metrics["strategy"] == strategy]
        if at.empty:
            raise ValueError(f"no party metrics for strategy {strategy!r}")
        row: dict[str, object] = {}
        for key, label in TABLE_METRICS.items():
            row[label] = float(at[key].mean())
            if key in SPREAD_METRICS:
                row[qualified(label, "std")] = float(at[key].std(ddof=0))
        row.update({label: float(at[key].mean()) for key, label in relative.items()})
        if strategy in collapse:
            verdict = collapse[strategy] if noise is None else noise[strategy]
            row[COLLAPSE_COLUMN] = collapse_verdict(verdict, collapse[strategy])
            row[FIRST_CRITERION_COLUMN] = collapse_verdict(collapse[strategy])
        else:
            row[COLLAPSE_COLUMN] = row[FIRST_CRITERION_COLUMN] = "—"
        hindsight = bool(at["hindsight"].iloc[0])
        rows[f"{strategy} (hindsight)" if hindsight else strategy] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "Strategy"
    return table


def table1_note(party_metrics: pd.DataFrame, days: int, risk_free: float) -> str:
    """The note under Table 1 (:func:`~portfed.evaluation.tables.table_note`), with both collapse criteria."""
    benchmark = party_metrics[BENCHMARK_COLUMN].iloc[0] if BENCHMARK_COLUMN in party_metrics.columns else None
    return table_note(days, benchmark, risk_free, COLLAPSE_NOTE)


def robustness_table(faulty: dict[str, pd.DataFrame], clean: dict[str, pd.DataFrame],
                     honest: Sequence[int]) -> pd.DataFrame:
    """Per algorithm: the honest parties' mean and std of the held-out metrics with the faults and without.

    ``faulty[name]`` / ``clean[name]``: the per-party metrics of the run with and without the faults;
    ``honest``: the parties no fault names (the faulty ones' own results say nothing of the defence).
    Means over the honest parties that could trade; ``failed`` counts those whose policy blew up.
    """
    if not honest:
        raise ValueError("every party is named by a fault: there are no honest parties to report")
    rows = {}
    for name in faulty:
        row: dict[str, object] = {}
        for label, frames in (("faults", faulty), ("no faults", clean)):
            at = frames[name][frames[name]["party"].isin(list(honest))]
            for key in ROBUSTNESS_METRICS:
                row[qualified(TABLE_METRICS[key], f"({label})")] = float(at[key].mean())
                row[qualified(TABLE_METRICS[key], f"std ({label})")] = float(at[key].std(ddof=0))
            row[f"Failed ({label})"] = f"{int((at['failed'] != '').sum())}/{len(at)}"
        rows[name] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "Algorithm (honest parties)"
    return table


def collapse_frame(collapse: dict[str, CollapseReport],
                   noise: Mapping[str, NoiseCollapseReport] | None = None) -> pd.DataFrame:
    """One row per algorithm: the first criterion's verdict and, with ``noise``, the second's (``noise_*``)."""
    def joined(rounds: Sequence[int]) -> str:
        return " ".join(map(str, rounds))

    rows = []
    for name, r in collapse.items():
        row = {"algorithm": name, "collapsed": r.collapsed, "kind": r.kind, "round": r.round,
               "spike_round": r.spike_round, "spikes": joined(r.spikes), "drops": joined(r.drops),
               "all_cash_parties": joined(r.all_cash)}
        if noise is not None:
            n = noise[name]
            row.update({"noise_collapsed": n.collapsed, "noise_kind": n.kind, "noise_round": n.round,
                        "noise_spike_round": n.spike_round, "noise_sigma": n.sigma, "noise_drops": joined(n.drops),
                        "noise_local_shared": joined(n.shared), "noise_local_control": n.local_control})
        rows.append(row)
    return pd.DataFrame(rows)


#: The unit in the header of Table 1's ε column (:func:`privacy_column`).
PRIVACY_UNIT = "(party-level)"


def privacy_column(delta: float) -> str:
    """Table 1's column of each algorithm's final ε at ``delta`` (:func:`with_privacy`)."""
    return f"ε at δ = {delta:g} {PRIVACY_UNIT}"


def with_privacy(table: pd.DataFrame, config: FederatedConfig, rounds: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Table 1 with each algorithm's final ε (the largest ``epsilon`` of its ``rounds.csv`` frame ``rounds[name]``:
    the run's in central mode, the most exposed party's in local mode; "—" for the baselines, which share
    nothing) and the note naming the guarantee (:func:`portfed.privacy.report.describe`).  ``table`` as it is
    without a ``privacy`` section."""
    settings = config.privacy_settings()
    if settings is None:
        return table
    final = {name: float(frame[EPSILON_COLUMN].max()) for name, frame in rounds.items()}
    out = table.copy()
    out[privacy_column(settings.delta)] = [final.get(str(name), "—") for name in table.index]
    line = describe(settings, config.sampling(), config.federation.rounds, max(final.values(), default=0.0))
    scope = "The guarantee covers what the server receives in training, not the evaluation reported here."
    note = "\n\n".join(part for part in (table.attrs.get("note", ""), f"{line}. {scope}") if part)
    out.attrs = {**table.attrs, "note": note}
    return out
