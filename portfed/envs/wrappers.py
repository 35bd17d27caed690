"""Action wrappers that adapt :class:`~portfed.envs.portfolio_env.PortfolioEnv` to generic RL libraries."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from portfed.envs.portfolio_env import ActionError, NonFiniteActionError
from portfed.validation import check_number


class SoftmaxActionWrapper(gym.ActionWrapper):
    """Actions are logits ``z ∈ R^{m+1}``; the env receives ``w = softmax(z)``, ``w_i = e^{z_i} / Σ_j e^{z_j}``.

    Why: the environment's actions are points of the simplex, and it refuses an all-zero vector (no
    portfolio).  Generic libraries draw Gaussian actions and clip them to the Box ``[0, 1]``
    (Stable-Baselines3 PPO does), which yields all-zero actions with positive probability and, near
    the boundary, vanishing gradients of the normalization.  The softmax maps every real vector to a
    strictly positive point of the simplex, smoothly, and is the output layer of the EIIE policy
    (Jiang et al. 2017).

    The wrapped action space is ``Box(−logit_bound, logit_bound, (m + 1,), float32)``: libraries such
    as Stable-Baselines3 require finite bounds.  With the default bound 10 two weights can differ by a
    factor up to ``e^20 ≈ 5·10^8``, so every practically relevant portfolio (including "all in one
    asset" up to 1e-8) is reachable.  The softmax itself is defined for all finite logits, so logits
    outside the bound are mapped as well; non-finite logits raise :class:`ActionError`.
    """

    def __init__(self, env: gym.Env, logit_bound: float = 10.0) -> None:
        super().__init__(env)
        inner = env.action_space
        if not isinstance(inner, spaces.Box) or len(inner.shape) != 1:
            raise TypeError(f"SoftmaxActionWrapper needs a 1-D Box action space, got {inner}")
        logit_bound = check_number(logit_bound, "logit_bound", minimum=0.0, strict_min=True)
        self.action_space = spaces.Box(-logit_bound, logit_bound, inner.shape, np.float32)

    def action(self, action: np.ndarray) -> np.ndarray:
        z = np.asarray(action, dtype=np.float64)
        if z.shape != self.action_space.shape:
            raise ActionError(f"logits must have shape {self.action_space.shape}, got {z.shape}")
        if not np.isfinite(z).all():
            raise NonFiniteActionError(f"logits have non-finite entries {z[~np.isfinite(z)]} in {z}")
        e = np.exp(z - z.max())  # shifting by the max leaves the softmax unchanged and cannot overflow
        return e / e.sum()
