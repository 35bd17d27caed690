"""Small batched engines and their per-party reference trainers, shared by the engine tests.

Four parties of synthetic random-walk panels of different lengths, seeds 3, 5, 7, 11; window 20
(the batched network's conv outputs, W = 18, fall into two overlapping blocks of P = 14).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from dpg_trainer import DPGTrainer

from portfed.agents import AgentConfig
from portfed.agents.batched import BatchedDPGTrainer
from portfed.agents.records import ManyTrainResult
from portfed.data.panel import PricePanel
from portfed.federation import CohortPlan

CONFIG = AgentConfig(window=20, batch_size=8, learning_rate=1e-3, weight_decay=1e-4, beta=0.05)
SEEDS = [3, 5, 7, 11]


def random_walk(T: int = 120, seed: int = 0, m: int = 3, ohlc: bool = False) -> PricePanel:
    """``T`` days of ``m`` independent log-normal random walks (daily volatility 2 %), closes or close/high/low."""
    rng = np.random.default_rng(seed)
    close = 100 * np.exp(np.cumsum(0.02 * rng.standard_normal((T, m)), axis=0))
    dates = pd.bdate_range("2020-01-01", periods=T)
    tickers = tuple(f"S{i}" for i in range(m))
    if not ohlc:
        return PricePanel(close[:, :, None], dates, tickers, ("close",))
    spread = 1 + 0.01 * np.abs(rng.standard_normal((T, m)))
    return PricePanel(np.stack([close, close * spread, close / spread], -1), dates, tickers, ("close", "high", "low"))


def train_plan(engine: BatchedDPGTrainer, params: np.ndarray | None, steps: int | list[int], *,
               parties: list[int] | None = None, targets: np.ndarray | None = None, sigmas: list[float] | None = None,
               prox_centers: np.ndarray | None = None, prox_coefs: list[float] | float | None = None,
               proximal_update: str = "mix") -> ManyTrainResult:
    """One :class:`CohortPlan` of the engine (all parties, in order, when ``parties`` is None)."""
    index = np.arange(engine.n_parties) if parties is None else np.asarray(parties)
    plan = CohortPlan(round_index=0, parties=index, steps=np.broadcast_to(steps, index.shape), start=params,
                      target=targets, sigma=sigmas, prox_center=prox_centers, prox_coef=prox_coefs,
                      proximal_update=proximal_update)
    return engine.train_steps(plan)


def one_batch(engine: BatchedDPGTrainer, parties: np.ndarray, starts: np.ndarray, offsets):
    """The engine's stacked batch of ``parties`` starting at ``starts`` (:meth:`PartyStacks.gather`):
    input rows, ``w_{t−1}``, ``y_t``, ``y_{t+1}``, the PVM rows and the padding mask."""
    stacks = engine.stacks
    return stacks.gather(*stacks.start_rows(parties, starts), stacks.padding(parties), offsets)


def engines(config: AgentConfig = CONFIG, ohlc: bool = False) -> tuple[list[DPGTrainer], BatchedDPGTrainer]:
    """The per-party reference trainers and the batched engine over the same four parties."""
    panels = [random_walk(50 + 9 * k, k, ohlc=ohlc) for k in range(len(SEEDS))]  # different lengths
    return [DPGTrainer(config, p, s) for p, s in zip(panels, SEEDS, strict=True)], BatchedDPGTrainer(config, panels, SEEDS)


def assert_equal_but_for_adams_round_off(got: np.ndarray, want: np.ndarray, atol: float, step: float, steps: int,
                                         share: float = 0.05) -> None:
    """Two float32 computations of ``steps`` Adam steps agree to ``atol`` on all but ``share`` of the
    coordinates, and to ``step · steps`` on every one.

    Adam divides by √v: on a coordinate whose gradient is round-off small the update is about ``±η`` in the
    direction of the round-off, which differs between the engine's C kernels (compiled with
    ``-march=native``: other machines, other roundings) and PyTorch's reference; such a coordinate can
    drift apart by up to ``η`` (``step``, the largest learning rate) a step, while a wrong term in the
    update moves most coordinates."""
    diff = np.abs(np.asarray(got) - np.asarray(want))
    assert diff.max() <= step * steps, f"a coordinate is {diff.max():.3g} apart, more than {steps} Adam steps of {step}"
    assert np.mean(diff > atol) <= share, (f"{int(np.sum(diff > atol))} of {diff.size} coordinates are more than "
                                           f"{atol} apart (at most {share:.0%} may be, on round-off gradients)")
