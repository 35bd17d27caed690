"""EIIE agents trained by deterministic policy gradient (Jiang, Xu & Liang 2017; with a critic, Silver et al.
2014), all in one engine."""

from portfed.agents.adam import AdamState, adam_step
from portfed.agents.baselines import BASELINE_NAMES, make_baselines
from portfed.agents.batched import BatchedDPGTrainer, batched_network
from portfed.agents.batched_recurrent import BatchedEIIERecurrent
from portfed.agents.config import LEARNERS, NETWORKS, SHARES, AgentConfig
from portfed.agents.critic import EIIECritic, build_critic
from portfed.agents.learner import actor_vector, initial_vector
from portfed.agents.market import MarketTensors, kept_days, market_tensors
from portfed.agents.networks import (
    EIIECNN,
    EIIENetwork,
    EIIERecurrent,
    build_network,
    flat_parameters,
    layer_arrays,
    layer_slices,
    parameter_count,
    set_flat_parameters,
    set_layer_arrays,
)
from portfed.agents.objective import (
    dpg_loss,
    drifted_weights,
    fedplus_mix,
    greedy_log_return,
    linear_cost_factor,
    log_returns,
)
from portfed.agents.policy import EIIEPolicy
from portfed.agents.policy_protocol import Policy
from portfed.agents.pvm import PortfolioVectorMemory
from portfed.agents.records import LocalTrainResult, ManyTrainResult, StepRecord
from portfed.agents.sampler import GeometricBatchSampler, truncated_geometric_starts
from portfed.agents.stacks import PartyStacks

__all__ = [
    "AdamState",
    "PartyStacks",
    "BatchedEIIERecurrent",
    "batched_network",
    "adam_step",
    "dpg_loss",
    "fedplus_mix",
    "greedy_log_return",
    "kept_days",
    "truncated_geometric_starts",
    "BASELINE_NAMES",
    "Policy",
    "make_baselines",
    "NETWORKS",
    "LEARNERS",
    "SHARES",
    "AgentConfig",
    "EIIECritic",
    "build_critic",
    "actor_vector",
    "initial_vector",
    "BatchedDPGTrainer",
    "EIIECNN",
    "EIIENetwork",
    "EIIEPolicy",
    "EIIERecurrent",
    "GeometricBatchSampler",
    "LocalTrainResult",
    "ManyTrainResult",
    "MarketTensors",
    "PortfolioVectorMemory",
    "StepRecord",
    "build_network",
    "drifted_weights",
    "flat_parameters",
    "layer_arrays",
    "layer_slices",
    "linear_cost_factor",
    "log_returns",
    "market_tensors",
    "parameter_count",
    "set_flat_parameters",
    "set_layer_arrays",
]
