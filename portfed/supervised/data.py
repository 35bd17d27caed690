"""Federated supervised data: each party's own train / validation / test split.

The papers score every party on its own held-out data (SUPERVISED.md, "personal" evaluation): paper 003
§5.1 splits each party's data 50/50, FedProx (paper 000 §8.1) 80/20, paper 004 draws 100 test samples
per client from the client's own distribution.  Validation data is carved out of the training part, so
that choices (hyper-parameters) never look at the test split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SPLITS: tuple[str, ...] = ("train", "val", "test")
TASKS: tuple[str, ...] = ("classification", "regression")


@dataclass(frozen=True)
class PartyData:
    """One party's features ``x_*`` (``(n, p)`` float64) and targets ``y_*`` (int64 labels or float64)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    def __post_init__(self) -> None:
        for split in SPLITS:
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if x.ndim != 2 or y.shape != (x.shape[0],):
                raise ValueError(f"{split} split: x must be (n, p) and y (n,), got {x.shape} and {y.shape}")
        if self.x_train.shape[0] < 1:
            raise ValueError("a party needs at least one training sample")
        widths = {getattr(self, f"x_{split}").shape[1] for split in SPLITS}
        if len(widths) != 1:
            raise ValueError(f"the splits have different feature counts {sorted(widths)}")

    def split(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(x, y)`` of split ``name`` (``train``, ``val`` or ``test``)."""
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; valid: {', '.join(SPLITS)}")
        return getattr(self, f"x_{name}"), getattr(self, f"y_{name}")

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])


@dataclass(frozen=True)
class FederatedData:
    """``parties`` of one task; ``n_classes`` is 0 for regression.  ``description`` names the data and
    every substitution made for it (printed under each table)."""

    parties: tuple[PartyData, ...]
    task: str
    n_features: int
    n_classes: int
    description: str

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; valid: {', '.join(TASKS)}")
        if not self.parties:
            raise ValueError("federated data needs at least one party")
        bad = [k for k, p in enumerate(self.parties) if p.x_train.shape[1] != self.n_features]
        if bad:
            raise ValueError(f"parties {bad} do not have {self.n_features} features")

    @property
    def n_parties(self) -> int:
        return len(self.parties)

    def train_sizes(self) -> np.ndarray:
        return np.array([p.n_train for p in self.parties], dtype=np.int64)


def split_party(x: np.ndarray, y: np.ndarray, fractions: Sequence[float], rng: np.random.Generator) -> PartyData:
    """Shuffle one party's samples and cut them into train / val / test with ``fractions`` (summing to 1).

    Every split with a positive fraction gets at least one sample when the party has enough.
    """
    fractions = np.asarray(fractions, dtype=np.float64)
    if fractions.shape != (3,) or np.any(fractions < 0) or not np.isclose(fractions.sum(), 1.0):
        raise ValueError(f"split fractions must be three numbers >= 0 summing to 1, got {fractions.tolist()}")
    n = x.shape[0]
    order = rng.permutation(n)
    n_val = int(round(fractions[1] * n))
    n_test = int(round(fractions[2] * n))
    n_val = max(n_val, 1) if fractions[1] > 0 and n >= 3 else n_val
    n_test = max(n_test, 1) if fractions[2] > 0 and n >= 3 else n_test
    n_train = n - n_val - n_test
    if n_train < 1:
        raise ValueError(f"a party with {n} samples leaves no training sample with fractions {fractions.tolist()}")
    cut = np.split(order, [n_train, n_train + n_val])
    return PartyData(*(array for index in cut for array in (x[index], y[index])))
