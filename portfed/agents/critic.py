"""The critic ``Q_φ(s, a)`` of the actor-critic learner, per party, with an EIIE-shaped trunk.

The state is the actor's, ``s_t = (X_t, w_{t−1})`` (the price window and the previous portfolio), and
the action is the portfolio ``a = w_t``.  Like the EIIE (Jiang, Xu & Liang 2017, §5), the critic treats
every asset with the same weights, so one critic serves any universe size:

    h_i = trunk(X_i − input_offset)                      the EIIE's evaluator (its CNN or RNN / LSTM
                                                         layers, without the softmax head) on asset i,
    g_i = relu(U · [h_i, a_i, w_{t−1,i}] + c)           per asset, shared across assets,
    ḡ   = (1/m) Σ_{i=1..m} g_i                           pooled over the party's real assets,
    Q   = v · relu(V · [ḡ, a_0, w_{t−1,0}] + e) + v_0    with the cash weights (index 0).

The mean over assets keeps ``Q`` on one scale for every ``m`` (a DeepSets pooling); padded assets of the
batched engine are left out of it (:class:`~portfed.agents.batched_critic.BatchedCritic`).  The flat
order is the trunk's layers (the EIIE's names and order), then ``asset``, ``pool`` and ``value``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from portfed.agents.config import AgentConfig
from portfed.agents.networks import EIIENetwork, build_network


class EIIECritic(nn.Module):
    """``Q_φ(s, a)`` of the module docstring for one party (any number of assets ``m``).

    Args:
        trunk: an EIIE whose per-asset evaluator becomes the critic's trunk; its softmax head (score
            and cash bias) is removed.
        hidden: units of the per-asset layer and of the layer after pooling.
    """

    def __init__(self, trunk: EIIENetwork, hidden: int) -> None:
        super().__init__()
        maps = trunk.score.in_features - 1  # the EIIE's head reads [h_i, w_{t−1,i}]
        del trunk.score, trunk.cash
        self.trunk = trunk
        self.asset = nn.Linear(maps + 2, hidden)
        self.pool = nn.Linear(hidden + 2, hidden)
        self.value = nn.Linear(hidden, 1)
        for layer in (self.asset, self.pool, self.value):
            bound = float(np.sqrt(3.0 / layer.weight.shape[1]))  # tflearn's uniform scaling, as the EIIE
            nn.init.uniform_(layer.weight, -bound, bound)
            nn.init.zeros_(layer.bias)

    def forward(self, history: torch.Tensor, previous: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``(B, F, m, l)`` windows, ``(B, m + 1)`` previous weights and actions (cash first) → ``(B,)`` Q."""
        offset = self.trunk.input_offset
        maps = self.trunk.asset_maps(history - offset if offset else history)  # (B, m, D)
        per_asset = torch.cat([maps, action[:, 1:, None], previous[:, 1:, None]], dim=-1)
        pooled = torch.relu(self.asset(per_asset)).mean(dim=1)
        hidden = torch.relu(self.pool(torch.cat([pooled, action[:, :1], previous[:, :1]], dim=-1)))
        return self.value(hidden).squeeze(-1)


def critic_seed(seed: int) -> int:
    """The critic's initialization seed, derived from the party's ``seed`` (a stream apart from the actor's)."""
    return int(np.random.SeedSequence([seed, 1]).generate_state(1)[0])


def build_critic(config: AgentConfig, seed: int) -> EIIECritic:
    """The critic of ``config`` initialized reproducibly from the party's ``seed`` (:func:`critic_seed`):
    the trunk as :func:`~portfed.agents.networks.build_network` initializes an EIIE, the layers after it
    with uniform scaling and zero biases.  The global torch generator is left untouched."""
    seed = critic_seed(seed)
    trunk = build_network(config, seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        critic = EIIECritic(trunk, config.critic_hidden)
    return critic.to(config.device)
