"""Run a supervised benchmark config on the federation layer: rows × algorithms × seeds.

Each run is one :func:`~portfed.federation.run_rounds` over a
:class:`~portfed.supervised.trainers.SupervisedCohort` (no round loop of its own), evaluated by
:class:`~portfed.supervised.metrics.Evaluator`.  Finished runs are stored as JSON under
``out/runs/`` keyed by a hash of everything they depend on, so a rerun (``resume``) skips them.
Knobs in an algorithm's ``grid`` are chosen per row by the best validation mean of the first seed.
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

import portfed.federation as federation_package
import portfed.supervised as supervised_package
from portfed._io import atomic_write_text
from portfed._sources import source_digest
from portfed.federation import ALGORITHMS, FederationState, PartyCohort, make_algorithm, run_rounds
from portfed.federation.faults import Fault
from portfed.supervised.build import build_data
from portfed.supervised.cnn import make_cnn_parties
from portfed.supervised.config import (
    AlgorithmEntry,
    RowSection,
    SupervisedConfig,
    TrainingSection,
)
from portfed.supervised.data import FederatedData
from portfed.supervised.metrics import Evaluator, RunTrace
from portfed.supervised.trainers import SupervisedCohort

Advance = Callable[[int], None]
#: Version of a stored run's layout; the key also holds the digest of the code that made the run, so
#: ``--resume`` never reuses a run made by other code.
RUN_FORMAT = 1


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
        parties = make_cnn_parties(data, training.learning_rate, training.batch_size, seed)
        cohort, model = PartyCohort(parties), parties[0].model
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
               seed=seed, init_params=init, callback=callback, state=state, faults=faults)
    evaluator.trace.party_models = state.party_models.copy()
    return evaluator.trace


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


#: The papers' baselines that portfed does not implement: a config may list them to show the paper's
#: number beside an empty cell; any other name outside the registry is an error (a typo).
PAPER_ONLY: frozenset[str] = frozenset({"scaffold", "pfedme", "perfedavg", "apfl", "fedavg-ft", "fedprox-ft"})


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
        for values in itertools.product(*entry.grid.values()) if entry.grid else [()]:
            knobs = entry.params | dict(zip(entry.grid, values, strict=True))
            try:
                make_algorithm(entry.name, **knobs)
            except ValueError as exc:
                raise ValueError(f"algorithm {entry.label!r}: {exc}") from None


class Runner:
    """Runs (or reloads from ``out/runs``) every run of a config."""

    def __init__(self, config: SupervisedConfig, out: Path, *, resume: bool = True,
                 advance: Advance | None = None) -> None:
        self.config, self.out, self.resume, self.advance = config, Path(out), resume, advance

    def total_rounds(self) -> int:
        """Rounds the whole config runs (for a progress bar), counting grid candidates on the first seed."""
        total = 0
        for row in self.config.rows:
            rounds = self.config.training_for(row).rounds
            for entry in self.config.algorithms:
                if not availability(entry):
                    grid = int(np.prod([len(v) for v in entry.grid.values()])) if entry.grid else 0
                    total += rounds * (len(self.config.seeds) + grid)
        return total

    def _path(self, row: RowSection, training: TrainingSection, entry: AlgorithmEntry,
              params: dict[str, Any], seed: int) -> Path:
        key = json.dumps({"format": RUN_FORMAT, "code": _code(), "data": row.data.model_dump(), "faults": [f.model_dump() for f in row.faults],
                          "training": training.model_dump(), "name": entry.name, "params": params, "seed": seed},
                         sort_keys=True, default=str)
        digest = hashlib.sha1(key.encode()).hexdigest()[:12]
        return self.out / "runs" / slug(row.label) / slug(entry.label) / f"{digest}-seed{seed}.json"

    def trace(self, row: RowSection, data: FederatedData, entry: AlgorithmEntry, params: dict[str, Any],
              seed: int) -> RunTrace:
        training = self.config.training_for(row)
        path = self._path(row, training, entry, params, seed)
        if self.resume and path.exists():
            if self.advance is not None:
                self.advance(training.rounds)
            return RunTrace.from_dict(json.loads(path.read_text())["trace"])
        trace = run_one(data, training, entry.name, params, seed, [f.fault() for f in row.faults], self.advance)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({"row": row.label, "algorithm": entry.label, "name": entry.name,
                                    "params": params, "seed": seed, "trace": trace.to_dict()}, default=str))
        return trace

    def choose(self, row: RowSection, data: FederatedData, entry: AlgorithmEntry) -> dict[str, Any]:
        """The grid values with the best validation mean over rounds (first seed)."""
        if not entry.grid:
            return {}
        best, best_value = {}, None
        for values in itertools.product(*entry.grid.values()):
            candidate = dict(zip(entry.grid, values, strict=True))
            trace = self.trace(row, data, entry, entry.params | candidate, self.config.seeds[0])
            val = trace.mean_curve("val")
            score = float(np.nanmax(val) if trace.higher_is_better else -np.nanmin(val))
            if best_value is None or score > best_value:
                best, best_value = candidate, score
        return best

    def run(self) -> tuple[list[Cell], dict[str, str]]:
        """Every cell of the table and each row's data description."""
        check_algorithms(self.config)
        cells, descriptions = [], {}
        for row in self.config.rows:
            data = build_data(row.data)
            descriptions[row.label] = data.description
            for entry in self.config.algorithms:
                skipped = availability(entry)
                cell = Cell(row=row.label, algorithm=entry.label, name=entry.name, skipped=skipped)
                if not skipped:
                    cell.chosen = self.choose(row, data, entry)
                    cell.params = entry.params | cell.chosen
                    cell.traces = [self.trace(row, data, entry, cell.params, s) for s in self.config.seeds]
                cells.append(cell)
        return cells, descriptions


@functools.cache
def _code() -> str:
    """The sources a stored run depends on (:mod:`portfed.supervised`, :mod:`portfed.federation`)."""
    return source_digest(supervised_package, federation_package)


def slug(text: str) -> str:
    """``text`` as a file name (characters other than letters, digits, ``-_.`` become ``_``)."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)
