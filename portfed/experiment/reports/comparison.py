"""A comparison directory: what :func:`portfed.experiment.studies.compare` writes, and reading it back.

The directory holds:

* ``config.yaml`` — the resolved config, ``federation.algorithms`` = the algorithms compared;
* ``parties.csv`` — every party's data: market, source, generator, tickers and dates
  (:func:`~portfed.experiment.party.build.party_table`; not on a Flower deployment, whose server never
  reads the parties' data);
* ``table1.csv`` / ``table1.md`` — paper 000 Table 1: per algorithm (and per baseline) the mean over
  parties of the annualized return, Sharpe (annualized and per period), fAPV and MDD, the std across
  parties of all but the per-period Sharpe, the means of the benchmark-relative metrics (tracking error,
  information ratio, α, β, up and down capture against ``evaluation.benchmark``,
  :mod:`portfed.evaluation.benchmark`), and both collapse criteria: ``Collapsed``, the verdict, is the noise-aware one
  (:mod:`.collapse_noise`), ``Collapsed, first criterion`` the first study's (:mod:`.collapse`, whose
  flag alone can be a false positive on a flat, noisy curve).  Units in every header: fractions in the
  CSV, percent in the Markdown (:mod:`portfed.evaluation.tables`), with a note under it naming the
  benchmark and the risk-free rate, and warning when the held-out period is shorter than half a year;
  with a ``privacy`` section, each algorithm's final party-level ε and a note naming the guarantee
  (:func:`~.tables.with_privacy`);
* ``party_metrics.csv`` — every party's metrics for every algorithm and baseline (fractions), the
  benchmark-relative ones included (``benchmark`` names the benchmark);
* ``collapse.csv`` — per algorithm, the verdicts of both collapse criteria: the first study's
  (:mod:`.collapse`: ``collapsed``, ``kind``, ``round``, …; Table 1's ``Collapsed, first criterion``) and the
  noise-aware one (Table 1's ``Collapsed``)
  with local training as the control (:mod:`.collapse_noise`: the ``noise_*`` columns — verdict,
  kind, round, spike round, the curve's noise σ, its drops, the drops local training shares, and
  whether the local control was ``applied``, ``absent`` or the run is local training ``self``);
* ``baseline_values.csv`` — the baselines' portfolio values per party;
* with ``parties.faults`` and at least one honest party: ``robustness.csv`` / ``robustness.md`` — per algorithm, the honest parties'
  mean and std of the held-out metrics with the faults and in the same run without them (the
  fault-free sub-runs are in ``without_faults/``);
* ``fig1a_parameter_change.png``, ``fig1b_learning_curves.png``, ``fig1c_interpolation.png`` (when
  ``diagnostics.interpolation_rounds`` is set), ``fig3a_portfolio_values.png``, and
  ``weights_party_<k>.png``: the daily composition and turnover of party ``k`` =
  ``evaluation.composition_party`` under every algorithm (from the sub-runs' ``weights.csv``);
* ``run.json`` and ``.portfed.lock`` — what the directory holds and whether it finished, and the lock
  that refuses a second writer (:mod:`portfed.experiment.runs.run_dir`; every sub-run has its own ``run.json``);
* ``fit_cache/`` — the parties' fitted generators (:mod:`portfed.experiment.party.fit_cache`): a later comparison into the
  same directory (other algorithms, more rounds, ``--resume``) loads them instead of fitting again.

With ``evaluation.disclosure: averaged`` (:mod:`.disclosure`) the directory holds only what that mode lets
leave a party: Table 1 without its std columns, ``mean_metrics.csv`` (the party means of every scalar
metric) in place of ``party_metrics.csv``, ``collapse.csv`` without the all-cash parties' indices, the
robustness table's means, Fig. 1a and 1b; no ``baseline_values.csv``, Fig. 1c, Fig. 3a or composition
figure, and the sub-runs hold no ``party_metrics.csv``, ``portfolio_values.csv``, ``weights.csv`` or
``interpolation.csv`` (:func:`portfed.experiment.runs.federated.finish_run`).  ``run.json`` records
``disclosure: averaged``.

:func:`write_comparison` writes the tables and figures of the trained runs (whichever engine trained
them); :func:`load_comparison` reads such a directory back (the notebook uses it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from portfed._io import atomic_save, atomic_write_text
from portfed.evaluation import metrics_table_markdown
from portfed.evaluation.benchmark import (
    BENCHMARK_COLUMN,
    held_out_days,
    parse_benchmark,
    value_columns,
    with_relative_metrics,
)
from portfed.evaluation.tables import qualified, short_period_note, table_note
from portfed.experiment.config import FederatedConfig, load_config
from portfed.experiment.party import FitReport
from portfed.experiment.reports.collapse import CollapseReport
from portfed.experiment.reports.collapse_noise import NoiseCollapseReport
from portfed.experiment.reports.disclosure import (
    AVERAGED,
    MEANS_FILE,
    PER_PARTY,
    SKIPPED,
    WITHHELD,
    SummedEvaluation,
    averaged_table,
    is_averaged,
    mean_metrics,
    spread_labels,
)
from portfed.experiment.reports.figures import (
    average_value_path,
    figure_interpolation,
    figure_learning_curves,
    figure_parameter_change,
    figure_portfolio_values,
    figure_weight_composition,
    save_figure,
)
from portfed.experiment.reports.tables import (
    COLLAPSE_NOTE,
    PRIVACY_UNIT,
    ROBUSTNESS_METRICS,
    SPREAD_METRICS,
    TABLE_METRICS,
    assess_collapse,
    assess_noise_collapse,
    collapse_frame,
    collapse_rule,
    comparison_table,
    robustness_table,
    table1_note,
    with_privacy,
)
from portfed.experiment.runs import AlgorithmRun, check_run, check_sub_run, config_fingerprint
from portfed.federation import FederationState

logger = logging.getLogger(__name__)

BASELINE_REFERENCE = "UCRP"
#: The baselines Fig. 3a draws beside the algorithms, when the comparison backtested them.
FIGURE_REFERENCES: tuple[str, ...] = (BASELINE_REFERENCE, "UBAH")


@dataclass
class Comparison:
    """A comparison directory's contents: Table 1, per-party metrics, collapse verdicts, per-algorithm frames;
    ``fits``: how :func:`compare` obtained the parties' generators and ``states``: every run's final
    federation state by run name (:func:`run_name`) — both ``None`` when read back from disk."""

    table: pd.DataFrame
    party_metrics: pd.DataFrame
    collapse: dict[str, CollapseReport]
    curves: dict[str, pd.DataFrame]
    interpolation: dict[str, pd.DataFrame]
    values: dict[str, pd.DataFrame]
    baseline_values: pd.DataFrame
    fits: FitReport | None = None
    weights: dict[str, pd.DataFrame] | None = None
    states: dict[str, FederationState] | None = None
    noise_collapse: dict[str, NoiseCollapseReport] | None = None
    #: ``evaluation.disclosure``; an ``averaged`` comparison read back has ``means`` (``mean_metrics.csv``) and
    #: no per-party frames (:mod:`.disclosure`).
    disclosure: str = PER_PARTY
    means: pd.DataFrame | None = None


#: The std columns Table 1 and the robustness table drop in averaged mode.
TABLE_SPREADS = spread_labels([TABLE_METRICS[k] for k in SPREAD_METRICS])
ROBUSTNESS_SPREADS = [qualified(TABLE_METRICS[k], f"std ({label})") for k in ROBUSTNESS_METRICS
                      for label in ("faults", "no faults")]


def run_name(algorithm: str, faults: bool = True) -> str:
    """The name of ``algorithm``'s run in a comparison: the algorithm, or ``"<algorithm> (no faults)"`` for
    its fault-free rerun (``faults=False``; the robustness table's, in ``without_faults/``)."""
    return algorithm if faults else f"{algorithm} (no faults)"


def write_comparison(config: FederatedConfig, out: Path, runs: dict[str, AlgorithmRun], base_metrics: pd.DataFrame,
                     baseline_values: pd.DataFrame, clean_runs: dict[str, AlgorithmRun] | None = None,
                     fits: FitReport | None = None, days: int | None = None,
                     summed: SummedEvaluation | None = None) -> Comparison:
    """Table 1, the collapse verdicts, the robustness table (with ``clean_runs``) and the figures of the
    algorithms' sub-runs ``runs`` and the baselines, written into ``out`` (the module docstring);
    whichever engine trained the runs.  Metrics rows that already carry the benchmark-relative metrics
    (an averaged Flower evaluation: the parties computed them) are taken as they are; ``days``: the
    held-out trading days when ``baseline_values`` does not hold the value paths (same case).  ``summed``:
    the evaluation when the server learnt only sums over parties (a secure averaged Flower evaluation,
    :class:`~.disclosure.SummedEvaluation`): its means make Table 1 and ``mean_metrics.csv``, its counts the
    verdicts, and the runs' and baselines' frames are empty."""
    rule = collapse_rule(config)
    if summed is None:
        party_metrics = pd.concat([run.party_metrics for run in runs.values()] + [base_metrics], ignore_index=True)
        if BENCHMARK_COLUMN not in party_metrics.columns:
            values = value_columns([run.values for run in runs.values()] + [baseline_values])
            party_metrics = with_relative_metrics(party_metrics, values, parse_benchmark(
                config.evaluation.benchmark, config.evaluation.baselines), config.evaluation.risk_free)
        outcomes = party_metrics
    else:  # one row per strategy (its means: Table 1's mean of one row is that row) and anonymous outcomes
        party_metrics, outcomes, days = summed.means, summed.outcomes(), summed.days
    collapse = {name: assess_collapse(run.curve, outcomes[outcomes["strategy"] == name], rule)
                for name, run in runs.items()}
    noise = assess_noise_collapse({n: r.curve for n, r in runs.items()}, outcomes, config)
    table = comparison_table(party_metrics, collapse, noise)
    days = held_out_days(baseline_values) if days is None else days
    table.attrs["note"] = table1_note(party_metrics, days, config.evaluation.risk_free)
    averaged = is_averaged(config)
    if averaged:
        table = averaged_table(table, TABLE_SPREADS)
    table = with_privacy(table, config, {n: r.rounds for n, r in runs.items()})
    if short_period_note(days):
        logger.warning("%s: %s", out, short_period_note(days))
    atomic_save(out / "table1.csv", lambda p: table.to_csv(p))
    atomic_write_text(out / "table1.md", metrics_table_markdown(table))
    verdicts = collapse_frame(collapse, noise)
    means = summed.means if summed is not None else mean_metrics(party_metrics, days) if averaged else None
    if means is not None:
        atomic_save(out / MEANS_FILE, lambda p: means.to_csv(p, index=False))
        verdicts = verdicts.drop(columns=["all_cash_parties"])
    else:
        atomic_save(out / "party_metrics.csv", lambda p: party_metrics.to_csv(p, index=False))
        atomic_save(out / "baseline_values.csv", lambda p: baseline_values.to_csv(p))
    atomic_save(out / "collapse.csv", lambda p: verdicts.to_csv(p, index=False))
    if clean_runs:
        robust = robustness_table({n: r.party_metrics for n, r in runs.items()},
                                  {n: r.party_metrics for n, r in clean_runs.items()}, config.parties.honest)
        robust = averaged_table(robust, ROBUSTNESS_SPREADS) if averaged else robust
        atomic_save(out / "robustness.csv", lambda p: robust.to_csv(p))
        atomic_write_text(out / "robustness.md", metrics_table_markdown(robust))
    result = Comparison(table=table, party_metrics=pd.DataFrame() if summed is not None else party_metrics,
                        collapse=collapse,
                        curves={n: r.curve for n, r in runs.items()},
                        interpolation={n: r.interpolation for n, r in runs.items()},
                        values={n: r.values for n, r in runs.items()}, baseline_values=baseline_values,
                        fits=fits, weights={n: r.weights for n, r in runs.items()},
                        states={**{n: r.state for n, r in runs.items()},
                                **{run_name(n, False): r.state for n, r in (clean_runs or {}).items()}},
                        noise_collapse=noise, disclosure=config.evaluation.disclosure,
                        means=means)
    write_figures(result, out, config.evaluation.composition_party)
    return result


def write_figures(result: Comparison, out: str | Path, party: int = 0) -> list[Path]:
    """Fig. 1a, 1b, 1c (if any interpolation round) and 3a of ``result`` into ``out``, and party ``party``'s
    weight composition under the algorithms whose weights ``result`` holds with a row for that party;
    an averaged comparison's Fig. 1a and 1b only (the learning curves are party averages; the rest is
    per party: :data:`~.disclosure.SKIPPED`)."""
    out = Path(out)
    paths = [
        save_figure(figure_parameter_change(result.curves, result.collapse), out / "fig1a_parameter_change.png"),
        save_figure(figure_learning_curves(result.curves, result.collapse), out / "fig1b_learning_curves.png"),
    ]
    if result.disclosure == AVERAGED:
        logger.info("%s: not drawn: %s", out, SKIPPED)
        return paths
    if any(not frame.empty for frame in result.interpolation.values()):
        paths.append(save_figure(figure_interpolation(result.interpolation), out / "fig1c_interpolation.png"))
    references = {name: average_value_path(result.baseline_values, name) for name in FIGURE_REFERENCES
                  if any(c.startswith(f"{name}/") for c in result.baseline_values.columns)}
    paths.append(save_figure(figure_portfolio_values(result.values, references), out / "fig3a_portfolio_values.png"))
    held = {n: w for n, w in (result.weights or {}).items() if (w["party"] == party).any()}
    if held:
        paths.append(save_figure(figure_weight_composition(held, party), out / f"weights_party_{party}.png"))
    return paths


def load_comparison(run_dir: str | Path) -> Comparison:
    """Read a comparison directory written by :func:`compare` (collapse verdicts recomputed from the
    learning curves with the directory's config, so a changed rule can be tried on an old run).

    An averaged comparison (:mod:`.disclosure`) is read as :func:`_load_averaged` reads it.

    Raises:
        RunDirError: the run or one of its algorithms' sub-runs is unfinished or of another config
            (:func:`portfed.experiment.runs.run_dir.check_run`; a directory without ``run.json`` is read
            with a warning)."""
    run_dir = Path(run_dir)
    config = load_config(run_dir / "config.yaml")
    if not isinstance(config, FederatedConfig):
        raise ValueError(f"{run_dir} holds a {config.experiment!r} run, not a federated comparison")
    fingerprint = config_fingerprint(config)
    parent = check_run(run_dir, fingerprint)
    names = config.federation.algorithms
    for name in names:
        check_sub_run(run_dir / name, name, fingerprint, parent)
    curves = {n: pd.read_csv(run_dir / n / "learning_curve.csv") for n in names}
    if is_averaged(config):
        return _load_averaged(run_dir, config, curves)
    rule = collapse_rule(config)
    party_metrics = pd.read_csv(run_dir / "party_metrics.csv", float_precision="round_trip")  # the values written
    party_metrics["failed"] = party_metrics.get("failed", pd.Series("", index=party_metrics.index)).fillna("")
    collapse = {n: assess_collapse(c, party_metrics[party_metrics["strategy"] == n], rule) for n, c in curves.items()}
    noise = assess_noise_collapse(curves, party_metrics, config)
    baseline_values = pd.read_csv(run_dir / "baseline_values.csv", index_col="date", parse_dates=True)
    table = comparison_table(party_metrics, collapse, noise)
    table.attrs["note"] = table1_note(party_metrics, held_out_days(baseline_values), config.evaluation.risk_free)
    if config.privacy is not None:
        table = with_privacy(table, config, {n: pd.read_csv(run_dir / n / "rounds.csv") for n in names})
    return Comparison(
        table=table,
        party_metrics=party_metrics,
        collapse=collapse,
        curves=curves,
        noise_collapse=noise,
        interpolation={n: pd.read_csv(run_dir / n / "interpolation.csv") for n in names},
        values={n: pd.read_csv(run_dir / n / "portfolio_values.csv", index_col="date", parse_dates=True)
                for n in names},
        baseline_values=baseline_values,
        # Sub-runs written before weights.csv existed have no weights (and no composition figure).
        weights={n: pd.read_csv(run_dir / n / "weights.csv", parse_dates=["date"]) for n in names
                 if (run_dir / n / "weights.csv").is_file()},
    )


def _load_averaged(run_dir: Path, config: FederatedConfig, curves: dict[str, pd.DataFrame]) -> Comparison:
    """An averaged comparison directory read back: Table 1 as written (its collapse verdicts need each
    party's cash weight, which the directory does not hold, so they are the run's, not recomputed with
    the directory's rule), its note rebuilt from ``mean_metrics.csv``, the learning curves; no per-party
    frames (``party_metrics`` empty, no values, weights or Fig. 1c rows)."""
    means = pd.read_csv(run_dir / MEANS_FILE, float_precision="round_trip")
    table = pd.read_csv(run_dir / "table1.csv", index_col="Strategy", float_precision="round_trip")
    benchmark = str(means[BENCHMARK_COLUMN].iloc[0]) if BENCHMARK_COLUMN in means.columns else None
    note = table_note(int(means["days"].min()), benchmark, config.evaluation.risk_free, COLLAPSE_NOTE)
    if config.privacy is not None:
        table = table.drop(columns=[c for c in table.columns if str(c).endswith(PRIVACY_UNIT)])
    table.attrs["note"] = f"{note} {WITHHELD}"
    if config.privacy is not None:
        table = with_privacy(table, config, {n: pd.read_csv(run_dir / n / "rounds.csv") for n in curves})
    return Comparison(table=table, party_metrics=pd.DataFrame(), collapse={}, curves=curves, interpolation={},
                      values={}, baseline_values=pd.DataFrame(), disclosure=AVERAGED, means=means)
