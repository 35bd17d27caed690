"""Secure aggregation on the deployment: Flower's SecAgg+ drives a round of the mean family, so the
server learns only the parties' mean, never a party's model (issue 49).

**Route.**  Flower 1.41's :class:`~flwr.server.workflow.SecAggPlusWorkflow` is written for Flower's
own round loop (a ``LegacyContext`` with a ``Strategy``), but its four stages — ``setup`` (public
keys), ``share_keys`` (encrypted Shamir shares of each node's mask seeds), ``collect_masked_vectors``
(each node trains, quantises and masks its model) and ``unmask`` (the shares of the survivors' and
the dropped nodes' seeds remove the masks from the sum) — are public methods taking a grid, a context
and a :class:`~flwr.server.workflow.secure_aggregation.secaggplus_workflow.WorkflowState`.
:func:`secure_mean` calls them once per round from portfed's round loop (:class:`FlowerCohort
<portfed.flower.cohort.FlowerCohort>` in secure mode): a one-round ``LegacyContext`` whose strategy
(:class:`_Capture`) names the round's nodes and keeps the unmasked aggregate, portfed's per-party
train message (:func:`portfed.flower.wire.encode_train`) as each node's fit instructions, and the
grid behind portfed's bounded exchange (:class:`_BoundedGrid`).  On the nodes, Flower's
``secaggplus_mod`` wraps the ClientApp's train handler (:func:`secure_train_mod`; a plain train
message passes by).  No cryptography is portfed's: keys, shares, masks and quantisation are Flower's.

**What the server gets.**  Every node replies with weight 1 (``num_examples``; ``max_weight`` 1), so
the unmasked vector is the mean ``w̄ = (1/n) Σ_k w_k`` of the ``n`` nodes whose masked vector arrived
(a node that drops out later is unmasked by its neighbours' shares; a round with fewer than the
reconstruction threshold halts, no message is usable and the server keeps its models).  The sum is
``n w̄``.  The parties' training metrics (reward, loss, cash: three scalars) travel in clear, except under
``evaluation.disclosure: averaged``, where they follow the model in the masked vector
(:mod:`portfed.flower.secure_metrics`).

**Quantisation.**  Each coordinate ``x`` of a party's model is quantised to the grid of step
``Δ = 2c / Q`` on ``[−c, c]`` (``c``: :attr:`SecAggSettings.clipping_range`, ``Q``:
``quantization_range``) by stochastic rounding, which is unbiased with ``|error| < Δ``; so the
mean's error is below ``Δ`` in every coordinate (its standard deviation at most ``Δ / (2√n)``).
With ``c = 8`` and ``Q = 2²⁴``: ``Δ = 9.5e-7``, the order of float32 round-off of parameters near 8.
A coordinate outside ``[−c, c]`` would be clipped by SecAgg+: the node refuses to send it instead
(its reply is an error, the protocol drops it, the round goes on without it; :func:`check_range`).
The integers are summed modulo ``M = 2³²``: ``n Q < M`` bounds the parties of a round (255).
The rounding draws from NumPy's global generator in the ClientApp's process; the train handler
seeds it from the run, round and party (:func:`rounding_seed`), so a run is reproducible.

**Which algorithms.**  Those whose rounds need only the mean (:data:`SECURE_ALGORITHMS`), and FedAvg+ when every
party makes its own round (:data:`OWN_ROUND_SECURE_ALGORITHMS`, ``privacy.mode: local``: the node noises its
message before it is quantised and masked); the others are refused with the reason (:func:`check_secure`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.common import (
    Code,
    FitIns,
    FitRes,
    Parameters,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.common.secure_aggregation.secaggplus_constants import Key as SecAggKey
from flwr.compat.common.recorddict_compat import fitres_to_recorddict
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD, Key
from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState

from portfed.validation import check_number

#: The algorithms whose rounds need the parties' mean only: they start every party from ``w̃`` (λ = 1),
#: pull no party towards a target of its own, and their server step is a function of the mean.
SECURE_ALGORITHMS = frozenset({"fedavg", "fedprox", "fedadam", "fedyogi", "fedadagrad"})
#: The algorithms whose server step is a function of the mean but whose Local-Solve needs the party's own ``w_k``
#: (FedAvg+: start ``w_k``, target ``z_k = w̃ + prox_ρ(w_k − w̃)``): secure when every party makes its own round,
#: as under ``privacy.mode: local`` (:meth:`portfed.flower.node.PartyNode.train_private`).
OWN_ROUND_SECURE_ALGORITHMS = frozenset({"fedavg+"})
_SUM = "SecAgg+ lets the server learn only the sum of the parties' models"
_MEDIAN = f"a median is not a function of the sum, and {_SUM}"
_PER_PARTY = f"its server needs each party's own model w_k, and {_SUM}"
_REFUSALS = {
    "rfa": _MEDIAN, "comed": _MEDIAN, "fedgeomed+": _MEDIAN, "fedcomed+": _MEDIAN,
    "hybrid+": f"its per-layer aggregate may be a median; {_MEDIAN}",
    "fedavg+": f"its personal targets z_k = w̃ + prox_ρ(w_k − w̃) are computed by the server from each w_k, and {_SUM}",
    "local": "local training sends nothing to aggregate",
    "fedmgda+": f"its server weighs each party's update w_k − w̃, and {_SUM}",
    "fedavg-n": f"its server normalises each party's update w_k − w̃, and {_SUM}",
    "fedamp": f"its server sends each party a centre u_k built from every w_k, and {_SUM}",
    "heurfedamp": f"its server sends each party a centre u_k built from every w_k, and {_SUM}",
    "fedavg-ft": f"each party's fine-tuned model comes back to the server to be deployed, and {_SUM}",
    "fedprox-ft": f"each party's fine-tuned model comes back to the server to be deployed, and {_SUM}",
}
SECURE_RECORD = "portfed_secure"
#: Q: integers in [0, Q] per coordinate; M: the modulus of the masked sums (Flower's default, 2³²).
QUANTIZATION_RANGE, MODULUS_RANGE = 2 ** 24, 2 ** 32


def check_secure(algorithm: str, own_rounds: bool = False) -> None:
    """Nothing for an algorithm of :data:`SECURE_ALGORITHMS` (with ``own_rounds``, when the parties make their own
    rounds, also of :data:`OWN_ROUND_SECURE_ALGORITHMS`); ``ValueError`` with the reason otherwise."""
    allowed = SECURE_ALGORITHMS | (OWN_ROUND_SECURE_ALGORITHMS if own_rounds else frozenset())
    if algorithm not in allowed:
        why = _REFUSALS.get(algorithm, _PER_PARTY)
        if algorithm in OWN_ROUND_SECURE_ALGORITHMS:
            why += "; under privacy.mode local each node computes its own"
        raise ValueError(f"secure aggregation refuses {algorithm!r}: {why} (it runs {', '.join(sorted(allowed))})")


@dataclass(frozen=True)
class SecAggSettings:
    """SecAgg+ for a round (module docstring): ``clipping_range`` ``c`` (every parameter must lie in
    ``[−c, c]``); ``reconstruction_threshold``: the fraction of a node's shares (one with every node of
    the round) needed to rebuild its secrets, at least 2 — a round goes on while that many nodes
    answer, and fewer nodes colluding with the server cannot unmask a party."""

    clipping_range: float = 8.0
    reconstruction_threshold: float = 0.6

    def __post_init__(self) -> None:
        check_number(self.clipping_range, "clipping_range", minimum=0.0, strict_min=True)
        check_number(self.reconstruction_threshold, "reconstruction_threshold", minimum=0.0, strict_min=True)
        if self.reconstruction_threshold > 1:
            raise ValueError(f"reconstruction_threshold is a fraction of the shares, got {self.reconstruction_threshold}")

    @property
    def step(self) -> float:
        """``Δ = 2c / Q``: the quantisation step, a bound on every coordinate's error of the mean."""
        return 2 * self.clipping_range / QUANTIZATION_RANGE

    #: The most nodes a round can sum without overflowing the modulus (``n Q < M``).
    max_parties: ClassVar[int] = MODULUS_RANGE // QUANTIZATION_RANGE - 1

    def workflow(self, timeout: float) -> SecAggPlusWorkflow:
        return SecAggPlusWorkflow(num_shares=1.0, reconstruction_threshold=float(self.reconstruction_threshold),
                                  max_weight=1.0, clipping_range=float(self.clipping_range),
                                  quantization_range=QUANTIZATION_RANGE, modulus_range=MODULUS_RANGE, timeout=timeout)

    def mark(self, content: RecordDict) -> RecordDict:
        """A train message ``content`` for a secure round: it names the clipping range the node checks."""
        content[SECURE_RECORD] = ConfigRecord({"clipping_range": float(self.clipping_range)})
        return content


