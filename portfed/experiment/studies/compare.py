"""``compare``: the same parties, data, generators and seeds federated by several algorithms (paper 000 §8.2).

The parties are built once (market, universes, fitted private generators) and every algorithm
trains its own deep copy of them, so all algorithms start from identical parties: the same
universes, training data, synthetic blocks, initial model ``w^0`` and sampler seeds.  Each
algorithm is a sub-run directory (:func:`portfed.experiment.runs.federated.run_algorithm`); the
comparison directory holds:

* ``config.yaml`` — the resolved config, ``federation.algorithms`` = the algorithms compared;
* ``parties.csv`` — every party's data: market, source, generator, tickers and dates
  (:func:`~portfed.experiment.party.build.party_table`; not on a Flower deployment, whose server never
  reads the parties' data);
* ``table1.csv`` / ``table1.md`` — paper 000 Table 1: per algorithm (and per baseline) the mean over
  parties of the annualized return, Sharpe (annualized and per period), fAPV and MDD, the std across
  parties of all but the per-period Sharpe, the means of the benchmark-relative metrics (tracking error,
  information ratio, α, β, up and down capture against ``evaluation.benchmark``,
  :mod:`.benchmark`), and both collapse criteria: ``Collapsed``, the verdict, is the noise-aware one
  (:mod:`.collapse_noise`), ``Collapsed, first criterion`` the first study's (:mod:`.collapse`, whose
  flag alone can be a false positive on a flat, noisy curve).  Units in every header: fractions in the
  CSV, percent in the Markdown (:mod:`portfed.evaluation.tables`), with a note under it naming the
  benchmark and the risk-free rate, and warning when the held-out period is shorter than half a year;
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
  that refuses a second writer (:mod:`.run_dir`; every sub-run has its own ``run.json``);
* ``fit_cache/`` — the parties' fitted generators (:mod:`.fit_cache`): a later comparison into the
  same directory (other algorithms, more rounds, ``--resume``) loads them instead of fitting again.

:func:`load_comparison` reads such a directory back (the notebook uses it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from portfed._io import atomic_save, atomic_write_text
from portfed._threads import torch_threads
from portfed.evaluation import metrics_table_markdown
from portfed.evaluation.benchmark import (
    BENCHMARK_COLUMN,
    check_covers,
    held_out_days,
    parse_benchmark,
    value_columns,
    with_relative_metrics,
)
from portfed.evaluation.tables import METRIC_LABELS, qualified, relative_labels, short_period_note, table_note
from portfed.experiment.config.loading import FederatedConfig, dump_config, load_config
from portfed.experiment.party.backtests import backtest_baselines
from portfed.experiment.party.build import PARTIES_FILE, FitReport, build_federation, party_table
from portfed.experiment.party.fit_cache import FitCache
from portfed.experiment.reports.collapse import CollapseReport, CollapseRule, detect_collapse
from portfed.experiment.reports.collapse_noise import NoiseCollapseReport, NoiseRule, detect_noise_collapse
from portfed.experiment.reports.figures import (
    average_value_path,
    figure_interpolation,
    figure_learning_curves,
    figure_parameter_change,
    figure_portfolio_values,
    figure_weight_composition,
    save_figure,
)
from portfed.experiment.runs.federated import AlgorithmRun, check_resumable, make_spec
from portfed.experiment.runs.parallel import RunJob, default_jobs, run_jobs
from portfed.experiment.runs.run_dir import (
    check_run,
    check_sub_run,
    claim,
    config_fingerprint,
    directory_config_fingerprint,
)
from portfed.federation import FederationState

logger = logging.getLogger(__name__)

#: Table 1 metrics: summary key → column label with its unit (the mean over parties).
TABLE_METRICS: dict[str, str] = {key: METRIC_LABELS[key] for key in
                                 ("annualized_return", "sharpe", "sharpe_per_period", "fapv", "max_drawdown")}
#: Table 1's verdict (the noise-aware criterion) and the first criterion's flag.
COLLAPSE_COLUMN, FIRST_CRITERION_COLUMN = "Collapsed", "Collapsed, first criterion"
COLLAPSE_NOTE = ("Collapsed: the noise-aware criterion's verdict (a drop large against the curve's noise, not shared "
                 "by local training); the first criterion alone can flag a flat, noisy curve.")
#: The metrics whose spread across parties (population std) gets a column too.
SPREAD_METRICS: tuple[str, ...] = ("annualized_return", "sharpe", "fapv", "max_drawdown")
BASELINE_REFERENCE = "UCRP"
#: The baselines Fig. 3a draws beside the algorithms, when the comparison backtested them.
FIGURE_REFERENCES: tuple[str, ...] = (BASELINE_REFERENCE, "UBAH")
#: The metrics of the robustness table (honest parties, with and without the faults).
ROBUSTNESS_METRICS: tuple[str, ...] = ("annualized_return", "sharpe", "fapv")
#: Sub-directory of the fault-free reruns of a comparison whose config has faults.
CLEAN_DIR = "without_faults"


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


#: The algorithm whose learning curve is the second collapse criterion's control.
LOCAL_CONTROL = "local"


def run_name(algorithm: str, faults: bool = True) -> str:
    """The name of ``algorithm``'s run in a comparison: the algorithm, or ``"<algorithm> (no faults)"`` for
    its fault-free rerun (``faults=False``; the robustness table's, in ``without_faults/``)."""
    return algorithm if faults else f"{algorithm} (no faults)"


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


def compare(
    config: FederatedConfig,
    out_dir: str | Path,
    algorithms: Sequence[str] | None = None,
    *,
    resume: bool = False,
    progress: bool = True,
    n_jobs: int | None = 1,
    fit_cache: bool = True,
    start: Mapping[str, FederationState] | None = None,
    force: bool = False,
) -> Comparison:
    """Run every algorithm of ``algorithms`` (default ``config.federation.algorithms``) on the same parties.

    ``resume`` resumes every sub-run from its last checkpoint (sub-runs that had finished only
    redo their evaluation).  ``n_jobs`` parallel processes (``None``: what the cores allow,
    :func:`portfed.experiment.runs.parallel.default_jobs`; results are identical for any number).
    ``fit_cache``: load the parties' fitted generators from ``out_dir/fit_cache`` (and
    ``$PORTFED_FIT_CACHE``) and store new fits there; ``False`` fits every one and stores nothing.
    ``start``: the federation state a run's rounds start from, by run name (:func:`run_name`; e.g. the
    :meth:`~portfed.federation.FederationState.restarted` :attr:`Comparison.states` of an earlier
    comparison); a run it does not name starts from the initial models.
    Writes the comparison directory described in the module docstring, under its lock and with its
    ``run.json`` (:func:`portfed.experiment.runs.run_dir.claim`): nothing is written when ``out_dir`` holds
    another config's run (unless ``force``), is being written by another process, or (``resume``) holds a
    checkpoint of another config.

    Raises:
        ValueError: a bad algorithm name, or a ``start`` name that is none of the comparison's runs.
        RunDirError: ``out_dir`` is a file, another run's (without ``force``) or locked by another writer.
        CheckpointError: ``resume`` and a sub-run's checkpoint is of another config or unreadable.
    """
    names = list(config.federation.algorithms if algorithms is None else algorithms)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"algorithms must be a non-empty list of distinct names, got {names}")
    for name in names:
        make_spec(config, name)  # fail on a bad name before any work
    config = config.model_copy(update={"federation": config.federation.model_copy(update={"algorithms": names})})
    clean = config.model_copy(update={"parties": config.parties.model_copy(update={"faults": []})})
    # The same runs without the faults, for the robustness table of the honest parties; with every
    # party faulty (e.g. a collapse control) there is nothing to compare and no table.
    robust_table = bool(config.parties.faults and config.parties.honest)
    out, starts = Path(out_dir), dict(start or {})
    jobs = [RunJob(name, config, name, out / name, start=starts.get(name)) for name in names]
    if robust_table:
        jobs += [RunJob(run_name(name, False), clean, name, out / CLEAN_DIR / name,
                        start=starts.get(run_name(name, False))) for name in names]
    unknown = sorted(set(starts) - {job.name for job in jobs})
    if unknown:
        raise ValueError(f"start names {unknown}, which are none of this comparison's runs {[j.name for j in jobs]}")

    def resumable() -> None:  # every checkpoint to resume from is this run's, before anything is written
        for job in jobs if resume else []:
            check_resumable(job.config, job.algorithm, job.out_dir, job.start)

    with claim(out, "comparison", config_fingerprint(config), force=force, checks=resumable,
               legacy_fingerprint=directory_config_fingerprint(out), algorithms=names):
        atomic_write_text(out / "config.yaml", dump_config(config))
        write_party_table(config, out)
        with torch_threads(config.threads()):
            federation = build_federation(config, progress, FitCache.for_run(out) if fit_cache else None)
            check_covers(parse_benchmark(config.evaluation.benchmark, config.evaluation.baselines),
                         [m.panel.dates[m.panel.dates >= m.train_end] for m in federation.markets])
            base_metrics, baseline_values = backtest_baselines(config, federation, progress)
            done = run_jobs(federation, jobs, default_jobs(config) if n_jobs is None else n_jobs, resume=resume,
                            progress=progress)
            runs = {name: done[name] for name in names}
            clean_runs = {name: done[run_name(name, False)] for name in names if robust_table}
        return write_comparison(config, out, runs, base_metrics, baseline_values, clean_runs, federation.fits)


