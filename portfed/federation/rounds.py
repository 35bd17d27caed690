"""The round loop, one for every cohort (paper 003 Alg. 1 lines 4–14; DESIGN §5).

Round ``t`` (:func:`run_round`) reads::

    active = sample_active(state, N, K)                 # seeded
    plan = algorithm.plan(state, active, steps)         # each active party's Local-Solve (and local rule)
    result = cohort.train(plan)                         # per-party trainers, one batched computation, or
                                                        # parties on other machines: the loop cannot tell
    finish_round(algorithm.server, state, plan, result) # quarantine, the server rule, the records
    algorithm.after_round(state, plan, result, ...)     # a personalised baseline's own work

The plan is built from each party's model ``w_k`` and the model the server sent it (``w̃``, or its
cloud model ``u_k`` for FedAMP; :mod:`.algorithms`); the server rule receives the ``(K', d)`` array
of the usable new models and nothing else from the parties; inactive parties keep their models (and
FedAMP centres).  A cohort runs the local rules it declares (:func:`~portfed.federation.cohort.cohort_rules`);
:func:`run_rounds` refuses, before any round, an algorithm whose plans need another.

**The server never crashes on a party's message.**  A non-finite message, one the cohort rejected
(wrong size), or — with ``screen_factor`` — one whose update is far larger than the round's median
is quarantined for that round (:func:`quarantine`): excluded from the server step and recorded with
the party and the reason; the round goes on with the others, and a round with no usable message
keeps the previous models.  Faulty and hostile parties can be injected by configuration
(:mod:`~portfed.federation.faults`).

**Privacy.**  ``run_rounds(privacy=…)`` (:class:`SharingPrivacy`, :mod:`portfed.privacy`) replaces what the
parties send (local DP: clipped and noised messages, before faults and quarantine) or the rule the server
steps with (central DP: the rule on the noisy fixed-denominator mean of the clipped messages); the
engines cannot tell.  A cohort whose parties clip and noise their own messages (local DP on the Flower
deployment, where the server must never see a raw model) declares it
(:func:`~portfed.federation.cohort.cohort_sends_private`): the loop hands it the references ``r_k`` in the
plan, and what it returns is what the server keeps (the loop's own numbers when the parties draw the
loop's noise, :func:`~portfed.privacy.mechanism.local_messages`).

Everything the loop needs to continue is in :class:`~portfed.federation.state.FederationState`;
its ``state_dict()`` can be saved between rounds (the ``callback`` is the place) and
``run_rounds(..., state=...)`` resumes identically.  The parties' own state (optimizer moments,
samplers) is theirs to checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from portfed._progress import make_progress
from portfed.federation.algorithms import Algorithm, require_rules, solved_by_parties
from portfed.federation.cohort import (
    Cohort,
    CohortPlan,
    CohortResult,
    OptimizerState,
    ProximalUpdate,
    cohort_rules,
    cohort_sends_private,
)
from portfed.federation.faults import Fault, FaultInjector
from portfed.federation.party_cohort import LocalTrainer, as_cohort
from portfed.federation.records import (
    ChangeStats,
    RoundRecord,
    party_records,
    round_changes,
    row_distances,
)
from portfed.federation.server import ServerContext, ServerRule, server_step
from portfed.federation.state import FederationState
from portfed.validation import check_int, check_number, check_seed

logger = logging.getLogger(__name__)


class SharingPrivacy(Protocol):
    """A privacy mechanism on what the parties share (:class:`portfed.privacy.PartyPrivacy`): it may refuse
    an algorithm, wrap the server rule (central DP) and replace the messages the parties send (local DP)."""

    def check(self, algorithm: Algorithm, weighted: bool = False, screened: bool = False,
              shared_optimizer: bool = False) -> None: ...

    def server_rule(self, rule: ServerRule, cohort_size: int, seed: int) -> ServerRule: ...

    def messages(self, models: np.ndarray, references: np.ndarray, parties: np.ndarray, round_index: int,
                 seed: int) -> np.ndarray | None: ...


@dataclass(frozen=True)
class FederationRun:
    """The state after the last round and the records of the rounds run in this call."""

    state: FederationState
    records: list[RoundRecord]


RoundCallback = Callable[[int, FederationState, RoundRecord], None]


def _per_party_steps(local_steps: int | Sequence[int], n: int) -> list[int]:
    steps = [local_steps] * n if isinstance(local_steps, int | np.integer) else list(local_steps)
    if len(steps) != n:
        raise ValueError(f"local_steps must be an int or one int per party ({n}), got {len(steps)} values")
    return [check_int(e, f"local_steps of party {k}", minimum=1) for k, e in enumerate(steps)]


def sample_active(state: FederationState, n: int, k_per_round: int) -> np.ndarray:
    """Round ``state.round_index``'s active parties: all, or ``k_per_round`` of ``n`` drawn from ``state.rng``."""
    return np.arange(n) if k_per_round == n else np.sort(state.rng.choice(n, size=k_per_round, replace=False))


