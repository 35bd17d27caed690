"""Run a supervised benchmark config on the federation layer: rows × algorithms × seeds.

Each run is one :func:`~portfed.federation.run_rounds` over a
:class:`~portfed.supervised.trainers.SupervisedCohort` (or, for paper 004's CNN, the cohort of
:func:`~portfed.supervised.cnn_cohort.cnn_engine`; no round loop of its own), evaluated by
:class:`~portfed.supervised.metrics.Evaluator`.  Finished runs are stored as JSON under
``out/runs/`` keyed by a hash of everything they depend on, so a rerun (``resume``) skips them.
Knobs in an algorithm's ``grid`` are chosen per row by the best validation mean of the first seed.
The runs are two sweeps of :mod:`portfed.sweep` (grid candidates, then seeds), in ``jobs`` processes.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import portfed.agents.adam as adam_module
import portfed.federation as federation_package
import portfed.federation.algorithms as algorithms_package
import portfed.supervised as supervised_package
from portfed._io import atomic_write_text
from portfed._sources import source_digest
from portfed.federation import ALGORITHMS, Algorithm, FederationState, make_algorithm, run_rounds
from portfed.federation.algorithms.amp import FedAMP
from portfed.federation.faults import Fault
from portfed.supervised.build import build_data
from portfed.supervised.cnn_cohort import cnn_engine
from portfed.supervised.config import (
    AlgorithmEntry,
    RowSection,
    SupervisedConfig,
    TrainingSection,
)
from portfed.supervised.data import FederatedData
from portfed.supervised.metrics import Evaluator, RunTrace
from portfed.supervised.trainers import SupervisedCohort
from portfed.sweep import Executor, Report, Task, run_tasks

Advance = Callable[[int], None]
#: Version of a stored run's layout; the key also holds the digest of the code that made the run, so
#: ``--resume`` never reuses a run made by other code.
RUN_FORMAT = 2  # 2: FedAMP's ξ stored instead of the final party models


def straggler_steps(n_parties: int, training: TrainingSection, seed: int) -> list[int]:
    """``E`` for every party, except a ``stragglers`` fraction that runs between 1 and ``E`` iterations.

    After FedProx §5.2, with two differences: the slow parties and their counts are drawn once per
    run (FedProx redraws them every round), and a straggler may draw ``E`` itself (``1 … E``)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 7]))
    steps = np.full(n_parties, training.local_steps)
    slow = rng.choice(n_parties, size=int(round(training.stragglers * n_parties)), replace=False)
    steps[slow] = rng.integers(1, training.local_steps + 1, size=slow.size)
    return steps.tolist()


def run_one(data: FederatedData, training: TrainingSection, name: str, params: dict[str, Any], seed: int,
            faults: Sequence[Fault] = (), advance: Advance | None = None) -> RunTrace:
    """One federated run of algorithm ``name`` with knobs ``params``; returns its evaluation curves."""
    spec = make_algorithm(name, **params)
    n = data.n_parties
    if training.model == "cnn":
        cohort, model = cnn_engine(data, training.learning_rate, training.batch_size, seed, training.optimizer,
                                   training.device, training.precision)
    else:
        cohort = SupervisedCohort(data, training.learning_rate, training.batch_size, seed)
        model = cohort.model
    init = model.init_params(np.random.default_rng(np.random.SeedSequence([seed, 11])))
    state = FederationState.initial(spec, init, n, seed)
    evaluator = Evaluator(model, data, spec, state, training.rounds, training.eval_every, training.track_improvement)

    def callback(round_index, run_state, record) -> None:
        evaluator(round_index, run_state, record)
        if advance is not None:
            advance(1)

    run_rounds(cohort, spec, training.rounds, straggler_steps(n, training, seed), k_per_round=training.k_per_round,
               seed=seed, init_params=init, callback=callback, state=state, faults=faults,
               change_records=False)  # the trace keeps no change records: their passes are skipped
    evaluator.trace.message_weights = final_message_weights(spec, state.party_models, training.rounds)
    return evaluator.trace


def final_message_weights(algorithm: Algorithm, models: np.ndarray, rounds: int) -> np.ndarray | None:
    """The message weights ξ of the final party ``models`` for FedAMP / HeurFedAMP (their ``message_weights``,
    paper 004 eq. 5 with α of the round after the last, ``rounds``, or eq. 8); ``None`` for every other algorithm."""
    return algorithm.message_weights(models, rounds) if isinstance(algorithm, FedAMP) else None


