"""``portfed tune``: one knob chosen on a validation year cut from the end of the training period.

The Fed+ paper (*Fed+: A Unified Approach to Robust Personalized Federated Learning*, §8.2) keeps
``λ_k^t`` constant: "Results are based on training over a sufficiently wide grid of fixed λ_k^t
(typically 10–13 values on a multiplicative grid of resolution 10^-1 or 10^-3). Results are for the
best fixed λ_k^t selected individually for each experiment."  It does not say on which data the best
is selected; here it is never the test year.

**The validation cut.**  Every market (the ``data`` section, or each of ``parties.markets``) is
split as a run splits it: its last ``test_days`` trading days are the test period.  The validation
config ends that market at its last *training* close (``end`` = the training part's last date,
:func:`validation_cuts`), so the run it describes holds out the last ``test_days`` days of the
training part — the validation year — and never reads a test-period price: not for the parties'
universes, their generators' fits, training, or the backtest (computing the cut only counts the
market's dates).  The cut is by position in the
market's own calendar, so it is the same for real dates (the S&P 500 set, CSV, Yahoo) and for the
bundled datasets' reconstructed business days.

**The runs.**  For every value ``v`` of the grid and every seed ``s``: the validation config with
``KEY = v`` and ``seed = s``, one algorithm (the one the key names,
``federation.algorithm_params.<algorithm>.<param>``, or ``algorithm``), trained and backtested on the
validation year (:func:`portfed.experiment.runs.parallel.run_jobs`; parties are built once per distinct
seed, data, parties and agent sections, so a knob of the federation shares them across values).

**The metric.**  A run's score is the mean over its parties of ``log fAPV`` on the validation year —
the year's total log return, the sum of the daily log returns the agent is trained to maximise.
Its mean over parties, unlike that of the annualized return (convex in it), is not dominated by one
party's compounding.  A value's score is the mean over seeds; a run in which a party cannot trade
(its policy blew up: fAPV NaN) scores NaN, and a value with a NaN score is never chosen.  The chosen
value has the highest score; ties go to the first value of the grid.

**Within the seed spread.**  A value is *tied* with the chosen one when, compared seed by seed on the
same parties, their mean difference is no larger than that difference's std over seeds
(:func:`seed_ties`): the seeds cannot tell them apart, and the choice between them is not evidence.  ``chosen.json`` lists the tied values and a ``warning``
(printed by ``portfed tune``); with one seed the spread is unknown and the warning says so.

**Outputs** (``out``): ``validation_runs.csv`` (one row per value and seed), ``validation_curve.csv``
and ``validation_curve.png`` (per value: mean and std over seeds), ``chosen.json`` (the key, the
chosen value, its score, the grid, the seeds and each market's validation dates) and ``runs/`` (the
sub-runs, resumable).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from portfed._io import atomic_save, atomic_write_text
from portfed.data.split import train_test_split
from portfed.experiment.config import (
    ConfigError,
    FederatedConfig,
    config_mapping,
    load_yaml,
    parse_config,
    set_key,
)
from portfed.experiment.party import Federation, FitCache, build_federation, load_pool
from portfed.experiment.reports import figure_validation_curve, save_figure
from portfed.experiment.runs import RunJob, claim, make_spec, request_fingerprint, run_jobs
from portfed.sweep import Executor

ALGORITHM_PARAMS = ("federation", "algorithm_params")
RUNS_FILE, CURVE_FILE, CHOICE_FILE = "validation_runs.csv", "validation_curve", "chosen.json"
#: The sections a federation's parties are built from (:func:`portfed.experiment.party.build.build_federation`).
PARTY_SECTIONS = {"seed", "data", "parties", "agent"}


class TuneError(ValueError):
    """A bad tuning request: unknown key, empty or duplicated grid, a value of the wrong type, bad seeds."""


@dataclass(frozen=True)
class ValidationCut:
    """Market ``market`` (its ``source``): validation year ``[start, end]``, the end of its training part."""

    market: int
    source: str
    start: str
    end: str


@dataclass
class Tuning:
    """What :func:`tune` produced: the per-run rows, the per-value curve, the chosen value and the cuts."""

    runs: pd.DataFrame
    curve: pd.DataFrame
    chosen: Any
    score: float
    cuts: list[ValidationCut]
    ties: list[Any]
    warning: str | None


def parse_value(text: str) -> Any:
    """A grid value from text, read as a config's YAML is (``0.1``, ``1e-3``, ``true``, ``abc``:
    :func:`~portfed.experiment.config.load_yaml`)."""
    try:
        return load_yaml(text)
    except yaml.YAMLError as exc:
        raise TuneError(f"--grid value {text!r} is not YAML: {exc}") from None


def choice_override(key: str, value: Any) -> str:
    """``KEY=VALUE``, chosen.json's ``override``: what ``portfed compare --set`` is given to run the chosen
    value, read back by :func:`~portfed.experiment.config.apply_overrides` as ``value`` itself."""
    return f"{key}={value}"


def parse_grid(text: str) -> list[Any]:
    """``"0.1,0.01,0.001"`` as a list of values (:func:`parse_value`).

    Raises:
        TuneError: no value.
    """
    values = [parse_value(part.strip()) for part in text.split(",") if part.strip()]
    if not values:
        raise TuneError(f"--grid {text!r} holds no value")
    return values


def geometric_grid(low: float, high: float, factor: float) -> list[float]:
    """``low, low·factor, low·factor², …`` up to ``high`` (included within a relative 1e-9): the paper's
    multiplicative grid, e.g. ``geometric_grid(1e-4, 1, 10)`` = 1e-4 … 1 (5 values).

    Raises:
        TuneError: ``low`` or ``high`` not positive, ``high < low`` or ``factor <= 1``.
    """
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
        raise TuneError(f"a multiplicative range needs 0 < low <= high, got low={low!r}, high={high!r}")
    if not (math.isfinite(factor) and factor > 1):
        raise TuneError(f"a multiplicative range needs a factor > 1, got {factor!r}")
    steps = math.floor(math.log(high / low) / math.log(factor) + 1e-9)
    return [float(low * factor**i) for i in range(steps + 1)]


def sampled_grid(low: float, high: float, count: int, seed: int) -> list[float]:
    """``count`` values drawn log-uniformly from ``[low, high]`` with ``numpy.random.default_rng(seed)``, sorted.

    Raises:
        TuneError: ``low``/``high`` as in :func:`geometric_grid`, or ``count < 1``.
    """
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
        raise TuneError(f"a sampled range needs 0 < low <= high, got low={low!r}, high={high!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise TuneError(f"the number of sampled values must be an integer >= 1, got {count!r}")
    draws = np.exp(np.random.default_rng(seed).uniform(math.log(low), math.log(high), count))
    return sorted(float(v) for v in draws)


def key_algorithm(key: str) -> str | None:
    """The algorithm a ``federation.algorithm_params.<algorithm>.<param>`` key names, else ``None``."""
    parts = key.split(".")
    return parts[2] if len(parts) == 4 and tuple(parts[:2]) == ALGORITHM_PARAMS else None


def with_value(config: FederatedConfig, key: str, value: Any) -> FederatedConfig:
    """``config`` with the dotted ``key`` set to ``value`` (validated as a config)."""
    raw = config_mapping(config)
    try:
        set_key(raw, key, value)
        result = parse_config(raw, origin=f"{key}={value!r}")
    except ConfigError as exc:
        raise TuneError(f"key {key!r} with value {value!r}: {exc}") from None
    if not isinstance(result, FederatedConfig):
        raise TuneError(f"key {key!r}: tuning needs a federated config")
    return result


def validation_cuts(config: FederatedConfig) -> list[ValidationCut]:
    """Every market's validation year: the last ``test_days`` days of its training part (module docstring).

    Raises:
        TuneError: a training part too short to hold a validation year and two fitting days.
    """
    cuts = []
    for m, section in enumerate(config.market_sections()):
        train, _ = train_test_split(load_pool(section), section.test_days)
        if len(train) < section.test_days + 2:
            raise TuneError(f"market {m} ({section.source!r}): its training part has {len(train)} days, too few "
                            f"for a validation year of test_days={section.test_days} and two fitting days")
        start, end = train.dates[-section.test_days], train.dates[-1]
        cuts.append(ValidationCut(m, section.source, str(start.date()), str(end.date())))
    return cuts


def validation_config(config: FederatedConfig, cuts: Sequence[ValidationCut]) -> FederatedConfig:
    """``config`` with every market ending at its last training close: its held-out period is the validation year."""
    if config.parties.markets:
        markets = [section.model_copy(update={"end": cut.end}) for section, cut in zip(config.parties.markets, cuts,
                                                                                       strict=True)]
        return config.model_copy(update={"parties": config.parties.model_copy(update={"markets": markets})})
    return config.model_copy(update={"data": config.data.model_copy(update={"end": cuts[0].end})})


def run_score(party_metrics: pd.DataFrame) -> float:
    """Mean over parties of ``log fAPV`` (NaN when any party's fAPV is not a positive number)."""
    fapv = party_metrics["fapv"].to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(fapv) & (fapv > 0)):
        return float("nan")
    return float(np.mean(np.log(fapv)))