def quarantine(plan: CohortPlan, result: CohortResult, references: np.ndarray | None,
               screen_factor: float | None) -> dict[int, str]:
    """``{row: reason}`` of the messages the server must not use: rows the cohort rejected, non-finite
    rows and — with ``screen_factor`` — rows whose update ``‖w_k − r_k‖`` exceeds ``screen_factor``
    times the median update norm of the round's finite messages (a norm screen against scaling
    attacks; off by default, since honest heterogeneous parties can differ by large factors).
    ``references`` (row k: ``r_k``) are needed by the screen only."""
    if screen_factor is not None and references is None:
        raise ValueError("the update-norm screen needs the references the parties were sent")
    bad = dict(result.rejected)
    finite = np.all(np.isfinite(result.params), axis=1)
    for row in np.flatnonzero(~finite).tolist():
        bad.setdefault(row, f"non-finite update ({int(np.sum(~np.isfinite(result.params[row])))} entries)")
    if screen_factor is not None:
        norms = np.linalg.norm(result.params - references, axis=1)
        usable = finite & ~np.isin(np.arange(plan.size), list(bad))
        if usable.any():
            limit = screen_factor * float(np.median(norms[usable]))
            for row in np.flatnonzero(usable & (norms > limit)).tolist():
                bad[row] = f"update norm {norms[row]:.3g} > {screen_factor:g} × median {limit / screen_factor:.3g}"
    return bad


def finish_round(server: ServerRule, state: FederationState, plan: CohortPlan, result: CohortResult,
                 weights: np.ndarray | None, *, messages: np.ndarray | None = None,
                 faults: dict[int, str] | None = None, screen_factor: float | None = None,
                 parts: Mapping[str, slice] | None = None, change_records: bool = True) -> RoundRecord:
    """The ``server`` rule's step on the usable messages of the active parties and the round's records.

    ``result.params`` are the models the parties trained (what each keeps); ``messages`` what they
    sent (default: the same; a faulty party's message differs, :mod:`.faults`).  Quarantined messages
    (:func:`quarantine`) are excluded from the server step.  A party keeps the model it trained when
    that model is usable (finite, not rejected by the cohort) — a fault corrupts the message, not the
    party — and its previous model (and FedAMP centre) otherwise, as if it had not been sampled; with
    no usable message the server keeps its models.  Updates ``state`` in place (party models, global
    model, FedAMP centres, the server's extras, round index).  Without ``change_records`` the records'
    aggregation jumps, round changes and distances to the global model are NaN (their passes over the
    models are skipped).
    """
    t, n, active = state.round_index, state.party_models.shape[0], plan.parties
    faults = {} if faults is None else faults
    parts = {} if parts is None else parts
    sent = result.params if messages is None else messages
    references = None if screen_factor is None else state.references(active)
    bad = quarantine(plan, dataclasses.replace(result, params=sent), references, screen_factor)
    for row, reason in sorted(bad.items()):
        logger.info("round %d: quarantined party %d's message: %s", t, int(active[row]), reason)
    kept = result.usable()
    kept_params = result.params if kept.all() else result.params[kept]
    if change_records:
        jumps, moved = round_changes(plan, state, kept, kept_params, parts)
    else:
        jumps, moved = ChangeStats.filled(plan.size, parts, np.nan), ChangeStats.filled(n, parts, np.nan)
    state.party_models[active[kept]] = kept_params
    good = np.array([row not in bad for row in range(plan.size)], dtype=bool)
    iterations, converged = server_update(server, state, sent if good.all() else sent[good], active[good], weights)
    state.round_index = t + 1
    with np.errstate(over="ignore", invalid="ignore"):
        distances = row_distances(state.party_models, state.global_model) if change_records else np.full(n, np.nan)
    return RoundRecord(round=t, active=tuple(active.tolist()), aggregator_iterations=iterations,
                       aggregator_converged=converged,
                       parties=party_records(plan, result, n, jumps, moved, distances, faults, bad, parts),
                       quarantined=tuple((int(active[row]), reason) for row, reason in sorted(bad.items())))