# ---------------------------------------------------------------------------------------- the nodes
def secure_clipping_range(content: RecordDict) -> float | None:
    """The clipping range of a secure round's train message (``None``: a plain train message)."""
    record = content.config_records.get(SECURE_RECORD)
    return None if record is None else float(cast(float, record["clipping_range"]))


def check_range(params: np.ndarray, clipping_range: float) -> None:
    """``ValueError`` naming the largest coordinate when one lies outside ``[−c, c]`` (SecAgg+ would clip it)."""
    worst = int(np.argmax(np.abs(params))) if params.size else 0
    if params.size and not abs(params[worst]) <= clipping_range:
        raise ValueError(f"refused: parameter {worst} is {params[worst]:.6g}, outside SecAgg+'s clipping range "
                         f"±{clipping_range:g} (the masked sum would clip it; raise the range)")


def rounding_seed(run: str, round_index: int, party: int) -> int:
    """The seed of a party's stochastic rounding in a round (module docstring)."""
    return int(hashlib.sha256(f"{run}/{round_index}/{party}".encode()).hexdigest()[:8], 16)


def secure_train_reply(params: np.ndarray, reply: RecordDict, seed: int) -> RecordDict:
    """A train reply for ``secaggplus_mod``: ``params`` as Flower's ``FitRes`` of weight 1 beside portfed's
    metrics ``reply`` (the mod masks the parameters and sends no array); seeds the rounding."""
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([params]), num_examples=1, metrics={})
    content = fitres_to_recorddict(fitres, keep_input=False)
    for name, record in reply.items():
        if not isinstance(record, ArrayRecord):
            content[name] = record
    np.random.seed(seed)  # noqa: NPY002 - the mod's stochastic rounding draws from the global generator
    return content