def tuning_jobs(config: FederatedConfig, key: str, values: Sequence[Any], seeds: Sequence[int], algorithm: str,
                out: Path, cache: FitCache | None) -> list[tuple[int, int, RunJob]]:
    """``(value index, seed, job)`` for every value and seed; federations built when a job starts, once
    per distinct party sections (so values of a federation knob share their seed's parties)."""
    built: dict[str, Federation] = {}

    def federation(cfg: FederatedConfig) -> Federation:
        fingerprint = json.dumps(cfg.model_dump(mode="json", include=PARTY_SECTIONS), sort_keys=True)
        if fingerprint not in built:
            built[fingerprint] = build_federation(cfg, False, cache)
        return built[fingerprint]

    jobs = []
    for i, value in enumerate(values):
        for seed in seeds:
            cfg = with_value(config, key, value).model_copy(update={"seed": seed})
            jobs.append((i, seed, RunJob(f"value_{i}_seed_{seed}", cfg, algorithm,
                                         out / "runs" / f"value_{i}" / f"seed_{seed}",
                                         federation=lambda cfg=cfg: federation(cfg))))
    return jobs


def check_request(config: FederatedConfig, key: str, values: Sequence[Any], seeds: Sequence[int],
                  algorithm: str | None) -> str:
    """The algorithm to tune, after checking every value and seed (no training yet).

    Raises:
        TuneError: the checks of :func:`tune`.
    """
    if not values:
        raise TuneError("the grid is empty: give at least one value")
    if len({json.dumps(v, sort_keys=True, default=str) for v in values}) != len(values):
        raise TuneError(f"the grid repeats a value: {list(values)}")
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds) \
            or len(set(seeds)) != len(seeds):
        raise TuneError(f"seeds must be distinct integers >= 0, at least one, got {list(seeds)}")
    if key == "seed" or key.split(".")[0] == "data" or key.startswith("parties.markets"):
        raise TuneError(f"key {key!r} cannot be tuned: the data sections decide the validation cut and --seeds "
                        "sets the seed")
    configs = {repr(value): with_value(config, key, value) for value in values}  # a config key, a valid value
    named = key_algorithm(key)
    if named is not None and algorithm is not None and algorithm != named:
        raise TuneError(f"key {key!r} is a parameter of {named!r}, not of --algorithm {algorithm!r}")
    chosen = named or algorithm
    if chosen is None:
        raise TuneError(f"key {key!r} names no algorithm: give --algorithm")
    for value in values:
        cfg = configs[repr(value)]
        try:
            make_spec(cfg, chosen)
        except ValueError as exc:
            raise TuneError(f"key {key!r} with value {value!r}: {exc}") from None
    return chosen