def write_party_table(config: FederatedConfig, out: Path) -> Path:
    """``out/parties.csv``: which data every party trades (:func:`~portfed.experiment.party.build.party_table`)."""
    table = party_table(config)
    return atomic_save(out / PARTIES_FILE, lambda p: table.to_csv(p, index=False))


def write_comparison(config: FederatedConfig, out: Path, runs: dict[str, AlgorithmRun], base_metrics: pd.DataFrame,
                     baseline_values: pd.DataFrame, clean_runs: dict[str, AlgorithmRun] | None = None,
                     fits: FitReport | None = None) -> Comparison:
    """Table 1, the collapse verdicts, the robustness table (with ``clean_runs``) and the figures of the
    algorithms' sub-runs ``runs`` and the baselines, written into ``out`` (the module docstring);
    whichever engine trained the runs."""
    rule = collapse_rule(config)
    collapse = {name: assess_collapse(run.curve, run.party_metrics, rule) for name, run in runs.items()}
    party_metrics = pd.concat([run.party_metrics for run in runs.values()] + [base_metrics], ignore_index=True)
    values = value_columns([run.values for run in runs.values()] + [baseline_values])
    party_metrics = with_relative_metrics(party_metrics, values, parse_benchmark(
        config.evaluation.benchmark, config.evaluation.baselines), config.evaluation.risk_free)
    noise = assess_noise_collapse({n: r.curve for n, r in runs.items()}, party_metrics, config)
    table = comparison_table(party_metrics, collapse, noise)
    days = held_out_days(baseline_values)
    table.attrs["note"] = table1_note(party_metrics, days, config.evaluation.risk_free)
    if short_period_note(days):
        logger.warning("%s: %s", out, short_period_note(days))
    atomic_save(out / "table1.csv", lambda p: table.to_csv(p))
    atomic_write_text(out / "table1.md", metrics_table_markdown(table))
    atomic_save(out / "party_metrics.csv", lambda p: party_metrics.to_csv(p, index=False))
    atomic_save(out / "collapse.csv", lambda p: collapse_frame(collapse, noise).to_csv(p, index=False))
    atomic_save(out / "baseline_values.csv", lambda p: baseline_values.to_csv(p))
    if clean_runs:
        robust = robustness_table({n: r.party_metrics for n, r in runs.items()},
                                  {n: r.party_metrics for n, r in clean_runs.items()}, config.parties.honest)
        atomic_save(out / "robustness.csv", lambda p: robust.to_csv(p))
        atomic_write_text(out / "robustness.md", metrics_table_markdown(robust))
    result = Comparison(table=table, party_metrics=party_metrics, collapse=collapse,
                        curves={n: r.curve for n, r in runs.items()},
                        interpolation={n: r.interpolation for n, r in runs.items()},
                        values={n: r.values for n, r in runs.items()}, baseline_values=baseline_values,
                        fits=fits, weights={n: r.weights for n, r in runs.items()},
                        states={**{n: r.state for n, r in runs.items()},
                                **{run_name(n, False): r.state for n, r in (clean_runs or {}).items()}},
                        noise_collapse=noise)
    write_figures(result, out, config.evaluation.composition_party)
    return result


