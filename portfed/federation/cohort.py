"""The federation's one contract with whatever trains the parties: a cohort trains a plan.

In round ``t`` the server has chosen the active parties and, for each, the Local-Solve of paper 003
Alg. 1 lines 15–20 (:func:`~portfed.federation.local_solve.plan_local_solve`):

* ``start_k = (1 − λ_t) w_k + λ_t r_k``                       (line 18: where local training starts),
* ``z_k = r_k + prox_ρ(w_k − r_k)`` and the penalty weight ``σ_t`` (eq. 11; the pull towards ``z_k``),
* ``c_k = r_k`` and ``μ = λ/α_t``                             (FedAMP / HeurFedAMP, paper 004 eq. 6: a
  proximal term ``μ/2 ‖w − c_k‖²`` in the loss),
* ``E_k`` local iterations (stragglers run fewer).

The server decides *what* pulls a party (``z_k``, ``σ_t``); the party, which owns the optimizer,
decides how that becomes its update (:data:`ProximalUpdate`):

* ``mix`` — after every optimizer step ``w ← κ w + (1 − κ) z_k`` with ``κ = 1/(1 + η_k σ_t)`` and
  ``η_k`` the party's own learning rate (paper 000 eq. 6, paper 003 eq. 14).  With plain gradient
  steps this is gradient descent with step ``η κ`` on ``f_k(w) + σ/2 ‖w − z_k‖²`` (paper 003 Prop. 1);
  with Adam it moves a party ``1 − κ ≈ ησ`` of the way per step (5e-7 at the paper's η = 5e-5,
  σ = 0.01).
* ``loss`` — ``σ_t/2 ‖w − z_k‖²`` is added to the loss the optimizer sees (paper 001 Alg. 1, "a
  gradient step on ``f_k(w) + (α/2)‖w − z_k‖²``"; FedProx's proximal term ``μ/2 ‖w − w̃‖²`` of Li et
  al. is the case ``z_k = w̃``).  Adam normalises the gradient per coordinate, so the pull's share of
  a step is of order one when it dominates ``∇f_k``, not of order ``ησ``.

:class:`CohortPlan` holds all of it for the ``K`` active parties as stacked arrays, validated once,
where it is built.  A **cohort** (:class:`Cohort`) is anything that trains a plan and returns a
:class:`CohortResult` (the ``(K, d)`` new models and, per party, the mean training reward and loss
of its local steps): the per-party adapter :class:`~portfed.federation.party_cohort.PartyCohort` (a loop over
:class:`LocalTrainer` objects), the batched portfolio engine
(:class:`portfed.experiment.party.PartyGroup`), the supervised trainers, or a remote cohort whose
parties live on other machines.  The round loop (:func:`portfed.federation.rounds.run_rounds`) only
ever calls ``cohort.train(plan)``; it never needs a party's learning rate, so parties with different
learning rates share a cohort.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args, runtime_checkable

import numpy as np

from portfed.federation.local_rules import LocalRule, RuleOutput
from portfed.validation import check_int

#: What a party does with its optimizer state when it loads the server's message (``start``):
#: ``keep`` it, ``reset`` it (a fresh optimizer), or ``average`` it over the round's active parties.
OptimizerState = Literal["keep", "reset", "average"]
OPTIMIZER_STATES: tuple[str, ...] = get_args(OptimizerState)

#: How a party turns the server's pull ``(z_k, σ_t)`` into its update (module docstring).
ProximalUpdate = Literal["mix", "loss"]
PROXIMAL_UPDATES: tuple[str, ...] = get_args(ProximalUpdate)

__all__ = ["Cohort", "CohortPlan", "CohortResult", "LocalObjective", "cohort_rules", "cohort_sends_private",
           "mixing_coefficient"]


def _frozen(value: object) -> bool:
    """A float64 array that owns its memory and is read-only: no one can change it, so a plan keeps it as it is."""
    return (isinstance(value, np.ndarray) and value.dtype == np.float64 and value.base is None
            and not value.flags.writeable)


def _vector(value: np.ndarray | None, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
    if value is None:
        return None
    array = value if _frozen(value) else np.array(value, dtype=np.float64)
    if array.shape != shape:
        raise ValueError(f"{name} has shape {array.shape}, expected {shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} has {int(np.sum(~np.isfinite(array)))} non-finite entries")
    array.setflags(write=False)
    return array


def _check_update(value: object) -> None:
    if value not in PROXIMAL_UPDATES:
        raise ValueError(f"proximal_update must be one of {', '.join(PROXIMAL_UPDATES)}, got {value!r}")


def mixing_coefficient(learning_rate: float | np.ndarray, sigma: float | np.ndarray) -> np.ndarray:
    """``κ = 1/(1 + ησ)`` (paper 003 eq. 14), elementwise, for the party's own learning rate ``η``."""
    rate = np.asarray(learning_rate, dtype=np.float64)
    if not np.all(np.isfinite(rate) & (rate > 0)):
        raise ValueError(f"the party's learning_rate must be a finite number > 0, got {learning_rate!r}")
    return 1.0 / (1.0 + rate * np.asarray(sigma, dtype=np.float64))