def server_update(server: ServerRule, state: FederationState, received: np.ndarray, used: np.ndarray,
                  weights: np.ndarray | None) -> tuple[int, bool]:
    """The ``server`` step on the ``received`` messages of parties ``used`` (nothing when there are none, or
    when their weights are all 0, unless the rule ``releases_without_replies``, as central DP's does: then it steps
    on ``w̃`` alone, a zero update): the new ``w̃``, their centres and the server's extras into ``state``.
    Returns the solver's iterations and whether it converged."""
    t = state.round_index
    if used.size and weights is not None and not weights[used].sum() > 0:
        logger.warning("round %d: every usable message has party weight 0; the server keeps its models", t)
        return 0, True
    if not used.size and not getattr(server, "releases_without_replies", False):
        return 0, True
    if not used.size:  # central DP releases a noisy w̃ every round: no reply is a zero update, w̃ itself
        received = state.global_model[None, :]
    output = server_step(server, received, ServerContext(
        global_model=state.global_model.copy(), round_index=t, weights=None if weights is None else weights[used],
        extras=state.extras))
    if not output.converged:
        logger.warning("round %d: the %s server solver stopped after %d iterations without converging",
                       t, state.algorithm, output.iterations)
    state.global_model = output.global_model
    if output.centers is not None:
        state.centers[used] = output.centers  # type: ignore[index]
    state.extras.update(output.extras)
    return output.iterations, output.converged


def run_round(cohort: Cohort, algorithm: Algorithm, state: FederationState, steps: Sequence[int], k_per_round: int,
              weights: np.ndarray | None, injector: FaultInjector | None = None,
              screen_factor: float | None = None, optimizer_state: OptimizerState = "keep",
              proximal_update: ProximalUpdate = "mix", parts: Mapping[str, slice] | None = None,
              change_records: bool = True, privacy: SharingPrivacy | None = None) -> RoundRecord:
    """One round: sample, apply ``drop``/``straggle`` faults, plan, ``cohort.train(plan)``, the parties'
    messages (clipped and noised by local ``privacy`` — unless the cohort's parties did it themselves,
    :func:`~portfed.federation.cohort.cohort_sends_private`: then the plan carries the references ``r_k`` and
    the cohort's models *are* the messages, which become the server's copies of the parties' models),
    corrupt the faulty parties' messages, quarantine, server step (through central ``privacy``'s rule, with the planned ``k_per_round`` as its denominator),
    then the algorithm's own work (``after_round``; updates ``state`` in place)."""
    t, d = state.round_index, state.party_models.shape[1]
    active = sample_active(state, cohort.n_parties, k_per_round)
    faults: dict[int, str] = {}
    if injector is not None:
        active, dropped = injector.present(t, active)
        faults.update({k: "drop" for k in dropped})
        steps = injector.steps(t, active, steps)
    plan = algorithm.plan(state, active, steps, optimizer_state, proximal_update)
    private = cohort_sends_private(cohort)
    if private:  # the parties plan from their own w_k and r_k: the server's copies of w_k are their noisy messages
        plan = dataclasses.replace(plan, references=state.references(active))
    sent_global = state.global_model.copy()
    if plan.size:
        result = cohort.train(plan).checked(plan, d)
    else:
        result = CohortResult(params=np.empty((0, d)), train_reward=np.empty(0), train_loss=np.empty(0))
    sent = None
    if privacy is not None and plan.size and not private:
        sent = privacy.messages(result.params, state.references(active), active, t, state.seed)
    if injector is not None and plan.size:
        sent, applied = injector.corrupt(t, active, result.params if sent is None else sent,
                                         state.references(active), state.party_models[active])
        faults.update(applied)
    server = algorithm.server if privacy is None else privacy.server_rule(algorithm.server, k_per_round, state.seed)
    record = finish_round(server, state, plan, result, weights, messages=sent, faults=faults,
                          screen_factor=screen_factor, parts=parts, change_records=change_records)
    algorithm.after_round(state, plan, result, sent_global, cohort)
    return record