def secure_train_mod(message: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
    """Flower's ``secaggplus_mod`` for the messages of a secure round, the plain handler for the others."""
    if RECORD_KEY_CONFIGS in message.content.config_records:
        return secaggplus_mod(message, context, call_next)
    return call_next(message, context)


# ---------------------------------------------------------------------------------------- the server
@dataclass
class _Node:
    """What the workflow needs of a ``ClientProxy``: the node id."""

    node_id: int


@dataclass
class _Capture:
    """The one-round strategy: fit instructions for ``nodes`` (replaced by portfed's messages) and the
    unmasked aggregate kept (``aggregate``); the workflow's own model update is skipped."""

    nodes: list[int]
    aggregate: Parameters | None = None

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: Any) -> list[tuple[_Node, FitIns]]:
        return [(_Node(n), FitIns(parameters, {})) for n in self.nodes]

    def aggregate_fit(self, server_round: int, results: list[tuple[Any, FitRes]], failures: list[Any]) -> tuple[None, dict]:
        if results:
            self.aggregate = results[0][1].parameters
        return None, {}


@dataclass
class _BoundedGrid:
    """Flower's ``send_and_receive`` over portfed's bounded exchange (:func:`portfed.flower.nodes.exchange`),
    each message living ``timeout`` seconds.  ``screen(reply)`` (set for the masked vectors) names why a reply is unusable, which drops it;
    ``reasons``: node → why it left the protocol; ``replies``: the last usable replies by node."""

    grid: Any
    poll: float
    exchange: Callable[..., dict[int, Message]]
    stage: str = ""
    screen: Callable[[Message], str] | None = None
    reasons: dict[int, str] = field(default_factory=dict)
    replies: dict[int, Message] = field(default_factory=dict)

    def send_and_receive(self, messages: list[Message], *, timeout: float | None = None) -> list[Message]:
        messages = list(messages)
        for message in messages:  # a node that comes back later does not answer a stage that is over
            message.metadata.ttl = cast(float, timeout)
        got = self.exchange(self.grid, messages, cast(float, timeout), self.poll)
        self.replies = {}
        for i, message in enumerate(messages):
            node, reply = message.metadata.dst_node_id, got.get(i)
            why = (f"no reply within {timeout:g} s" if reply is None else
                   f"node error {reply.error.code}: {reply.error.reason}" if reply.has_error() else
                   self.screen(reply) if self.screen is not None else "")
            if why:
                self.reasons.setdefault(node, f"SecAgg+ {self.stage}: {why}")
            else:
                self.replies[node] = reply
        return list(self.replies.values())