def merged_penalty(target: np.ndarray | None, sigma: np.ndarray, center: np.ndarray | None,
                   coef: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The one quadratic ``μ/2 ‖w − c‖²`` that has the gradient of ``σ/2 ‖w − z‖² + μ_A/2 ‖w − c_A‖²``.

    ``σ/2 ‖w − z‖² + μ_A/2 ‖w − c_A‖² = (σ + μ_A)/2 ‖w − (σ z + μ_A c_A)/(σ + μ_A)‖² + const``, so a
    trainer carries one proximal term whatever asks for it (Fed+/FedProx with ``proximal_update: loss``,
    FedAMP's eq. 6).  Rows (``(K, d)`` / ``(K,)``, or ``(d,)`` / scalars) with neither term have ``μ = 0``.
    Returns ``None`` when no row has a term.  With one term only, it is returned unchanged (bit for bit).
    """
    has_pull = target is not None and bool(np.any(sigma > 0))
    has_center = center is not None and bool(np.any(coef > 0))
    if not has_pull and not has_center:
        return None
    if not has_pull:
        return center, coef  # type: ignore[return-value]
    if not has_center:
        return target, sigma  # type: ignore[return-value]
    total = sigma + coef
    weight = np.divide(sigma, total, out=np.zeros_like(total), where=total > 0)
    weight = weight[..., None] if np.ndim(target) > np.ndim(weight) else weight
    return weight * target + (1.0 - weight) * center, total  # type: ignore[operator]


@dataclass(frozen=True)
class LocalObjective:
    """What the server asks of one party's local iterations besides their number.

    ``target`` ``z`` with weight ``sigma`` ``σ``: the Fed+ / FedProx pull, applied as
    ``proximal_update`` says — ``mix``: ``w ← κ w + (1 − κ) z`` after every optimizer step with
    ``κ = 1/(1 + ησ)`` for the party's own ``η`` (paper 003 eq. 14, :meth:`mix`); ``loss``:
    ``σ/2 ‖w − z‖²`` in the loss (paper 001 Alg. 1).  ``prox_coef/2 ‖w − prox_center‖²`` (FedAMP's
    paper 004 eq. 6) is always a loss term.  :meth:`penalty` is the loss's one quadratic term.  The
    default is plain local training.
    """

    target: np.ndarray | None = None
    sigma: float = 0.0
    proximal_update: ProximalUpdate = "mix"
    prox_center: np.ndarray | None = None
    prox_coef: float = 0.0

    def __post_init__(self) -> None:
        _check_update(self.proximal_update)
        sigma, coef = float(self.sigma), float(self.prox_coef)
        if not (np.isfinite(sigma) and sigma >= 0):
            raise ValueError(f"sigma must be a finite number >= 0, got {self.sigma!r}")
        if self.target is None and sigma > 0:
            raise ValueError(f"sigma={self.sigma!r} pulls towards a target, but target is None")
        if not (np.isfinite(coef) and coef >= 0):
            raise ValueError(f"prox_coef must be a finite number >= 0, got {self.prox_coef!r}")
        if coef > 0 and self.prox_center is None:
            raise ValueError(f"prox_coef={self.prox_coef!r} needs a prox_center")
        for name in ("target", "prox_center"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _vector(value, name, np.shape(value)))
                if getattr(self, name).ndim != 1:
                    raise ValueError(f"{name} must be a flat parameter vector, got shape {np.shape(value)}")
        object.__setattr__(self, "sigma", sigma)
        object.__setattr__(self, "prox_coef", coef)

    def check_size(self, d: int) -> None:
        """Raise ``ValueError`` unless the vectors have ``d`` entries (the trainer's parameter count)."""
        for name in ("target", "prox_center"):
            value = getattr(self, name)
            if value is not None and value.shape != (d,):
                raise ValueError(f"{name} has shape {value.shape}; the model has ({d},) parameters")

    def mix(self, learning_rate: float) -> tuple[np.ndarray, float] | None:
        """``(z, κ)`` of the post-step mix for a party with step size ``learning_rate``, or ``None``
        (no target, or ``proximal_update: loss``)."""
        if self.target is None or self.proximal_update != "mix":
            return None
        return self.target, float(mixing_coefficient(learning_rate, self.sigma))

    def penalty(self) -> tuple[np.ndarray, float] | None:
        """``(c, μ)`` of the loss's proximal term ``μ/2 ‖w − c‖²`` (:func:`merged_penalty`), or ``None``."""
        pull = self.target if self.proximal_update == "loss" else None
        merged = merged_penalty(pull, np.float64(self.sigma), self.prox_center, np.float64(self.prox_coef))
        return None if merged is None else (merged[0], float(merged[1]))


@dataclass(frozen=True)
class CohortPlan:
    """Round ``round_index``'s Local-Solve for the ``K`` active parties (row ``i``: party ``parties[i]``).

    ``start`` ``(K, d)`` (``None``: every party continues from its current parameters), ``steps``
    ``(K,)`` local iterations (>= 0), ``target`` ``(K, d)`` with ``sigma`` ``(K,)`` (``None`` and
    zeros: no pull) applied as ``proximal_update`` says (:class:`LocalObjective`), ``prox_center``
    ``(K, d)`` with ``prox_coef`` ``(K,)`` (``None`` and zeros: no FedAMP term).  Arrays are read-only
    float64 (``parties``/``steps`` int64): copies of the arrays given, except a float64 array that is
    read-only and owns its memory, which is kept as it is (the round loop hands over its new arrays so,
    :meth:`~portfed.federation.algorithms.RoundAlgorithm.plan`; for 20 CNNs each copy would be 266 MB).
    ``optimizer_state``: what each party does with its optimizer's state when it loads ``start`` —
    ``keep`` (the default), ``reset`` or ``average`` over the plan's parties (:data:`OPTIMIZER_STATES`;
    the batched portfolio engine implements all three, :meth:`portfed.agents.adam.AdamState.on_new_start`;
    other cohorts raise ``ValueError`` for the last two).
    ``rule``: a personalised baseline's local iteration (:class:`~portfed.federation.local_rules.LocalRule`,
    one row per party) that replaces the plain step; it excludes ``target`` and ``prox_center``.
    ``references`` ``(K, d)``: the models the server sent the parties (``r_k``: ``w̃`` or the FedAMP centre), for
    a cohort whose parties plan their own rounds (:func:`cohort_sends_private`); ``None`` otherwise.
    """

    round_index: int
    parties: np.ndarray
    steps: np.ndarray
    start: np.ndarray | None
    target: np.ndarray | None = None
    sigma: np.ndarray | None = None
    prox_center: np.ndarray | None = None
    prox_coef: np.ndarray | None = None
    optimizer_state: OptimizerState = "keep"
    proximal_update: ProximalUpdate = "mix"
    rule: LocalRule | None = None
    references: np.ndarray | None = None

    def __post_init__(self) -> None:
        check_int(self.round_index, "round_index", minimum=0)
        if self.optimizer_state not in OPTIMIZER_STATES:
            raise ValueError(f"optimizer_state must be one of {', '.join(OPTIMIZER_STATES)}, "
                             f"got {self.optimizer_state!r}")
        _check_update(self.proximal_update)
        parties = np.array(self.parties)
        if parties.ndim != 1 or (parties.size and not np.issubdtype(parties.dtype, np.integer)):
            raise ValueError(f"parties must be a 1-D array of party indices, got {self.parties!r}")
        parties = parties.astype(np.int64)
        if parties.size and parties.min() < 0:
            raise ValueError(f"party indices must be >= 0, got {parties.tolist()}")
        if np.unique(parties).size != parties.size:
            raise ValueError(f"parties must be distinct, got {parties.tolist()}")
        k = parties.size
        steps = np.array([check_int(e, "steps", minimum=0) for e in np.broadcast_to(self.steps, (k,)).tolist()],
                         dtype=np.int64)
        start = None if self.start is None else _vector(self.start, "start", np.shape(self.start))
        if start is not None and (start.ndim != 2 or start.shape[0] != k):
            raise ValueError(f"start must have shape ({k}, d), got {start.shape}")
        d = None if start is None else start.shape[1]
        for name in ("target", "prox_center", "references"):
            value = getattr(self, name)
            if value is not None:
                shape = np.shape(value)
                if len(shape) != 2 or shape[0] != k or (d is not None and shape[1] != d):
                    raise ValueError(f"{name} must have shape ({k}, {'d' if d is None else d}), got {shape}")
                d = shape[1]
                object.__setattr__(self, name, _vector(value, name, shape))
        sigma = np.array(np.broadcast_to(0.0 if self.sigma is None else self.sigma, (k,)), dtype=np.float64)
        if not np.all(np.isfinite(sigma) & (sigma >= 0)):
            raise ValueError(f"sigma must be finite numbers >= 0, got {sigma.tolist()}")
        if self.target is None and np.any(sigma > 0):
            raise ValueError("sigma > 0 pulls towards a target, but target is None")
        coef = np.array(np.broadcast_to(0.0 if self.prox_coef is None else self.prox_coef, (k,)), dtype=np.float64)
        if not np.all(np.isfinite(coef) & (coef >= 0)):
            raise ValueError(f"prox_coef must be finite numbers >= 0, got {coef.tolist()}")
        if self.prox_center is None and np.any(coef > 0):
            raise ValueError("prox_coef > 0 needs prox_center")
        if self.rule is not None:
            if self.target is not None or self.prox_center is not None:
                raise ValueError(f"local rule {self.rule.kind!r} replaces the plain step: a plan with a rule "
                                 "takes no target or prox_center")
            if d is None:
                raise ValueError(f"local rule {self.rule.kind!r} needs a start")
            self.rule.check(k, d)
        for name, value in (("parties", parties), ("steps", steps), ("start", start), ("sigma", sigma),
                            ("prox_coef", coef)):
            if value is not None:
                value.setflags(write=False)
            object.__setattr__(self, name, value)

    @property
    def size(self) -> int:
        """``K``, the number of parties in the plan."""
        return int(self.parties.size)

    def mix(self, learning_rates: float | np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """``(z (K, d), κ (K,))`` of the post-step mix, ``κ_i = 1/(1 + η_i σ_i)`` for the parties' own
        step sizes ``learning_rates`` (one, or ``(K,)``); ``None`` without targets or with ``loss``."""
        if self.target is None or self.proximal_update != "mix":
            return None
        return self.target, mixing_coefficient(np.broadcast_to(learning_rates, (self.size,)), self.sigma)

    def penalty(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(c (K, d), μ (K,))`` of the loss's proximal term (:func:`merged_penalty`), or ``None``."""
        pull = self.target if self.proximal_update == "loss" else None
        return merged_penalty(pull, self.sigma, self.prox_center, self.prox_coef)  # type: ignore[arg-type]

    def objective(self, row: int) -> LocalObjective:
        """Row ``row``'s :class:`LocalObjective` (for trainers that train one party at a time)."""
        return LocalObjective(
            target=None if self.target is None else self.target[row],
            sigma=float(self.sigma[row]),  # type: ignore[index]
            proximal_update=self.proximal_update,
            prox_center=None if self.prox_center is None else self.prox_center[row],
            prox_coef=float(self.prox_coef[row]),  # type: ignore[index]
        )

    def subset(self, rows: np.ndarray | Sequence[int], steps: np.ndarray | Sequence[int] | None = None,
               *, keep_start: bool = True) -> CohortPlan:
        """The plan of rows ``rows`` only, with ``steps`` instead of theirs when given and, unless
        ``keep_start``, no ``start`` (the parties continue from their current parameters)."""
        rows = np.asarray(rows, dtype=np.int64)

        def pick(array: np.ndarray | None) -> np.ndarray | None:
            return None if array is None else array[rows]

        return CohortPlan(round_index=self.round_index, parties=self.parties[rows],
                          steps=self.steps[rows] if steps is None else np.asarray(steps),
                          start=pick(self.start) if keep_start else None, target=pick(self.target),
                          sigma=pick(self.sigma), prox_center=pick(self.prox_center), prox_coef=pick(self.prox_coef),
                          optimizer_state=self.optimizer_state if keep_start else "keep",
                          proximal_update=self.proximal_update, rule=None if self.rule is None else self.rule.take(rows),
                          references=pick(self.references))


@dataclass(frozen=True)
class CohortResult:
    """What a cohort returns for a plan: ``params`` ``(K, d)`` and, per party, the means over its local
    steps of the trainer's reward (portfolios: the batch mean log return; supervised tasks: the batch
    accuracy or −MSE) and of its loss (NaN for a party that ran no step); ``train_cash``, for portfolio
    parties, the mean over its steps of the cash weight its policy chose (``None`` for tasks without
    portfolios) — the training-time view of a collapse into cash.

    ``rejected`` lists ``(row, reason)`` for the rows whose message the cohort could not use (e.g. a
    party that returned parameters of the wrong size: its row is NaN); the round loop quarantines
    them together with the non-finite rows.  ``personal``: what a plan's local rule leaves with the
    parties besides their messages (:class:`~portfed.federation.local_rules.RuleOutput`).
    """

    params: np.ndarray
    train_reward: np.ndarray
    train_loss: np.ndarray
    rejected: tuple[tuple[int, str], ...] = ()
    personal: RuleOutput | None = None
    train_cash: np.ndarray | None = None

    @classmethod
    def from_records(cls, params: np.ndarray, records: Sequence[Sequence[object]],
                     rejected: Sequence[tuple[int, str]] = ()) -> CohortResult:
        """From per-party step records with ``mean_log_return`` and ``loss`` attributes, and ``cash`` where
        they are portfolio steps (:class:`~portfed.agents.records.StepRecord`)."""
        def mean(rows: Sequence[object], field: str) -> float:
            return float(np.mean([getattr(r, field) for r in rows])) if len(rows) else float("nan")

        portfolios = any(hasattr(r, "cash") for rows in records for r in rows)
        return cls(params=np.asarray(params, dtype=np.float64),
                   train_reward=np.array([mean(r, "mean_log_return") for r in records]),
                   train_loss=np.array([mean(r, "loss") for r in records]), rejected=tuple(rejected),
                   train_cash=np.array([mean(r, "cash") for r in records]) if portfolios else None)

    @classmethod
    def from_sums(cls, params: np.ndarray, reward_sums: np.ndarray, loss_sums: np.ndarray, cash_sums: np.ndarray,
                  steps: np.ndarray) -> CohortResult:
        """From each portfolio party's sums over its ``steps`` steps of ``mean_log_return``, ``loss`` and
        ``cash`` (NaN for a party that took none, as the mean of no records)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return cls(params=np.asarray(params, dtype=np.float64), train_reward=reward_sums / steps,
                       train_loss=loss_sums / steps, train_cash=cash_sums / steps)

    def usable(self) -> np.ndarray:
        """``(K,)``: the rows whose trained model the party keeps (finite, not rejected by the cohort)."""
        rejected = [row for row, _ in self.rejected]
        return np.all(np.isfinite(self.params), axis=1) & ~np.isin(np.arange(self.params.shape[0]), rejected)

    def checked(self, plan: CohortPlan, d: int) -> CohortResult:
        """This result as float64 after checking it answers ``plan`` with ``d``-parameter models (the
        parameters are not copied when they are float64 already: every cohort returns a new array).

        Raises ``ValueError`` for a result of the wrong shape (a cohort's bug); non-finite rows are
        not an error here — they are one party's bad message, for the round loop to quarantine.
        """
        params = np.asarray(self.params, dtype=np.float64)
        if params.shape != (plan.size, d):
            raise ValueError(f"round {plan.round_index}: the cohort returned parameters of shape {params.shape}, "
                             f"expected {(plan.size, d)}")
        for name in ("train_reward", "train_loss", "train_cash"):
            if (name != "train_cash" or self.train_cash is not None) and np.shape(getattr(self, name)) != (plan.size,):
                raise ValueError(f"round {plan.round_index}: the cohort returned {name} of shape "
                                 f"{np.shape(getattr(self, name))}, expected ({plan.size},)")
        return CohortResult(params=params, train_reward=np.asarray(self.train_reward, dtype=np.float64),
                            train_loss=np.asarray(self.train_loss, dtype=np.float64), rejected=self.rejected,
                            personal=self.personal,
                            train_cash=None if self.train_cash is None else np.asarray(self.train_cash, dtype=np.float64))


@runtime_checkable
class Cohort(Protocol):
    """N parties behind one call: ``train(plan)`` runs the plan's local iterations and returns their models.

    A cohort that runs local rules of the personalised baselines (a plan's ``rule``) says which in a
    ``local_rules`` attribute (a set of :data:`~portfed.federation.local_rules.RULES`); one without it
    runs none (:func:`cohort_rules`).  One whose parties plan their own round and clip and noise their own
    messages (local DP where the data is) says so in a ``private_messages`` attribute (:func:`cohort_sends_private`).
    """

    @property
    def n_parties(self) -> int: ...

    def train(self, plan: CohortPlan) -> CohortResult: ...


def cohort_rules(cohort: object) -> frozenset[str]:
    """The local rules ``cohort`` declares it runs (its ``local_rules``; none when it declares nothing)."""
    return frozenset(getattr(cohort, "local_rules", frozenset()))


def cohort_sends_private(cohort: object) -> bool:
    """Whether ``cohort``'s parties plan their own rounds from the plan's ``references`` and send their own local-DP
    messages (its ``private_messages``; ``False`` when it declares nothing), which the round loop must not noise
    again: the Flower nodes under ``privacy.mode: local``."""
    return bool(getattr(cohort, "private_messages", False))