def run_rounds(
    cohort: Cohort | Sequence[LocalTrainer],
    algorithm: Algorithm,
    rounds: int,
    local_steps: int | Sequence[int],
    *,
    k_per_round: int | None = None,
    seed: int,
    init_params: np.ndarray,
    callback: RoundCallback | None = None,
    progress: bool = False,
    state: FederationState | None = None,
    party_weights: Sequence[float] | None = None,
    faults: Sequence[Fault] = (),
    screen_factor: float | None = None,
    optimizer_state: OptimizerState = "keep",
    proximal_update: ProximalUpdate = "mix",
    parts: Mapping[str, slice] | None = None,
    change_records: bool = True,
    privacy: SharingPrivacy | None = None,
) -> FederationRun:
    """Run federated rounds until ``rounds`` rounds have been completed in total.

    Args:
        cohort: the N parties: a :class:`~portfed.federation.cohort.Cohort` (``train(plan)``), or a
            sequence of per-party trainers (``local_train``), wrapped in the per-party adapter
            :class:`~portfed.federation.party_cohort.PartyCohort`.
        algorithm: the algorithm (:func:`~portfed.federation.algorithms.make_algorithm`); its plans' local
            rules must be among those the cohort runs (:func:`~portfed.federation.cohort.cohort_rules`).
        rounds: the total number of rounds; a resumed ``state`` that has completed ``r`` rounds
            runs rounds ``r … rounds − 1``.
        local_steps: ``E``, or one ``E_k`` per party (stragglers).
        k_per_round: parties sampled per round without replacement (all when ``None``).
        seed: seeds the party sampling.
        init_params: ``(d,)`` initial model shared by all parties, or ``(N, d)`` one per party.
        callback: ``callback(round, state, record)`` after each round (e.g. to checkpoint
            ``state.state_dict()``).
        progress: show a rich progress bar.
        state: resume from this state instead of starting at round 0 (it must come from the same
            algorithm, number of parties, model size and seed).
        party_weights: ``(N,)`` non-negative weights of the parties in the aggregate and in the
            FedMGDA+ prior (uniform when ``None``).
        faults: faulty or hostile parties (:mod:`~portfed.federation.faults`), seeded by ``seed``.
        screen_factor: quarantine messages whose update norm exceeds this multiple of the round's
            median (:func:`quarantine`; off when ``None``).  Non-finite messages are always quarantined.
        optimizer_state: what each party does with its optimizer state when it receives the server's
            message: ``keep``, ``reset`` or ``average`` (:class:`~portfed.federation.cohort.CohortPlan`,
            which refuses any other value in round 0, before any training).
        proximal_update: how each party applies the pull towards its Fed+ / FedProx target: ``mix``
            after each optimizer step (paper 000 eq. 6) or ``loss``, a term of the loss (paper 001 Alg. 1).
        parts: named slices of the vector whose changes are recorded apart (:class:`PartyRoundRecord`).
        change_records: compute every party's aggregation jump, round change and distance to the global
            model (:class:`PartyRoundRecord`); when ``False`` they are NaN and their passes over the
            ``(N, d)`` models are skipped (the supervised benchmarks store none of them).
        privacy: party-level differential privacy of what the parties share (:mod:`portfed.privacy`):
            checked against the algorithm and the party weights before any round.

    Returns:
        the final state and the records of the rounds run by this call.
    """
    cohort = as_cohort(cohort)
    n = int(cohort.n_parties)
    if n < 1:
        raise ValueError("run_rounds needs at least one party")
    require_rules(algorithm, cohort_rules(cohort), f"this cohort ({type(cohort).__name__})")
    steps = _per_party_steps(local_steps, n)
    k_active = n if k_per_round is None else k_per_round
    if isinstance(k_active, bool) or not isinstance(k_active, int | np.integer) or not 1 <= k_active <= n:
        raise ValueError(f"k_per_round must be an integer in [1, {n}], got {k_per_round!r}")
    weights = None
    if party_weights is not None:
        weights = np.asarray(party_weights, dtype=np.float64)
        if weights.shape != (n,) or not np.all(np.isfinite(weights)) or np.any(weights < 0):
            raise ValueError(f"party_weights must be {n} finite non-negative numbers, got {party_weights!r}")
    if state is None:
        state = FederationState.initial(algorithm, init_params, n, seed, weights)
    else:
        d = np.asarray(init_params).shape[-1]
        if state.algorithm != algorithm.name or state.party_models.shape != (n, d) or state.seed != check_seed(seed):
            raise ValueError(
                f"cannot resume: state is for {state.algorithm!r}, {state.party_models.shape} models, seed "
                f"{state.seed}; this call is for {algorithm.name!r}, ({n}, {d}) models, seed {seed}"
            )
    if privacy is not None:
        privacy.check(algorithm, weighted=weights is not None, screened=screen_factor is not None,
                      shared_optimizer=optimizer_state == "average")
    _check_private_cohort(cohort, algorithm, privacy)
    injector = FaultInjector(faults, n, seed) if faults else None
    if screen_factor is not None:
        screen_factor = check_number(screen_factor, "screen_factor", minimum=1.0, strict_min=True)
    if isinstance(rounds, bool) or not isinstance(rounds, int | np.integer) or rounds < state.round_index:
        raise ValueError(f"rounds must be an integer >= the {state.round_index} rounds already run, got {rounds!r}")
    records: list[RoundRecord] = []
    with make_progress(disable=not progress) as bar:
        task = bar.add_task(algorithm.name, total=int(rounds), completed=state.round_index)
        while state.round_index < rounds:
            record = run_round(cohort, algorithm, state, steps, int(k_active), weights, injector, screen_factor,
                               optimizer_state, proximal_update, parts, change_records, privacy)
            records.append(record)
            bar.advance(task)
            if callback is not None:
                callback(record.round, state, record)
    _warn_quarantined(algorithm.name, records)
    return FederationRun(state=state, records=records)


