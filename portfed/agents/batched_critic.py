"""K parties' critics ``Q_φ(s, a)`` evaluated as one computation on their stacked flat parameters.

The per-party critic is :class:`~portfed.agents.critic.EIIECritic` (its docstring states the network);
here the K critics' parameters are the rows of one ``(K, d_c)`` tensor ``Φ`` in its flat order.  The
trunk's parameters come first with the EIIE's names and order, so the batched EIIE of the config
(:class:`~portfed.agents.batched_networks.BatchedEIIECNN`, :class:`~portfed.agents.batched_recurrent
.BatchedEIIERecurrent`) computes the trunk's maps from ``Φ`` itself, on the input rows of the actor's
layout; the layers after it are batched matrix products over the party axis.  Padded assets
(:mod:`portfed.agents.batched_head`) are left out of the mean over assets, so party k's ``Q`` is its
own ``m_k``-asset critic's.
"""

from __future__ import annotations

import torch

from portfed.agents.batched_head import BatchedEIIE, parameter_slices
from portfed.agents.config import AgentConfig
from portfed.agents.critic import build_critic


class BatchedCritic:
    """The stacked-parameter critic of ``config``, its trunk evaluated by ``trunk`` (the actor's batched EIIE
    class, whose parameter slices are a prefix of the critic's flat vector)."""

    def __init__(self, config: AgentConfig, trunk: BatchedEIIE) -> None:
        template = build_critic(config, 0)
        self.trunk = trunk
        self.hidden = config.critic_hidden
        self._slices, self.n_parameters = parameter_slices(template)
        self.n_maps = template.asset.in_features - 2

    def maps(self, phi: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        """``(K, B, m, input_width)`` input rows → the trunk's ``(K, B·m, D)`` per-asset maps."""
        return self.trunk.maps(phi, history)

    def head(self, phi: torch.Tensor, maps: torch.Tensor, previous: torch.Tensor, action: torch.Tensor,
             padded: torch.Tensor | None) -> torch.Tensor:
        """``Q`` ``(K, B)`` from the maps of :meth:`maps` (``(K, B·m, D)``), ``previous`` and ``action``
        ``(K, B, m + 1)`` (cash first) and the ``(K, 1, m)`` mask of padded assets (or ``None``)."""
        k, b, m1 = action.shape
        m, sl, h = m1 - 1, self._slices, self.hidden
        per_asset = torch.cat([maps.reshape(k, b, m, self.n_maps), action[..., 1:, None], previous[..., 1:, None]],
                              dim=-1).view(k, b * m, self.n_maps + 2)
        weight = phi[:, sl["asset.weight"]].view(k, h, self.n_maps + 2)
        hidden = torch.baddbmm(phi[:, sl["asset.bias"]].unsqueeze(1), per_asset, weight.transpose(1, 2)).relu()
        hidden = hidden.view(k, b, m, h)
        if padded is None:
            pooled = hidden.mean(dim=2)
        else:
            real = (~padded).unsqueeze(-1).to(hidden.dtype)  # (K, 1, m, 1)
            pooled = (hidden * real).sum(dim=2) / real.sum(dim=2)
        cash = torch.cat([pooled, action[..., :1], previous[..., :1]], dim=-1)  # (K, B, H + 2)
        weight = phi[:, sl["pool.weight"]].view(k, h, h + 2)
        joint = torch.baddbmm(phi[:, sl["pool.bias"]].unsqueeze(1), cash, weight.transpose(1, 2)).relu()
        value = torch.baddbmm(phi[:, sl["value.bias"]].unsqueeze(1), joint, phi[:, sl["value.weight"]].unsqueeze(-1))
        return value.squeeze(-1)

    def __call__(self, phi: torch.Tensor, history: torch.Tensor, previous: torch.Tensor, action: torch.Tensor,
                 padded: torch.Tensor | None = None) -> torch.Tensor:
        """``Q_φ(s, a)`` ``(K, B)`` of K parties (:meth:`maps`, then :meth:`head`)."""
        return self.head(phi, self.maps(phi, history), previous, action, padded)
