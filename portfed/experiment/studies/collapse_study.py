"""``portfed study collapse``: when does federated training collapse?  A sweep, a CSV and a map.

Paper 000 reports that FedAvg, FedProx, RFA and coordinate median collapse on the federated
portfolio problem while Fed+ does not (§1, Fig. 1, Table 1).  The study runs every algorithm of a
:class:`~portfed.experiment.config.collapse_study.CollapseStudyConfig` on every cell of its grid (learning
rate, local iterations, heterogeneity, Adam state at aggregation, participation) for several seeds,
and applies one collapse criterion, fixed before the sweep: the detector of
:mod:`portfed.experiment.reports.collapse` with the base config's ``collapse`` thresholds — a learning-curve
drop explained by an aggregation spike, a deployed policy stuck in cash (rule 5) or one that cannot
trade because its parameters blew up (rule 6).

A sweep is a list of runs (:mod:`portfed.experiment.runs.parallel`): one federation per cell and seed
(its parties built once, when its first run starts; generators through the study's fit cache
``OUT/fit_cache``), one run per algorithm, ``jobs`` processes.  Outputs of ``OUT``:

* ``study.yaml`` — the study config (a resumed study must have the same one);
* ``collapse_study.csv`` — one row per run (cell, factor settings, seed, algorithm, verdict, what
  fired, held-out means), written as each run finishes;
* ``collapse_map.csv`` / ``collapse_map.md`` — per cell and algorithm, the fraction of seeds that collapsed;
* ``collapse_map.png`` — that fraction as a heat map (cells × algorithms);
* ``collapse_seeds.csv`` / ``.md`` / ``.png`` — per arm (cell and algorithm), the seeds each criterion flagged and
  the outcomes (parties in cash, return, Sharpe, cash weight) as means over seeds with 95 % intervals, and
  ``collapse_differences.csv`` / ``.md`` — each arm minus its controls (the base cell's local training, the
  same algorithm in the base cell), paired over seeds (:mod:`.collapse_seeds`);
* the second criterion (:mod:`portfed.experiment.reports.collapse_noise`, noise-aware, local training of the
  same cell and seed as the control when the study runs ``local``): the ``noise_*`` columns of
  ``collapse_study.csv`` (verdict, kind, round, ``applied``/``absent``/``self`` control), computed
  from the sub-runs' files once every run has finished, and its map ``collapse_map_noise.csv`` /
  ``.md`` / ``.png``;
* ``runs/<cell>/seed<s>/<algorithm>/`` — every run's sub-run directory (checkpoints, curves).

``resume=True`` skips the runs already in the CSV and continues the others from their checkpoints,
so a stopped sweep loses at most the rounds since each unfinished run's last checkpoint.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from portfed._io import atomic_save, atomic_write_text
from portfed.evaluation import metrics_table_markdown
from portfed.experiment.config import (
    Cell,
    CollapseStudyConfig,
    ConfigError,
    FederatedConfig,
    cell_config,
    cells,
)
from portfed.experiment.party import Federation, FitCache, build_federation
from portfed.experiment.reports import (
    assess_collapse,
    assess_noise_collapse,
    collapse_rule,
    figure_collapse_map,
    save_figure,
)
from portfed.experiment.runs import AlgorithmRun, RunJob, claim, default_jobs, run_jobs
from portfed.experiment.studies.collapse_seeds import (
    DIFFERENCES_FILE,
    SEEDS_FILE,
    arm_differences,
    arm_differences_markdown,
    seed_summary,
    seed_summary_figure,
    seed_summary_markdown,
)
from portfed.sweep import Executor

STUDY_FILE, ROWS_FILE, MAP_FILE = "study.yaml", "collapse_study.csv", "collapse_map"
NOISE_PREFIX = "noise_"


@dataclass
class CollapseStudy:
    """What :func:`run_collapse_study` produced: one row per run, the map of each criterion (``noise_map``:
    the second's), and the wall time of this call."""

    rows: pd.DataFrame
    collapse_map: pd.DataFrame
    noise_map: pd.DataFrame
    seconds: float


def run_key(cell: Cell, seed: int, algorithm: str) -> str:
    return f"{cell.name}/seed{seed}/{algorithm}"


def study_row(cell: Cell, seed: int, algorithm: str, run: AlgorithmRun, config: FederatedConfig) -> dict[str, object]:
    """One run's row: the cell's settings, the verdict of the fixed criterion, what fired, held-out means."""
    report = assess_collapse(run.curve, run.party_metrics, collapse_rule(config))
    jump = run.curve["aggregation_change_mean"].to_numpy()
    traded = run.party_metrics[run.party_metrics["failed"] == ""]
    return {
        "run": run_key(cell, seed, algorithm), "cell": cell.name, **cell.settings, "seed": seed,
        "algorithm": algorithm, "collapsed": report.collapsed, "kind": report.kind or "none",
        "collapse_round": report.round, "spike_round": report.spike_round, "spikes": len(report.spikes),
        "drops": len(report.drops), "all_cash_parties": len(report.all_cash), "failed_parties": len(report.failed),
        "max_jump_over_median": float(np.nanmax(jump) / np.nanmedian(jump)) if np.nanmedian(jump) > 0 else np.nan,
        "final_train_reward": float(run.curve["train_reward"].iloc[-1]),
        "annualized_return": float(traded["annualized_return"].mean()) if len(traded) else np.nan,
        "sharpe": float(traded["sharpe"].mean()) if len(traded) else np.nan,
        "mean_cash": float(run.party_metrics["mean_cash"].mean()),
        "asset_spread": float(traded["asset_spread"].mean()) if len(traded) else np.nan,
    }


def collapse_map(rows: pd.DataFrame, study: CollapseStudyConfig, column: str = "collapsed") -> pd.DataFrame:
    """Fraction of seeds that collapsed (``column``: the first criterion's verdict, or ``noise_collapsed``),
    per cell (rows, grid order) and algorithm (columns, study order)."""
    order = [c.name for c in cells(study)]
    table = rows.pivot_table(index="cell", columns="algorithm", values=column, aggfunc="mean")
    return table.reindex(index=[c for c in order if c in table.index],
                         columns=[a for a in study.algorithms if a in table.columns])


def with_noise_verdicts(rows: pd.DataFrame, study: CollapseStudyConfig, out: Path) -> pd.DataFrame:
    """``rows`` with the second criterion's ``noise_*`` columns, from every run's ``learning_curve.csv`` and
    ``party_metrics.csv`` (any earlier ``noise_*`` columns replaced)."""
    rows = rows[[c for c in rows.columns if not c.startswith(NOISE_PREFIX)]].copy()
    by_name = {cell.name: cell for cell in cells(study)}
    verdicts: dict[str, dict[str, object]] = {}
    for (cell, seed), group in rows.groupby(["cell", "seed"], sort=False):
        config = cell_config(study, by_name[cell], int(seed))
        dirs = {a: out / "runs" / cell / f"seed{seed}" / a for a in group["algorithm"]}
        curves = {a: pd.read_csv(d / "learning_curve.csv") for a, d in dirs.items()}
        metrics = pd.concat([pd.read_csv(d / "party_metrics.csv") for d in dirs.values()], ignore_index=True)
        reports = assess_noise_collapse(curves, metrics.fillna({"failed": ""}), config)
        for algorithm, r in reports.items():
            verdicts[run_key(by_name[cell], int(seed), algorithm)] = {
                "noise_collapsed": r.collapsed, "noise_kind": r.kind or "none", "noise_round": r.round,
                "noise_local_control": r.local_control}
    return rows.join(pd.DataFrame([verdicts[k] for k in rows["run"]], index=rows.index))


def write_seed_tables(out: Path, rows: pd.DataFrame) -> None:
    """The arms over seeds and their paired differences (:mod:`.collapse_seeds`): ``collapse_seeds.csv`` /
    ``.md`` / ``.png`` and ``collapse_differences.csv`` / ``.md``."""
    summary, differences = seed_summary(rows), arm_differences(rows)
    save_figure(seed_summary_figure(summary, rows), out / f"{SEEDS_FILE}.png")
    for name, frame, text in ((SEEDS_FILE, summary, seed_summary_markdown(summary)),
                              (DIFFERENCES_FILE, differences, arm_differences_markdown(differences))):
        atomic_save(out / f"{name}.csv", lambda p, frame=frame: frame.to_csv(p, index=False))
        atomic_write_text(out / f"{name}.md", text)


def _check_out(out: Path, study: CollapseStudyConfig, resume: bool) -> pd.DataFrame:
    """The rows already recorded (resume) or none; refuses to resume another study's directory."""
    text = yaml.safe_dump(study.model_dump(mode="json"), sort_keys=False)
    saved, rows_path = out / STUDY_FILE, out / ROWS_FILE
    if resume and saved.exists():
        if saved.read_text() != text:
            raise ConfigError(f"{out} holds a different study ({saved}); resume it with that config or use another --out")
        rows = pd.read_csv(rows_path) if rows_path.exists() else pd.DataFrame()
    else:
        rows_path.unlink(missing_ok=True)
        rows = pd.DataFrame()
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(saved, text)
    return rows


def run_collapse_study(study: CollapseStudyConfig, out_dir: str | Path, *, jobs: int | Executor | None = 1,
                       resume: bool = False, progress: bool = True, force: bool = False) -> CollapseStudy:
    """Run the study's grid (module docstring) into ``out_dir`` in ``jobs`` processes (``None``: what the
    cores allow for the base cell's ``torch_threads``, :func:`~portfed.experiment.runs.parallel.default_jobs`)
    or through an :class:`~portfed.sweep.Executor` (e.g. a Ray cluster's);
    the rows are the same for any number.  ``out_dir`` is locked and recorded
    (:func:`portfed.experiment.runs.run_dir.claim`): another study's directory is refused unless ``force``."""
    start = time.perf_counter()
    if jobs is None:
        jobs = default_jobs(cell_config(study, cells(study)[0], study.seeds[0]))
    out = Path(out_dir)
    fingerprint = hashlib.sha256(json.dumps(study.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()
    with claim(out, "collapse_study", fingerprint, force=force):
        return _run_study(study, out, jobs, resume, progress, start)


def _run_study(study: CollapseStudyConfig, out: Path, jobs: int | Executor, resume: bool, progress: bool,
               start: float) -> CollapseStudy:
    rows = _check_out(out, study, resume)
    done = set(rows["run"]) if len(rows) else set()
    cache = FitCache.for_run(out)
    plan = [(cell, seed) for cell in cells(study) for seed in study.seeds]
    configs, jobs_list = {}, []

    @functools.lru_cache(maxsize=2)  # jobs come group by group: keep the federations in flight only
    def federation(group: int) -> Federation:
        cell, seed = plan[group]
        return build_federation(cell_config(study, cell, seed), progress=False, cache=cache)

    for group, (cell, seed) in enumerate(plan):
        config = cell_config(study, cell, seed)
        for algorithm in study.algorithms_of(cell):
            key = run_key(cell, seed, algorithm)
            if key not in done:
                configs[key] = (cell, seed, algorithm, config)
                jobs_list.append(RunJob(key, config, algorithm, out / "runs" / cell.name / f"seed{seed}" / algorithm,
                                        functools.partial(federation, group)))
    recorded = rows.to_dict("records") if len(rows) else []

    def record(name: str, run: AlgorithmRun) -> None:
        cell, seed, algorithm, config = configs[name]
        recorded.append(study_row(cell, seed, algorithm, run, config))
        frame = pd.DataFrame(recorded)
        atomic_save(out / ROWS_FILE, lambda p: frame.to_csv(p, index=False))

    run_jobs(None, jobs_list, jobs, resume=resume, progress=progress, on_done=record)
    keys = [run_key(c, s, a) for c, s in plan for a in study.algorithms_of(c)]  # grid order, then algorithm order
    order = {key: i for i, key in enumerate(keys)}
    frame = pd.DataFrame(recorded)
    frame = frame.iloc[np.argsort([order[k] for k in frame["run"]], kind="stable")].reset_index(drop=True)
    atomic_save(out / ROWS_FILE, lambda p: frame.to_csv(p, index=False))
    frame = with_noise_verdicts(frame, study, out)
    atomic_save(out / ROWS_FILE, lambda p: frame.to_csv(p, index=False))
    frame = pd.read_csv(out / ROWS_FILE)  # the rows as a resumed study reads them back
    table = collapse_map(frame, study)
    noise_table = collapse_map(frame, study, "noise_collapsed")
    noise_title = "Training collapse, noise-aware criterion: fraction of seeds per cell and algorithm"
    for at, name, title in ((table, MAP_FILE, None), (noise_table, f"{MAP_FILE}_noise", noise_title)):
        atomic_save(out / f"{name}.csv", lambda p, at=at: at.to_csv(p))
        atomic_write_text(out / f"{name}.md", metrics_table_markdown(at))
        figure = figure_collapse_map(at, len(study.seeds)) if title is None else figure_collapse_map(
            at, len(study.seeds), title)
        save_figure(figure, out / f"{name}.png")
    write_seed_tables(out, frame)
    return CollapseStudy(rows=frame, collapse_map=table, seconds=time.perf_counter() - start, noise_map=noise_table)