def _check_private_cohort(cohort: Cohort, algorithm: Algorithm, privacy: SharingPrivacy | None) -> None:
    """``ValueError`` (one line) when the cohort's parties send their own local-DP messages
    (:func:`~portfed.federation.cohort.cohort_sends_private`) but the run has no privacy, or the algorithm
    keeps party state on the server that the parties cannot make from their own models."""
    if not cohort_sends_private(cohort):
        return
    if privacy is None:
        raise ValueError(f"{type(cohort).__name__}'s parties clip and noise their own messages, but the run has no privacy")
    if not solved_by_parties(algorithm):
        raise ValueError(f"{algorithm.name!r} keeps each party's personal state on the server, made from the party's "
                         "own model: its parties cannot make their rounds from their noisy messages")


def _warn_quarantined(name: str, records: Sequence[RoundRecord]) -> None:
    """One warning per party whose messages were quarantined in ``records`` (each round is logged at INFO
    and recorded in the round records): how many rounds, the first and last, the first reason."""
    hits: dict[int, list[tuple[int, str]]] = {}
    for record in records:
        for party, reason in record.quarantined:
            hits.setdefault(party, []).append((record.round, reason))
    for party, found in sorted(hits.items()):
        logger.warning("%s: party %d's message was quarantined in %d round(s) (%d…%d), e.g. %s",
                       name, party, len(found), found[0][0], found[-1][0], found[0][1])