@dataclass
class Cell:
    """One (row, algorithm) cell: the registry ``name``, the knobs used, the chosen grid values and one trace per seed
    (``skipped``: why the algorithm could not run)."""

    row: str
    algorithm: str
    name: str
    params: dict[str, Any] = field(default_factory=dict)
    chosen: dict[str, Any] = field(default_factory=dict)
    traces: list[RunTrace] = field(default_factory=list)
    skipped: str = ""


#: The papers' baselines that portfed does not implement (paper 002's q-FedAvg and MGDA-Prox): a config
#: may list them to show the paper's number beside an empty cell; any other name outside the registry
#: is an error (a typo).
PAPER_ONLY: frozenset[str] = frozenset({"qfedavg", "mgda-prox"})


def availability(entry: AlgorithmEntry) -> str:
    """``""`` when the registry has ``entry.name``; for a :data:`PAPER_ONLY` baseline the reason to skip it."""
    if entry.name in ALGORITHMS:
        return ""
    return f"'{entry.name}' is not implemented in portfed (the paper's baseline; its cell shows only the paper's number)"


def check_algorithms(config: SupervisedConfig) -> None:
    """Raise ``ValueError`` naming an entry that is neither in the registry nor :data:`PAPER_ONLY`, or whose
    knobs the registry refuses."""
    for entry in config.algorithms:
        if entry.name not in ALGORITHMS and entry.name not in PAPER_ONLY:
            raise ValueError(f"algorithm {entry.label!r}: unknown name {entry.name!r}; valid: "
                             f"{', '.join(sorted(ALGORITHMS))} (or a paper-only baseline: {', '.join(sorted(PAPER_ONLY))})")
        if availability(entry):
            continue
        for row in config.rows:
            for values in itertools.product(*entry.grid.values()) if entry.grid else [()]:
                knobs = row.knobs(entry) | dict(zip(entry.grid, values, strict=True))
                try:
                    make_algorithm(entry.name, **knobs)
                except ValueError as exc:
                    raise ValueError(f"algorithm {entry.label!r} (row {row.label!r}): {exc}") from None


@dataclass(frozen=True)
class RunKey:
    """One run of a benchmark: algorithm ``entry`` with knobs ``params`` on ``row``'s data, seed ``seed``."""

    row: RowSection
    entry: AlgorithmEntry
    params: dict[str, Any]
    seed: int


def train_and_store(data: FederatedData, training: TrainingSection, name: str, params: dict[str, Any], seed: int,
                    faults: list[Fault], path: Path, record: dict[str, Any], report: Report) -> None:
    """Run one benchmark run (:func:`run_one`) and store ``record`` with its trace at ``path``, atomically
    (a :class:`~portfed.sweep.Task`'s call; ``report`` counts its finished rounds)."""
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        report(done)

    trace = run_one(data, training, name, params, seed, faults, advance)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record | {"trace": trace.to_dict()}, default=str))