@dataclass(frozen=True)
class SecureRound:
    """A secure round's outcome: the mean of the ``contributors``' models (``None``: the protocol
    halted), their masked-vector replies (metrics in clear), and why every other node is missing."""

    mean: np.ndarray | None
    contributors: frozenset[int]
    replies: dict[int, Message]
    reasons: dict[int, str]
    bytes_received: int


def secure_mean(grid: Any, contents: dict[int, RecordDict], round_index: int, settings: SecAggSettings,
                timeout: float, poll: float, exchange: Callable[..., dict[int, Message]],
                screen: Callable[[Message], str]) -> SecureRound:
    """Run SecAgg+'s four stages over the nodes of ``contents`` (node id → its train message), each
    stage's replies bounded by ``timeout``; ``screen`` names why a masked-vector reply is unusable."""
    if len(contents) > settings.max_parties:
        raise ValueError(f"secure aggregation sums at most {settings.max_parties} parties a round "
                         f"(Q = 2^24, modulus 2^32), got {len(contents)}")
    strategy = _Capture(sorted(contents))
    state_records = RecordDict({MAIN_CONFIGS_RECORD: ConfigRecord({Key.CURRENT_ROUND: int(round_index)}),
                                MAIN_PARAMS_RECORD: ArrayRecord()})
    context = LegacyContext(Context(0, 0, {}, state_records, {}), strategy=strategy)  # type: ignore[arg-type]
    workflow, state = settings.workflow(timeout), WorkflowState()
    bounded = _BoundedGrid(grid, poll, exchange)
    contributors: frozenset[int] = frozenset()
    received, masked = 0, {}
    for stage in (workflow.setup_stage, workflow.share_keys_stage, workflow.collect_masked_vectors_stage,
                  workflow.unmask_stage):
        bounded.stage = stage.__name__.removesuffix("_stage")
        if stage == workflow.collect_masked_vectors_stage:
            state.nid_to_fitins = {n: settings.mark(contents[n]) for n in state.active_node_ids}
            bounded.screen = screen
        going = stage(bounded, context, state)  # type: ignore[arg-type]
        if stage == workflow.collect_masked_vectors_stage:
            masked, bounded.screen = dict(bounded.replies), None
            contributors = frozenset(state.active_node_ids)
            received = sum(len(b) for r in masked.values()
                           for b in cast(list[bytes], r.content.config_records[RECORD_KEY_CONFIGS][SecAggKey.MASKED_PARAMETERS]))
        if not going:
            why = f"SecAgg+ halted at {bounded.stage}: fewer nodes left than its reconstruction threshold"
            return SecureRound(None, frozenset(), masked, {n: bounded.reasons.get(n, why) for n in contents}, received)
    if strategy.aggregate is None:
        return SecureRound(None, frozenset(), masked, {n: "SecAgg+ returned no aggregate" for n in contents}, received)
    mean = np.asarray(parameters_to_ndarrays(strategy.aggregate)[0], dtype=np.float64)
    return SecureRound(mean, contributors, {n: masked[n] for n in contributors},
                       {n: bounded.reasons.get(n, "not among the masked vectors") for n in contents if n not in contributors},
                       received)