def tune(config: FederatedConfig, key: str, values: Sequence[Any], seeds: Sequence[int], out_dir: str | Path, *,
         algorithm: str | None = None, n_jobs: int | Executor = 1, resume: bool = False, progress: bool = True,
         force: bool = False) -> Tuning:
    """Choose ``key`` among ``values`` on every market's validation year, ``seeds`` runs per value (module
    docstring); writes the outputs into ``out_dir``, locked and recorded (:func:`portfed.experiment.runs.run_dir.claim`:
    a directory of another tuning — another config, key, grid, seeds — is refused unless ``force``).

    Raises:
        TuneError: an empty or repeated grid, bad seeds, a key that is no config key or no parameter of
            the algorithm, a key of the data sections (they decide the validation cut) or ``seed``, a value of the wrong type for it, no algorithm to tune, a training part too
            short for a validation year, or no value with a finite score.
    """
    chosen_algorithm = check_request(config, key, values, seeds, algorithm)
    out = Path(out_dir)
    fingerprint = request_fingerprint(config, key=key, values=list(values), seeds=list(seeds),
                                      algorithm=chosen_algorithm)
    with claim(out, "tune", fingerprint, force=force):
        return _tune(config, key, values, seeds, out, chosen_algorithm, n_jobs, resume, progress)