class Runner:
    """Runs (or reloads from ``out/runs``) every run of a config.

    In two sweeps (:func:`portfed.sweep.run_tasks`, ``jobs`` processes or an executor): first every grid candidate
    on the first seed, then every seed with the values chosen on validation.  Each run is stored as it
    finishes and the table is assembled from the stored runs, so the numbers do not depend on ``jobs``
    (every run has ``torch.get_num_threads()`` threads of the calling process, in any process), and a
    stopped benchmark resumes where it stopped."""

    def __init__(self, config: SupervisedConfig, out: Path, *, resume: bool = True, jobs: int | Executor = 1,
                 progress: bool = False) -> None:
        self.config, self.out, self.resume, self.jobs, self.progress = config, Path(out), resume, jobs, progress
        self._made: set[Path] = set()  # runs made by this runner (reused even without resume)

    def _path(self, key: RunKey) -> Path:
        training = self.config.training_for(key.row)
        raw = json.dumps({"format": RUN_FORMAT, "code": _code(), "data": key.row.data.model_dump(),
                          "faults": [f.model_dump() for f in key.row.faults], "training": training.model_dump(),
                          "name": key.entry.name, "params": key.params, "seed": key.seed}, sort_keys=True, default=str)
        digest = hashlib.sha1(raw.encode()).hexdigest()[:12]
        return self.out / "runs" / slug(key.row.label) / slug(key.entry.label) / f"{digest}-seed{key.seed}.json"

    def _available(self, path: Path) -> bool:
        return path in self._made or (self.resume and path.exists())

    def make(self, keys: Sequence[RunKey], data: dict[str, FederatedData]) -> None:
        """Make every run of ``keys`` that is not available yet (stored, when resuming), ``jobs`` at a time."""
        tasks, seen = [], set()
        for key in keys:
            path = self._path(key)
            if path in seen or self._available(path):
                continue
            seen.add(path)
            training = self.config.training_for(key.row)
            record = {"row": key.row.label, "algorithm": key.entry.label, "name": key.entry.name,
                      "params": key.params, "seed": key.seed}
            knobs = [f"{k}={v}" for k, v in key.params.items() if k in key.entry.grid]
            name = " · ".join([key.row.label, " ".join([key.entry.label, *knobs]), f"seed {key.seed}", path.stem[:6]])
            tasks.append(Task(name, training.rounds, train_and_store, threads=torch.get_num_threads(),
                              args=(data[key.row.label], training, key.entry.name, key.params, key.seed,
                                    [f.fault() for f in key.row.faults], path, record)))
        run_tasks(tasks, self.jobs, progress=self.progress)
        self._made.update(self._path(key) for key in keys)

    def trace(self, key: RunKey) -> RunTrace:
        """A made run's trace, read from its stored record."""
        return RunTrace.from_dict(json.loads(self._path(key).read_text())["trace"])

    def candidates(self, row: RowSection, entry: AlgorithmEntry) -> list[RunKey]:
        """The grid candidates of ``entry`` on ``row``, each on the first seed (none without a grid)."""
        return [RunKey(row, entry, row.knobs(entry) | dict(zip(entry.grid, values, strict=True)), self.config.seeds[0])
                for values in itertools.product(*entry.grid.values())] if entry.grid else []

    def choose(self, row: RowSection, entry: AlgorithmEntry) -> dict[str, Any]:
        """The grid values with the best validation mean over rounds (first seed; candidates made)."""
        best, best_value = {}, None
        for key in self.candidates(row, entry):
            trace = self.trace(key)
            val = trace.mean_curve("val")
            score = float(np.nanmax(val) if trace.higher_is_better else -np.nanmin(val))
            if best_value is None or score > best_value:
                best, best_value = {k: key.params[k] for k in entry.grid}, score
        return best

    def run(self) -> tuple[list[Cell], dict[str, str]]:
        """Every cell of the table and each row's data description."""
        check_algorithms(self.config)
        data = {row.label: build_data(row.data) for row in self.config.rows}
        runnable = [(row, entry) for row in self.config.rows for entry in self.config.algorithms
                    if not availability(entry)]
        self.make([key for row, entry in runnable for key in self.candidates(row, entry)], data)
        chosen = {(row.label, entry.label): self.choose(row, entry) for row, entry in runnable}
        seeds = {(row.label, entry.label): [RunKey(row, entry, row.knobs(entry) | chosen[row.label, entry.label], seed)
                                            for seed in self.config.seeds] for row, entry in runnable}
        self.make([key for keys in seeds.values() for key in keys], data)
        cells = []
        for row in self.config.rows:
            for entry in self.config.algorithms:
                cell = Cell(row=row.label, algorithm=entry.label, name=entry.name, skipped=availability(entry))
                if not cell.skipped:
                    cell.chosen = chosen[row.label, entry.label]
                    cell.params = row.knobs(entry) | cell.chosen
                    cell.traces = [self.trace(key) for key in seeds[row.label, entry.label]]
                cells.append(cell)
        return cells, {label: rows.description for label, rows in data.items()}


@functools.cache
def _code() -> str:
    """The sources a stored run depends on (:mod:`portfed.supervised`, :mod:`portfed.federation` with its
    algorithms, :mod:`portfed.federation.algorithms`, and the CNN's Adam step, :mod:`portfed.agents.adam`)."""
    return source_digest(supervised_package, federation_package, algorithms_package, adam_module)


def slug(text: str) -> str:
    """``text`` as a file name (characters other than letters, digits, ``-_.`` become ``_``)."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)
