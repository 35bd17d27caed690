"""The market data and portfolio vector memories of N parties, stacked for one batched step.

* the normalized windows of all parties are one ``(Σ_k N_k, m, input_width)`` tensor of network
  input rows (laid out by the batched network, :meth:`BatchedEIIECNN.layout`), with the price
  relatives ``y_t`` and ``y_{t+1}`` of the same decision days beside them; party k's decision day
  offset ``j`` is row ``window_base[k] + j``;
* the portfolio vector memories of all parties are one ``(Σ_k T_k, m + 1)`` tensor (party k's days
  at rows ``pvm_base[k] + t``); a step reads ``w_{t−1}`` of every party's batch and writes the new
  ``w_t`` back with one gather and one scatter.

Panel swaps (the augmentation schedule, :mod:`portfed.generators.augment`): :meth:`set_panel`
gives party k a new training panel (the same tickers) — PVM rows of
the leading days whose dates and prices are unchanged are kept (:func:`~portfed.agents.market.kept_days`),
later rows restart from the initial portfolio — and recomputes only the decision days whose data
changed: day ``t``'s window and relatives read days ``t − l + 1 … t + 1``, so with the first
``keep`` days unchanged the days ``t ≥ keep − 1`` are rebuilt (in place when the panel keeps its
length, as a regenerated synthetic year does).

Universes of different sizes: every party's assets are padded to the largest universe ``M``
(:mod:`portfed.agents.batched_head`).  A padded asset's window is flat (the layout of a window of
ones), its price relatives are 1 and its PVM weight is 0; :meth:`PartyStacks.padding` gives the
``(K, 1, M)`` mask of padded assets that keeps them out of the softmax (``None`` when every party
has ``M`` assets).  A party's PVM rows are read and written in its own ``m_k + 1`` columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from portfed.agents.config import AgentConfig
from portfed.agents.market import MarketTensors, kept_days, market_tensors
from portfed.agents.pvm import PortfolioVectorMemory
from portfed.data.errors import DataError
from portfed.data.panel import PricePanel


class PartyStacks:
    """N parties' decision days (network input rows, price relatives) and PVMs as stacked tensors.

    Args:
        config: the shared agent config (window, batch size, features, device).
        panels: party k's training prices (any numbers of assets: padded to the largest).
        layout: maps a :class:`MarketTensors` ``windows`` tensor to the network's input rows.
        input_width: the width of one input row.

    Raises:
        DataError: a panel too short for one batch.
    """

    def __init__(self, config: AgentConfig, panels: Sequence[PricePanel],
                 layout: Callable[[torch.Tensor], torch.Tensor], input_width: int) -> None:
        self.config = config
        self._layout = layout
        self._sources = list(panels)
        self._panels = [panel.select_features(config.features) for panel in panels]
        self.assets = np.array([panel.n_assets for panel in self._panels], dtype=np.int64)  # m_k
        self.n_assets = int(self.assets.max())  # M
        self.first_day = config.window - 1
        for k, panel in enumerate(self._panels):
            self._check_length(k, panel)
        self._index_parties()
        # Filled party by party, so that building holds one party's intermediate tensors at a time.
        device, total, m = torch.device(config.device), int(self.n_days.sum()), self.n_assets
        flat = torch.ones(1, config.n_features, 1, config.window, device=device)
        self._flat_row = layout(flat)[0, 0]  # a padded asset's input row
        self.windows = self._flat_row.repeat(total, m, 1)
        self.y_now = torch.ones(total, m + 1, device=device)
        self.y_next = torch.ones(total, m + 1, device=device)
        for k, panel in enumerate(self._panels):
            self._fill(k, 0, market_tensors(panel, config))
        self._initial = [self._initial_row(int(a)) for a in self.assets]
        self.pvm = torch.cat([self._initial[k].repeat(int(n), 1) for k, n in enumerate(self.pvm_lengths)])
        self._padded = (torch.arange(m, device=device)[None, None, :] >= torch.from_numpy(self.assets).to(device)
                        [:, None, None]) if (self.assets < m).any() else None

    def _initial_row(self, assets: int) -> torch.Tensor:
        """PGPortfolio's initial memory row for ``assets`` assets, zero on the padded ones."""
        row = torch.zeros(self.n_assets + 1, device=self.config.device)
        row[: assets + 1] = torch.from_numpy(PortfolioVectorMemory.initial_weights(assets))
        return row

    # ------------------------------------------------------------------ layout
    def _check_length(self, k: int, panel: PricePanel) -> None:
        n_days = len(panel) - self.config.window  # decision days l − 1 … T − 2 (market_tensors)
        if n_days < self.config.batch_size:
            raise DataError(f"party {k}: panel {panel.name!r} has {max(n_days, 0)} decision days, fewer than "
                            f"batch_size = {self.config.batch_size}")

    def _index_parties(self) -> None:
        """Row offsets of every party's decision days (windows) and panel days (PVM) in the stacks."""
        lengths = np.array([len(panel) for panel in self._panels], dtype=np.int64)
        self.n_days = lengths - self.config.window
        self.window_base = np.concatenate([[0], np.cumsum(self.n_days)[:-1]]).astype(np.int64)
        self.pvm_base = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        self.pvm_lengths = lengths

    def _fill(self, k: int, start: int, market: MarketTensors) -> None:
        """Write decision days ``start …`` of party k from ``market`` (its days from offset ``start``)."""
        rows = slice(int(self.window_base[k]) + start, int(self.window_base[k] + self.n_days[k]))
        m = int(self.assets[k])
        self.windows[rows, :m] = self._layout(market.windows)
        self.y_now[rows, : m + 1] = market.y_now
        self.y_next[rows, : m + 1] = market.y_next

    def _pvm_slice(self, k: int) -> slice:
        base = int(self.pvm_base[k])
        return slice(base, base + int(self.pvm_lengths[k]))

    # ------------------------------------------------------------------ one party
    def panel(self, k: int) -> PricePanel:
        """The panel party k trains on (restricted to ``config.features``)."""
        return self._panels[k]

    def pvm_rows(self, k: int) -> torch.Tensor:
        """A copy of party k's PVM, ``(T_k, m_k + 1)``."""
        return self.pvm[self._pvm_slice(k), : int(self.assets[k]) + 1].clone()

    def set_pvm_rows(self, k: int, rows: torch.Tensor) -> None:
        """Overwrite party k's PVM with ``rows`` ``(T_k, m_k + 1)``."""
        shape = (int(self.pvm_lengths[k]), int(self.assets[k]) + 1)
        if tuple(rows.shape) != shape:
            raise ValueError(f"party {k}: PVM rows of shape {tuple(rows.shape)}, expected {shape}")
        self.pvm[self._pvm_slice(k), : shape[1]] = rows.to(self.pvm.device, torch.float32)

    def set_panel(self, k: int, panel: PricePanel) -> None:
        """Party k trains on ``panel`` from now on (module docstring).

        Raises:
            DataError: other tickers, or a panel too short for one batch.
        """
        if panel is self._sources[k]:
            return  # the panel already installed (panels are immutable): the per-round call costs nothing
        new, old = panel.select_features(self.config.features), self._panels[k]
        keep = kept_days(old, new)
        if keep == len(new) == len(old):
            self._sources[k] = panel
            return
        if len(new) == len(old):
            start = max(keep - self.config.window, 0)  # decision day t reads days t − l + 1 … t + 1
            self._fill(k, start, market_tensors(new.iloc(slice(start, None)), self.config))
            base = int(self.pvm_base[k])
            self.pvm[base + keep : base + len(new)] = self._initial[k]
        else:
            self._check_length(k, new)
            market, m, n_days = market_tensors(new, self.config), int(self.assets[k]), len(new) - self.config.window
            lo, hi = int(self.window_base[k]), int(self.window_base[k] + self.n_days[k])
            windows = self._flat_row.repeat(n_days, self.n_assets, 1)
            windows[:, :m] = self._layout(market.windows)
            y_now, y_next = (torch.ones(n_days, self.n_assets + 1, device=self.pvm.device) for _ in range(2))
            y_now[:, : m + 1], y_next[:, : m + 1] = market.y_now, market.y_next
            self.windows = torch.cat([self.windows[:lo], windows, self.windows[hi:]]).contiguous()
            self.y_now = torch.cat([self.y_now[:lo], y_now, self.y_now[hi:]])
            self.y_next = torch.cat([self.y_next[:lo], y_next, self.y_next[hi:]])
            base = int(self.pvm_base[k])
            rows = self._initial[k].repeat(len(new), 1)
            rows[:keep] = self.pvm[base : base + keep]
            self.pvm = torch.cat([self.pvm[:base], rows, self.pvm[base + len(old):]])
        self._panels[k], self._sources[k] = new, panel
        self._index_parties()

    # ------------------------------------------------------------------ one batched step
    def start_rows(self, parties: np.ndarray, starts: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """The stack rows of the first decision days ``starts`` (``(K,)`` or ``(K, E)``: a whole local call's)
        of ``parties``: window rows and PVM rows, in one upload to the device each."""
        base = (slice(None),) + (None,) * (starts.ndim - 1)
        device = self.windows.device
        return (torch.from_numpy(self.window_base[parties][base] + starts).to(device),
                torch.from_numpy(self.pvm_base[parties][base] + self.first_day + starts).to(device))

    def padding(self, parties: np.ndarray) -> torch.Tensor | None:
        """The ``(K, 1, M)`` mask of the padded assets of ``parties`` (``None`` when no party is padded)."""
        return None if self._padded is None else self._padded[torch.from_numpy(parties).to(self.windows.device)]

    def gather(self, window_rows: torch.Tensor, pvm_rows: torch.Tensor, padded: torch.Tensor | None,
               offsets: torch.Tensor, windows: bool = True
               ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The ``(K, B)`` decision days ``offsets`` after the ``(K,)`` device rows of :meth:`start_rows`: input
        rows ``(K, B, M, width)`` (``None`` with ``windows=False``: the step without autograd reads them from
        :attr:`windows` itself), ``w_{t−1}``, ``y_t``, ``y_{t+1}`` ``(K, B, M + 1)``, the PVM rows of ``w_t`` and
        ``padded`` (:meth:`padding`) — no transfer from the host."""
        k, b, m = window_rows.numel(), offsets.numel(), self.n_assets
        days = (window_rows.unsqueeze(1) + offsets).reshape(-1)
        pvm_days = (pvm_rows.unsqueeze(1) + offsets).reshape(-1)
        history = self.windows.index_select(0, days).view(k, b, m, -1) if windows else None
        previous = self.pvm.index_select(0, pvm_days - 1).view(k, b, m + 1)
        y_now = self.y_now.index_select(0, days).view(k, b, m + 1)
        y_next = self.y_next.index_select(0, days).view(k, b, m + 1)
        return history, previous, y_now, y_next, pvm_days, padded

    def write_pvm(self, pvm_rows: torch.Tensor, weights: torch.Tensor) -> None:
        """Store the chosen portfolios ``weights`` ``(K, B, M + 1)`` at ``pvm_rows``."""
        self.pvm.index_copy_(0, pvm_rows, weights.detach().reshape(-1, self.n_assets + 1))