def _tune(config: FederatedConfig, key: str, values: Sequence[Any], seeds: Sequence[int], out: Path,
          chosen_algorithm: str, n_jobs: int | Executor, resume: bool, progress: bool) -> Tuning:
    cuts = validation_cuts(config)
    base = validation_config(config, cuts)
    jobs = tuning_jobs(base, key, values, seeds, chosen_algorithm, out, FitCache.for_run(out))
    done = run_jobs(None, [job for _, _, job in jobs], n_jobs, resume=resume, progress=progress)
    rows = []
    for i, seed, job in jobs:
        metrics = done[job.name].party_metrics
        rows.append({"key": key, "value_index": i, "value": values[i], "seed": seed, "score": run_score(metrics),
                     "annualized_return": float(metrics["annualized_return"].mean()),
                     "sharpe": float(metrics["sharpe"].mean()), "failed_parties": int((metrics["failed"] != "").sum())})
    runs = pd.DataFrame(rows)
    curve = validation_curve(runs, values)
    finite = curve["score"].to_numpy(dtype=np.float64)
    if not np.any(np.isfinite(finite)):
        raise TuneError("no value has a finite validation score: every one has a run whose policy cannot trade")
    best = int(np.nanargmax(finite))
    ties = [values[i] for i in seed_ties(runs, best)]
    warning = tie_warning(values[best], ties, len(seeds))
    write_tuning(out, runs, curve, key, chosen_algorithm, values, seeds, best, cuts, ties, warning)
    return Tuning(runs=runs, curve=curve, chosen=values[best], score=float(finite[best]), cuts=cuts, ties=ties,
                  warning=warning)


def seed_ties(runs: pd.DataFrame, best: int) -> list[int]:
    """The grid positions whose score is within the seed spread of value ``best``'s, compared seed by seed
    on the same parties: with ``d_s = score(best, s) − score(i, s)``, value ``i`` ties when
    ``|mean_s d_s| <= std_s d_s`` (population std; a NaN score ties with nothing).  One seed has no
    spread, so nothing ties (:func:`tie_warning` says the spread is unknown)."""
    wide = runs.pivot(index="seed", columns="value_index", values="score")
    ties = []
    for i in wide.columns:
        d = (wide[best] - wide[i]).to_numpy(dtype=np.float64)
        if i != best and np.all(np.isfinite(d)) and abs(d.mean()) <= d.std():
            ties.append(int(i))
    return ties


def tie_warning(chosen: Any, ties: Sequence[Any], n_seeds: int) -> str | None:
    """What the reader must know about the choice: one seed (no spread), or values it cannot be told from."""
    if n_seeds < 2:
        return (f"one seed: the seed spread is unknown, so whether {chosen!r} is better than its neighbours "
                "is not measured (give --seeds 0,1,…)")
    if ties:
        return (f"the chosen value {chosen!r} is within the seed spread of {', '.join(map(repr, ties))}: "
                "the validation year does not tell them apart")
    return None


def validation_curve(runs: pd.DataFrame, values: Sequence[Any]) -> pd.DataFrame:
    """Per value (grid order): the mean (NaN if any seed's is) and population std over seeds of the score,
    and the mean annualized return."""
    rows = []
    for i, value in enumerate(values):
        at = runs[runs["value_index"] == i]
        rows.append({"value": value, "score": float(at["score"].mean(skipna=False)),
                     "score_std": float(at["score"].std(ddof=0)),
                     "annualized_return": float(at["annualized_return"].mean()), "seeds": len(at)})
    return pd.DataFrame(rows)


def write_tuning(out: Path, runs: pd.DataFrame, curve: pd.DataFrame, key: str, algorithm: str, values: Sequence[Any],
                 seeds: Sequence[int], best: int, cuts: Sequence[ValidationCut], ties: Sequence[Any],
                 warning: str | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_save(out / RUNS_FILE, lambda p: runs.to_csv(p, index=False))
    atomic_save(out / f"{CURVE_FILE}.csv", lambda p: curve.to_csv(p, index=False))
    save_figure(figure_validation_curve(curve, key, best), out / f"{CURVE_FILE}.png")
    choice = {"key": key, "algorithm": algorithm, "value": values[best], "override": choice_override(key, values[best]),
              "score": float(curve["score"].iloc[best]), "metric": "mean over parties of log fAPV on the validation year",
              "values": list(values), "seeds": list(seeds), "within_seed_spread": list(ties), "warning": warning,
              "validation": [cut.__dict__ for cut in cuts]}
    atomic_write_text(out / CHOICE_FILE, json.dumps(choice, indent=2, default=str) + "\n")
