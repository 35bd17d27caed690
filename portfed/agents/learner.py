"""What a party's parameter vectors hold under each learner (:attr:`AgentConfig.learner`).

A party's *trained row* is the actor's flat parameters (:func:`~portfed.agents.networks.flat_parameters`
of its EIIE), followed with ``learner: actor_critic`` by the critic's
(:class:`~portfed.agents.critic.EIIECritic`).  Its *federated vector* — what it sends the server and
loads from it, what the federation's states, checkpoints and deployed models hold — is the first
:func:`shared_size` entries of the row: the whole row, or the actor alone with ``share: actor`` (the
critic then stays private, as the target networks always do).  The policy a vector deploys is its
first :func:`actor_size` entries (:func:`actor_vector`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from portfed.agents.config import AgentConfig
from portfed.agents.critic import build_critic
from portfed.agents.networks import build_network, flat_parameters


@lru_cache(maxsize=64)
def _sizes(config: AgentConfig) -> tuple[int, int]:
    actor = int(flat_parameters(build_network(config, 0)).size)
    critic = int(flat_parameters(build_critic(config, 0)).size) if config.learner == "actor_critic" else 0
    return actor, critic


def actor_size(config: AgentConfig) -> int:
    """``d_a``, the actor's (the EIIE's) number of parameters."""
    return _sizes(config)[0]


def row_size(config: AgentConfig) -> int:
    """The trained row's length: ``d_a`` (direct) or ``d_a + d_c`` (actor-critic)."""
    return sum(_sizes(config))


def shares_critic(config: AgentConfig) -> bool:
    """Whether the federated vector holds the critic (``learner: actor_critic`` with ``share: actor_critic``)."""
    return config.learner == "actor_critic" and config.share == "actor_critic"


def shared_size(config: AgentConfig) -> int:
    """The federated vector's length (module docstring)."""
    return row_size(config) if shares_critic(config) else actor_size(config)


def vector_parts(config: AgentConfig) -> dict[str, slice]:
    """The named parts of the federated vector: ``actor``, and ``critic`` when it is shared."""
    parts = {"actor": slice(0, actor_size(config))}
    if shares_critic(config):
        parts["critic"] = slice(actor_size(config), row_size(config))
    return parts


def network_parts(config: AgentConfig) -> dict[str, slice] | None:
    """:func:`vector_parts` when the federated vector holds two networks (the figures show each one's
    parameter changes), else ``None``."""
    parts = vector_parts(config)
    return parts if len(parts) > 1 else None


def initial_row(config: AgentConfig, seed: int) -> np.ndarray:
    """The trained row a party built from ``seed`` starts with (float64): its EIIE
    (:func:`~portfed.agents.networks.build_network`) and, for the actor-critic, its critic
    (:func:`~portfed.agents.critic.build_critic`)."""
    actor = flat_parameters(build_network(config, seed))
    if config.learner == "direct":
        return actor
    return np.concatenate([actor, flat_parameters(build_critic(config, seed))])


def initial_vector(config: AgentConfig, seed: int) -> np.ndarray:
    """The federated vector of :func:`initial_row` (its first :func:`shared_size` entries)."""
    return initial_row(config, seed)[: shared_size(config)]


def actor_vector(config: AgentConfig, vector: np.ndarray) -> np.ndarray:
    """The actor's parameters in a federated ``vector`` (checked to have :func:`shared_size` entries)."""
    vector = np.asarray(vector)
    if vector.ndim != 1 or vector.size != shared_size(config):
        raise ValueError(f"parameter vector has shape {vector.shape}; a {config.learner} party's federated vector "
                         f"(share: {config.share}) has ({shared_size(config)},)")
    return vector[: actor_size(config)]
