"""Where the mechanism meets the round loop: :class:`PartyPrivacy`, given to ``run_rounds(privacy=…)``.

The seam is the engine-agnostic round (:func:`portfed.federation.rounds.run_round`), which the
in-process parties and the Flower deployment (:class:`portfed.flower.server.RemoteParties`, a cohort
of the same loop) share:

- **central**: the algorithm's server rule is wrapped (:class:`CentralDPRule`): the rule steps on
  one row, the noisy fixed-denominator mean of the clipped messages (:func:`~.mechanism.central_mean`),
  instead of on the received models.  Allowed only for rules that are a function of the uniform mean
  (:func:`central_refusal`): the mean itself (FedAvg, FedProx, local, the personalised baselines that
  average), the Fed+ aggregate with the squared-L2 penalty (FedAvg+, whose smoothed aggregate *is* the
  mean, paper 000 eq. 5) and the adaptive servers (FedAdam, FedYogi, FedAdagrad: a step on the mean).
  Medians and geometric medians (and the Fed+ variants built on them), FedMGDA+'s min-norm weights,
  FedAMP's per-party cloud models have no ``S/K`` sensitivity of their output, and SCAFFOLD's
  control variates reach the server unclipped: refused, naming why.
- **local**: the messages are clipped and noised party by party before quarantine and the server step
  (:func:`~.mechanism.local_messages`); every rule accepts them, except SCAFFOLD (its control variates).

In the Flower deployment the local noise is drawn on each party's node, before its reply
(:meth:`portfed.flower.node.PartyNode.train_private`, :func:`~.mechanism.local_message`, seeded by the node's
secret key, or for checking a deployment by the in-process generator): the node makes its own Local-Solve from its own model and the reference the server sent,
and the server receives only the message.  Its cohort declares its replies private
(:func:`portfed.federation.cohort.cohort_sends_private`), so the round loop does not call :meth:`PartyPrivacy.messages`
for them; with the in-process generator the numbers are the in-process run's (docs/privacy.md, "Where local
noise is drawn").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from portfed.federation.algorithms import Algorithm
from portfed.federation.algorithms.adaptive import AdaptiveRule
from portfed.federation.hybrid import LayerwisePenalty
from portfed.federation.prox import Penalty
from portfed.federation.server import MeanRule, ServerContext, ServerOutput, ServerRule, SmoothedRule
from portfed.privacy.mechanism import (
    CENTRAL_STREAM,
    PrivacySettings,
    central_mean,
    local_messages,
    noise_generator,
)

_MEAN_PENALTIES = ("l2sq", "none")  # the smoothed aggregate of these is the mean (aggregate.smoothed_aggregate)


def _penalty_is_mean(penalty: Penalty | LayerwisePenalty) -> bool:
    if isinstance(penalty, LayerwisePenalty):
        return all(p.kind in _MEAN_PENALTIES for p in (*penalty.penalties.values(), penalty.default))
    return penalty.kind in _MEAN_PENALTIES


def central_refusal(algorithm: Algorithm) -> str | None:
    """Why central DP cannot protect ``algorithm`` (``None`` when it can; module docstring)."""
    if algorithm.name == "scaffold":
        return "its control variates reach the server unclipped and without noise"
    rule = algorithm.server
    if isinstance(rule, MeanRule | AdaptiveRule):
        return None
    if isinstance(rule, SmoothedRule) and _penalty_is_mean(rule.penalty):
        return None
    return (f"its server rule ({type(rule).__name__}) is not a function of the mean, so no S/K bound on one "
            "party's influence holds (medians, geometric medians, min-norm weights and per-party cloud models "
            "are refused); use privacy.mode local")


def local_refusal(algorithm: Algorithm) -> str | None:
    """Why local DP cannot protect ``algorithm`` (``None`` when it can)."""
    if algorithm.name == "scaffold":
        return "its control variates reach the server unclipped and without noise"
    return None


@dataclass(frozen=True)
class CentralDPRule:
    """``inner`` stepping on the central mechanism's noisy mean of the clipped messages (module docstring).

    ``cohort_size``: the planned K, the mean's fixed denominator; ``seed``: the run's, which with the round
    index seeds the round's noise.  The state before round 0 (from ``W^0``, which no party's data made)
    is ``inner``'s."""

    inner: ServerRule
    settings: PrivacySettings
    cohort_size: int
    seed: int
    #: A round without any usable reply still releases ``w̃`` + noise (the mean of K zero updates): whether the
    #: model moved must not tell that every sampled party's reply was unusable (the round loop reads this).
    releases_without_replies: ClassVar[bool] = True

    def step(self, received: np.ndarray, context: ServerContext) -> ServerOutput:
        rng = noise_generator(self.seed, CENTRAL_STREAM, context.round_index)
        mean = central_mean(received, context.global_model, self.settings, self.cohort_size, rng)
        return self.inner.step(mean[None, :], replace(context, weights=None))

    def initial(self, models: np.ndarray, weights: np.ndarray | None) -> ServerOutput:
        return self.inner.initial(models, weights)


@dataclass(frozen=True)
class PartyPrivacy:
    """Party-level DP of what the parties share, for ``run_rounds(privacy=…)`` (module docstring)."""

    settings: PrivacySettings

    def check(self, algorithm: Algorithm, weighted: bool = False, screened: bool = False,
              shared_optimizer: bool = False) -> None:
        """Raise ``ValueError`` (one line) when the mode cannot protect ``algorithm``; when the parties average
        their optimizer states (``shared_optimizer``: moments made from their data, shared outside the
        mechanism); or, in central mode, when the parties have unequal weights (``weighted``; the S/K bound
        needs uniform weights) or the update-norm screen is on (``screened``: it compares each update with the
        round's median, so one party's data could decide whether another's update is used — no S/K bound; the
        clip already bounds every update)."""
        mode = self.settings.mode
        if shared_optimizer:
            raise ValueError("privacy with federation.optimizer_state average: the parties' optimizer moments are "
                             "averaged outside the mechanism, unclipped and without noise; use keep or reset")
        reason = central_refusal(algorithm) if mode == "central" else local_refusal(algorithm)
        if reason is not None:
            raise ValueError(f"privacy.mode {mode} cannot protect {algorithm.name!r}: {reason}")
        if mode == "central" and weighted:
            raise ValueError("privacy.mode central averages with uniform weights (the S/K bound); "
                             "remove the party weights")
        if mode == "central" and screened:
            raise ValueError("privacy.mode central with federation.screen_factor: the norm screen lets one party's "
                             "update decide whether another's is used (no S/K bound); the clip already bounds "
                             "every update, remove screen_factor")

    def server_rule(self, rule: ServerRule, cohort_size: int, seed: int) -> ServerRule:
        """The rule the server steps with: ``rule`` wrapped in :class:`CentralDPRule` (central), else ``rule``."""
        if self.settings.mode != "central":
            return rule
        return CentralDPRule(rule, self.settings, cohort_size, seed)

    def messages(self, models: np.ndarray, references: np.ndarray, parties: np.ndarray, round_index: int,
                 seed: int) -> np.ndarray | None:
        """What the parties send (``None``: the models themselves): clipped and noised in local mode."""
        if self.settings.mode != "local":
            return None
        return local_messages(models, references, parties, self.settings, seed, round_index)