def write_figures(result: Comparison, out: str | Path, party: int = 0) -> list[Path]:
    """Fig. 1a, 1b, 1c (if any interpolation round) and 3a of ``result`` into ``out``, and party ``party``'s
    weight composition under the algorithms whose weights ``result`` holds with a row for that party."""
    out = Path(out)
    paths = [
        save_figure(figure_parameter_change(result.curves, result.collapse), out / "fig1a_parameter_change.png"),
        save_figure(figure_learning_curves(result.curves, result.collapse), out / "fig1b_learning_curves.png"),
    ]
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
    rule = collapse_rule(config)
    party_metrics = pd.read_csv(run_dir / "party_metrics.csv")
    party_metrics["failed"] = party_metrics.get("failed", pd.Series("", index=party_metrics.index)).fillna("")
    collapse = {n: assess_collapse(c, party_metrics[party_metrics["strategy"] == n], rule) for n, c in curves.items()}
    noise = assess_noise_collapse(curves, party_metrics, config)
    baseline_values = pd.read_csv(run_dir / "baseline_values.csv", index_col="date", parse_dates=True)
    table = comparison_table(party_metrics, collapse, noise)
    table.attrs["note"] = table1_note(party_metrics, held_out_days(baseline_values), config.evaluation.risk_free)
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
