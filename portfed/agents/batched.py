"""K parties' DPG training as one computation: the batched twin of :class:`~portfed.agents.trainer.DPGTrainer`.

At paper scale (50 parties × 800 rounds × 50 local iterations, a ~1.2k-parameter CNN) a party's
step is a few hundred microseconds of Python, autograd and optimizer bookkeeping around tiny
tensors.  :class:`BatchedDPGTrainer` holds the N parties' state as stacked arrays and runs a local
step of every training party as one forward/backward pass and one optimizer update:

* parameters ``Θ`` ``(N, d)`` float32 (row k = party k's ``flat_parameters``), evaluated by
  :class:`~portfed.agents.batched_networks.BatchedEIIECNN`;
* the loss of party k is the reference's (DESIGN.md §3, :mod:`portfed.agents.trainer`)

      L_k(θ_k) = −(1/B) Σ_t ln(μ_t · y_{t+1} · w_t) + (λ/2)‖θ_k‖² + (ρ_k/2)‖θ_k − c_k‖²,

  and one backward pass of ``Σ_k L_k`` gives every party its own gradient (the losses share no
  parameters);
* Adam, per party exactly as ``torch.optim.Adam`` (β = (0.9, 0.999), ε = 1e-8, no optimizer weight
  decay — the L2 term is in the loss as in the reference): with party k's own step count ``t_k``,

      m ← m + (1 − β₁)(g − m),   v ← β₂ v + (1 − β₂) g²,
      θ ← θ − η/(1 − β₁^{t_k}) · m / (√v / √(1 − β₂^{t_k}) + ε),

  then the Fed+ mix ``θ ← κ_k θ + (1 − κ_k) z_k`` (paper 003 eq. 14) when targets are given;
* the portfolio vector memories of all parties are one ``(Σ_k T_k, m + 1)`` tensor (party k's days
  at rows ``pvm_base_k + t``); a step reads ``w_{t−1}`` of every party's batch and writes the new
  ``w_t`` back with one gather and one scatter;
* the normalized windows of all parties are one ``(Σ_k N_k, m, input_width)`` tensor of network
  input rows (:meth:`BatchedEIIECNN.layout`);
* each party keeps its own numpy generator ``default_rng(seed)`` — the stream of its
  :class:`~portfed.agents.sampler.GeometricBatchSampler` in ``DPGTrainer`` — and a local-training
  call draws that party's ``E_k`` uniforms at once: ``Generator.random(E)`` yields the same
  numbers as E calls of ``random()``, and the sampler's truncated geometric inversion is applied
  elementwise, so every party samples the batches the reference trainer samples.

Parties with fewer local iterations (stragglers) drop out of the batch when their iterations are
done.  Initial networks are built by :func:`~portfed.agents.networks.build_network` from each
party's seed, as in ``DPGTrainer``.  Given the same configs, panels and seeds, the batched engine
and N ``DPGTrainer`` reproduce each other's parameters to float32 round-off (the layers sum in a
different order; ``tests/test_batched_trainer.py`` bounds the difference).

Panel swaps (the augmentation schedule, :mod:`portfed.generators.augment`): :meth:`set_panel`
gives party k a new training panel with :meth:`DPGTrainer.set_panel`'s semantics — PVM rows of
the leading days whose dates and prices are unchanged are kept, later rows restart from the
initial portfolio — and recomputes only the decision days whose data changed: day ``t``'s window
and relatives read days ``t − l + 1 … t + 1``, so with the first ``keep`` days unchanged the days
``t ≥ keep − 1`` are rebuilt (in place when the panel keeps its length, as a regenerated synthetic
year does).  :meth:`slot` is party k's view with ``DPGTrainer``'s single-party API
(``local_train``, ``set_panel``, ``step_count``, ``state_dict``), so a party object can drive its
own slot of the shared engine.

Not batched: the recurrent EIIEs (``network="rnn"``/``"lstm"``: a clear ``ValueError``; train them
with ``DPGTrainer``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from portfed.agents.batched_networks import BatchedEIIECNN
from portfed.agents.config import AgentConfig
from portfed.agents.networks import build_network, flat_parameters
from portfed.agents.pvm import PortfolioVectorMemory
from portfed.agents.trainer import LocalTrainResult, MarketTensors, StepRecord, log_returns, market_tensors
from portfed.data.errors import DataError
from portfed.data.panel import PricePanel

#: ``torch.optim.Adam`` defaults, the optimizer of :class:`~portfed.agents.trainer.DPGTrainer`.
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


class ManyTrainResult(NamedTuple):
    """``params`` ``(K, d)`` float64 (row i: the i-th trained party) and each party's step records."""

    params: np.ndarray
    records: list[list[StepRecord]]


class _Slots:
    """The tensors of the parties trained together in one step (views or gathered copies)."""

    def __init__(self, theta: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                 counts: np.ndarray, parties: np.ndarray, mix: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
                 prox: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        self.theta, self.exp_avg, self.exp_avg_sq = theta, exp_avg, exp_avg_sq
        self.counts, self.parties, self.mix, self.prox = counts, parties, mix, prox

    def subset(self, rows: np.ndarray) -> _Slots:
        index = torch.from_numpy(rows).to(self.theta.device)
        mix = None if self.mix is None else (self.mix[0][index], self.mix[1][index], self.mix[2][index])
        prox = None if self.prox is None else (self.prox[0][index], self.prox[1][index])
        return _Slots(self.theta[index], self.exp_avg[index], self.exp_avg_sq[index], self.counts[rows],
                      self.parties[rows], mix, prox)

    def put(self, rows: np.ndarray, part: _Slots) -> None:
        index = torch.from_numpy(rows).to(self.theta.device)
        self.theta[index] = part.theta
        self.exp_avg[index] = part.exp_avg
        self.exp_avg_sq[index] = part.exp_avg_sq
        self.counts[rows] = part.counts


class BatchedDPGTrainer:
    """N parties' EIIE agents (CNN), Adam optimizers, PVMs and samplers, trained as one computation.

    Args:
        config: the agent hyper-parameters shared by every party (``network="cnn"``).
        panels: party k's training prices; all with the same number of assets (days may differ).
        seeds: party k's seed (initial network and batch sampler, as ``DPGTrainer(config, panel, seed)``).

    Raises:
        ValueError: a recurrent network, mismatched lengths, bad seeds or an empty party list.
        DataError: a panel too short for one batch, or asset counts that differ between parties.
    """

    def __init__(self, config: AgentConfig, panels: Sequence[PricePanel], seeds: Sequence[int]) -> None:
        if len(panels) == 0 or len(panels) != len(seeds):
            raise ValueError(f"need one seed per panel and at least one party, got {len(panels)} panels, "
                             f"{len(seeds)} seeds")
        for seed in seeds:
            if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
                raise ValueError(f"seeds must be non-negative integers, got {seed!r}")
        self.config = config
        self.net = BatchedEIIECNN(config)
        self.seeds = [int(s) for s in seeds]
        device = torch.device(config.device)
        self._sources = list(panels)
        self._panels = [panel.select_features(config.features) for panel in panels]
        assets = {panel.n_assets for panel in self._panels}
        if len(assets) != 1:
            raise DataError(f"the batched engine needs the same number of assets for every party, got {sorted(assets)}")
        self.n_assets = assets.pop()
        self.first_day = config.window - 1
        for k, panel in enumerate(self._panels):
            self._check_length(k, panel)
        self._index_parties()
        # The network's input rows (N, m, input_width): the reference's ``history − 1`` in float32, in
        # blocks; filled party by party, so that building holds one party's intermediate tensors at a time.
        total, m = int(self.n_days.sum()), self.n_assets
        self._windows = torch.empty(total, m, self.net.input_width, device=device)
        self._y_now = torch.empty(total, m + 1, device=device)
        self._y_next = torch.empty(total, m + 1, device=device)
        for k, panel in enumerate(self._panels):
            market = market_tensors(panel, config)
            rows = slice(int(self._window_base[k]), int(self._window_base[k] + self.n_days[k]))
            self._windows[rows] = self._input_rows(market)
            self._y_now[rows] = market.y_now
            self._y_next[rows] = market.y_next
        self._initial_row = torch.from_numpy(PortfolioVectorMemory.initial_weights(self.n_assets)).to(device)
        self._pvm = self._initial_row.repeat(int(self._pvm_lengths.sum()), 1)
        init = np.stack([flat_parameters(build_network(config, s)) for s in self.seeds])
        self._theta = torch.as_tensor(init, dtype=torch.float32, device=device)
        self._exp_avg = torch.zeros_like(self._theta)
        self._exp_avg_sq = torch.zeros_like(self._theta)
        self._counts = np.zeros(len(self.seeds), dtype=np.int64)
        self._rngs = [np.random.default_rng(s) for s in self.seeds]
        self._offsets = torch.arange(config.batch_size, device=device)

    # ------------------------------------------------------------------ data
    def _check_length(self, k: int, panel: PricePanel) -> None:
        n_days = len(panel) - self.config.window  # decision days l − 1 … T − 2 (market_tensors)
        if n_days < self.config.batch_size:
            raise DataError(f"party {k}: panel {panel.name!r} has {max(n_days, 0)} decision days, fewer than "
                            f"batch_size = {self.config.batch_size}")

    def _market(self, k: int, panel: PricePanel) -> MarketTensors:
        self._check_length(k, panel)
        return market_tensors(panel, self.config)

    def _input_rows(self, market: MarketTensors) -> torch.Tensor:
        return self.net.layout(market.windows)

    def _index_parties(self) -> None:
        """Row offsets of every party's decision days (windows) and panel days (PVM) in the stacks."""
        lengths = np.array([len(panel) for panel in self._panels], dtype=np.int64)
        self.n_days = lengths - self.config.window
        self._window_base = np.concatenate([[0], np.cumsum(self.n_days)[:-1]]).astype(np.int64)
        self._pvm_base = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        self._pvm_lengths = lengths

    def panel(self, party: int) -> PricePanel:
        """The panel party ``party`` trains on (restricted to ``config.features``)."""
        return self._panels[self._party(party)]

    def set_panel(self, party: int, panel: PricePanel) -> None:
        """Party ``party`` trains on ``panel`` from now on: :meth:`DPGTrainer.set_panel` for one slot.

        The tickers must be the same.  With the first ``keep`` days unchanged (same dates and
        prices), PVM rows ``[0, keep)`` are kept and later rows restart from the initial portfolio;
        the decision days ``t ≥ keep − 1`` (whose windows or relatives read a changed day) are
        recomputed.  Other parties, the parameters, Adam moments and samplers are untouched.

        Raises:
            DataError: other tickers, or a panel too short for one batch.
        """
        k = self._party(party)
        if panel is self._sources[k]:
            return  # the panel already installed (panels are immutable): the per-round call costs nothing
        new, old = panel.select_features(self.config.features), self._panels[k]
        if new.tickers != old.tickers:
            raise DataError(f"set_panel: party {k}'s tickers {new.tickers} differ from its training tickers "
                            f"{old.tickers}")
        n = min(len(new), len(old))
        same = (new.dates[:n] == old.dates[:n]) & np.all(new.values[:n] == old.values[:n], axis=(1, 2))
        keep = n if same.all() else int(np.argmin(same))
        if keep == len(new) == len(old):
            self._sources[k] = panel
            return
        window = self.config.window
        if len(new) == len(old):
            # Decision day t reads days t − l + 1 … t + 1: rebuild offsets start … (days t ≥ keep − 1).
            start = max(keep - window, 0)
            market = market_tensors(new.iloc(slice(start, None)), self.config)
            rows = slice(int(self._window_base[k]) + start, int(self._window_base[k] + self.n_days[k]))
            self._windows[rows] = self._input_rows(market)
            self._y_now[rows] = market.y_now
            self._y_next[rows] = market.y_next
            base = int(self._pvm_base[k])
            self._pvm[base + keep : base + len(new)] = self._initial_row
        else:
            market = self._market(k, new)
            lo, hi = int(self._window_base[k]), int(self._window_base[k] + self.n_days[k])
            self._windows = torch.cat([self._windows[:lo], self._input_rows(market), self._windows[hi:]]).contiguous()
            self._y_now = torch.cat([self._y_now[:lo], market.y_now, self._y_now[hi:]])
            self._y_next = torch.cat([self._y_next[:lo], market.y_next, self._y_next[hi:]])
            base = int(self._pvm_base[k])
            rows = self._initial_row.repeat(len(new), 1)
            rows[:keep] = self._pvm[base : base + keep]
            self._pvm = torch.cat([self._pvm[:base], rows, self._pvm[base + len(old):]])
        self._panels[k], self._sources[k] = new, panel
        self._index_parties()

    def slot(self, party: int) -> TrainerSlot:
        """Party ``party``'s view of this engine, with ``DPGTrainer``'s single-party API."""
        return TrainerSlot(self, self._party(party))

    # ------------------------------------------------------------------ properties
    @property
    def n_parties(self) -> int:
        return len(self.seeds)

    @property
    def n_parameters(self) -> int:
        return self.net.n_parameters

    @property
    def learning_rate(self) -> float:
        """``η`` of the Fed+ mixing coefficient ``κ = 1/(1 + ησ)`` (the Adam step size)."""
        return self.config.learning_rate

    @property
    def step_counts(self) -> np.ndarray:
        """Local iterations run so far by each party (its Adam step ``t_k``)."""
        return self._counts.copy()

    def parameters(self) -> np.ndarray:
        """``(N, d)`` float64 copy of every party's flat parameters."""
        return self._theta.detach().to("cpu", torch.float64).numpy()

    def pvm_weights(self, party: int) -> np.ndarray:
        """Party ``party``'s portfolio vector memory, ``(T_k, m + 1)`` (a copy)."""
        start = int(self._pvm_base[party])
        return self._pvm[start : start + int(self._pvm_lengths[party])].cpu().numpy().copy()

    # ------------------------------------------------------------------ sampling
    def _draw_starts(self, parties: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """``(K, max steps)`` batch starts; party i's first ``steps[i]`` come from its own sampler.

        Same law and same numbers as ``GeometricBatchSampler.sample_start`` (its module doc):
        ``k = ⌈ln(1 − u (1 − q^S)) / ln q⌉`` clipped to ``1 … S``, start ``S − k``, ``S = N − B + 1``.
        Entries past a straggler's last step are 0 and never used.
        """
        width = int(steps.max())
        uniforms = np.ones((parties.size, width))
        for row, (k, e) in enumerate(zip(parties.tolist(), steps.tolist(), strict=True)):
            uniforms[row, :e] = 1.0 - self._rngs[k].random(e)
        n_starts = (self.n_days[parties] - self.config.batch_size + 1)[:, None]
        log_q = np.log1p(-self.config.beta)
        mass = -np.expm1(n_starts * log_q)
        draws = np.ceil(np.log1p(-uniforms * mass) / log_q).astype(np.int64)
        starts = n_starts - np.clip(draws, 1, n_starts)
        starts[np.arange(width)[None, :] >= steps[:, None]] = 0
        return starts

    # ------------------------------------------------------------------ one step
    def _step(self, slots: _Slots, starts: np.ndarray) -> torch.Tensor:
        """One local iteration of the parties in ``slots``; returns ``(K, 3)``: mean r, loss, ‖g‖."""
        config, device = self.config, self._theta.device
        base = torch.from_numpy(self._window_base[slots.parties] + starts).to(device)
        days = (base.unsqueeze(1) + self._offsets).reshape(-1)  # window rows of (K, B) decision days
        pvm_days = torch.from_numpy(self._pvm_base[slots.parties] + self.first_day + starts).to(device)
        pvm_rows = (pvm_days.unsqueeze(1) + self._offsets).reshape(-1)
        k, b, m = starts.size, config.batch_size, self.n_assets
        history = self._windows.index_select(0, days).view(k, b, m, -1)
        previous = self._pvm.index_select(0, pvm_rows - 1).view(k, b, m + 1)
        y_now = self._y_now.index_select(0, days).view(k, b, m + 1)
        y_next = self._y_next.index_select(0, days).view(k, b, m + 1)

        theta = slots.theta.detach().requires_grad_(True)
        weights = self.net(theta, history, previous[..., 1:])
        rewards = log_returns(weights, previous, y_now, y_next, config.commission)
        loss = -rewards.mean(dim=1)
        if config.weight_decay > 0:
            loss = loss + 0.5 * config.weight_decay * theta.pow(2).sum(dim=1)
        if slots.prox is not None:
            center, coef = slots.prox
            loss = loss + 0.5 * coef * (theta - center).pow(2).sum(dim=1)
        (grad,) = torch.autograd.grad(loss.sum(), theta)

        with torch.no_grad():
            slots.counts += 1
            beta1, beta2 = ADAM_BETAS
            step_size = torch.as_tensor(-config.learning_rate / (1.0 - beta1**slots.counts), dtype=grad.dtype,
                                        device=device).unsqueeze(1)
            bias2_sqrt = torch.as_tensor(np.sqrt(1.0 - beta2**slots.counts), dtype=grad.dtype,
                                         device=device).unsqueeze(1)
            slots.exp_avg.lerp_(grad, 1.0 - beta1)
            slots.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
            denom = (slots.exp_avg_sq.sqrt() / bias2_sqrt).add_(ADAM_EPS)
            # (value · m) / denom: the association of torch's addcdiv kernel.
            slots.theta.add_((step_size * slots.exp_avg).div_(denom))
            if slots.mix is not None:
                target, kappa, rest = slots.mix
                slots.theta.mul_(kappa).add_(rest * target)
            self._pvm.index_copy_(0, pvm_rows, weights.detach().reshape(k * b, m + 1))
            return torch.stack([rewards.mean(dim=1), loss, torch.linalg.vector_norm(grad, dim=1)], dim=1)

    # ------------------------------------------------------------------ the federation's call
    def local_train_many(
        self,
        params: np.ndarray | None,
        steps: int | Sequence[int],
        *,
        parties: Sequence[int] | np.ndarray | None = None,
        mix_targets: np.ndarray | None = None,
        kappas: np.ndarray | Sequence[float] | None = None,
        prox_centers: np.ndarray | None = None,
        prox_coefs: np.ndarray | Sequence[float] | float = 0.0,
    ) -> ManyTrainResult:
        """``DPGTrainer.local_train`` of K parties at once (row i of every array: party ``parties[i]``).

        Loads ``params`` ``(K, d)`` (``None`` keeps the current ones), then party i runs ``steps[i]``
        local iterations: an Adam step on its loss (with ``prox_coefs[i]/2 ‖θ − prox_centers[i]‖²``
        when centres are given) followed, when ``mix_targets`` are given, by
        ``θ ← κ_i θ + (1 − κ_i) z_i``.

        Args:
            params: ``(K, d)`` starting parameters, or ``None``.
            steps: local iterations, one int for all or one per party (stragglers); each >= 0.
            parties: the distinct parties trained (all, in order, when ``None``).
            mix_targets: ``(K, d)`` Fed+ targets ``z_i``, with ``kappas`` ``(K,)`` in ``[0, 1]``.
            prox_centers: ``(K, d)`` proximal centres, with ``prox_coefs`` (a number or ``(K,)``, >= 0).

        Returns:
            the parties' new parameters ``(K, d)`` and their step records.
        """
        index = self._party_index(parties)
        n = index.size
        step_arr = self._steps(steps, n)
        device = self._theta.device
        mix = None
        if mix_targets is not None:
            if kappas is None:
                raise ValueError("mix_targets need kappas (one κ per party)")
            kappa = np.array(np.broadcast_to(np.asarray(kappas, dtype=np.float64), (n,)))
            if not np.all((kappa >= 0.0) & (kappa <= 1.0)):
                raise ValueError(f"kappas must lie in [0, 1], got {kappa}")
            mix = (self._matrix(mix_targets, n, "mix_targets"),
                   torch.as_tensor(kappa, dtype=torch.float32, device=device).unsqueeze(1),
                   torch.as_tensor(1.0 - kappa, dtype=torch.float32, device=device).unsqueeze(1))
        elif kappas is not None and np.any(np.asarray(kappas) != 1.0):
            raise ValueError("kappas != 1 mix towards a target, but mix_targets is None")
        coefs = np.array(np.broadcast_to(np.asarray(prox_coefs, dtype=np.float64), (n,)))
        if not np.all(np.isfinite(coefs) & (coefs >= 0)):
            raise ValueError(f"prox_coefs must be finite numbers >= 0, got {prox_coefs!r}")
        prox = None
        if prox_centers is not None:
            prox = (self._matrix(prox_centers, n, "prox_centers"),
                    torch.as_tensor(coefs, dtype=torch.float32, device=device))
        elif np.any(coefs > 0):
            raise ValueError("prox_coefs > 0 need prox_centers")
        if params is not None:
            self._theta[torch.from_numpy(index).to(device)] = self._matrix(params, n, "params")

        starts = self._draw_starts(index, step_arr) if n and step_arr.max() > 0 else np.zeros((n, 0), np.int64)
        everyone = n == self.n_parties and np.array_equal(index, np.arange(n))
        torch_index = torch.from_numpy(index).to(device)
        if everyone:  # views: the step updates the stored state in place
            slots = _Slots(self._theta, self._exp_avg, self._exp_avg_sq, self._counts, index, mix, prox)
        else:
            slots = _Slots(self._theta[torch_index], self._exp_avg[torch_index], self._exp_avg_sq[torch_index],
                           self._counts[index].copy(), index, mix, prox)
        stats = torch.full((starts.shape[1], n, 3), float("nan"), device=device)
        for j in range(starts.shape[1]):
            live = np.flatnonzero(step_arr > j)
            if live.size == n:
                stats[j] = self._step(slots, starts[:, j])
            else:
                part = slots.subset(live)
                stats[j, torch.from_numpy(live).to(device)] = self._step(part, starts[live, j])
                slots.put(live, part)
        if not everyone:
            self._theta[torch_index] = slots.theta
            self._exp_avg[torch_index] = slots.exp_avg
            self._exp_avg_sq[torch_index] = slots.exp_avg_sq
            self._counts[index] = slots.counts
        return ManyTrainResult(params=self._theta[torch_index].to("cpu", torch.float64).numpy(),
                               records=self._records(stats.cpu().numpy(), index, step_arr))

    def _records(self, stats: np.ndarray, index: np.ndarray, steps: np.ndarray) -> list[list[StepRecord]]:
        counts = self._counts[index]
        rows = stats.tolist()
        return [
            [StepRecord(step=int(counts[i] - steps[i] + j + 1), mean_log_return=rows[j][i][0], loss=rows[j][i][1],
                        grad_norm=rows[j][i][2]) for j in range(int(steps[i]))]
            for i in range(index.size)
        ]

    # ------------------------------------------------------------------ validation
    def _party(self, party: int) -> int:
        if isinstance(party, bool) or not isinstance(party, int | np.integer):
            raise ValueError(f"party must be an integer index, got {party!r}")
        if not 0 <= party < self.n_parties:
            raise IndexError(f"party must lie in [0, {self.n_parties - 1}], got {party}")
        return int(party)

    def _party_index(self, parties: Sequence[int] | np.ndarray | None) -> np.ndarray:
        if parties is None:
            return np.arange(self.n_parties, dtype=np.int64)
        index = np.asarray(parties)
        if index.ndim != 1 or (index.size and not np.issubdtype(index.dtype, np.integer)):
            raise ValueError(f"parties must be a 1-D sequence of party indices, got {parties!r}")
        index = index.astype(np.int64)
        if index.size and (index.min() < 0 or index.max() >= self.n_parties):
            raise IndexError(f"parties must lie in [0, {self.n_parties - 1}], got {index.tolist()}")
        if np.unique(index).size != index.size:
            raise ValueError(f"parties must be distinct, got {index.tolist()}")
        return index

    @staticmethod
    def _steps(steps: int | Sequence[int], n: int) -> np.ndarray:
        values = [steps] * n if isinstance(steps, int | np.integer) and not isinstance(steps, bool) else list(steps)
        if len(values) != n:
            raise ValueError(f"steps must be an int or one int per party ({n}), got {len(values)} values")
        for e in values:
            if isinstance(e, bool) or not isinstance(e, int | np.integer) or e < 0:
                raise ValueError(f"steps must be non-negative integers, got {e!r}")
        return np.asarray(values, dtype=np.int64).reshape(n)

    def _matrix(self, values: np.ndarray, n: int, name: str) -> torch.Tensor:
        array = np.asarray(values, dtype=np.float64)
        if array.shape != (n, self.n_parameters):
            raise ValueError(f"{name} has shape {array.shape}; expected ({n}, {self.n_parameters})")
        if not np.all(np.isfinite(array)):
            raise ValueError(f"{name} has non-finite entries")
        return torch.as_tensor(array, dtype=torch.float32, device=self._theta.device)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """A deep copy of the whole training state: parameters, Adam moments and steps, PVMs, samplers."""
        return {
            "params": self._theta.cpu().clone(),
            "exp_avg": self._exp_avg.cpu().clone(),
            "exp_avg_sq": self._exp_avg_sq.cpu().clone(),
            "steps": self._counts.copy(),
            "pvm": self._pvm.cpu().clone(),
            "samplers": [{"rng": copy.deepcopy(rng.bit_generator.state)} for rng in self._rngs],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the trainer must hold the same parties (configs, panels)."""
        expected = {"params", "exp_avg", "exp_avg_sq", "steps", "pvm", "samplers"}
        if set(state) != expected:
            raise ValueError(f"state dict keys {sorted(state)} differ from {sorted(expected)}")
        for name, current in (("params", self._theta), ("exp_avg", self._exp_avg), ("exp_avg_sq", self._exp_avg_sq),
                              ("pvm", self._pvm)):
            if tuple(state[name].shape) != tuple(current.shape):
                raise ValueError(f"state {name} has shape {tuple(state[name].shape)}, expected {tuple(current.shape)}")
        if len(state["samplers"]) != self.n_parties or np.shape(state["steps"]) != (self.n_parties,):
            raise ValueError(f"state is for {len(state['samplers'])} parties, this trainer has {self.n_parties}")
        device = self._theta.device
        self._theta = state["params"].to(device, torch.float32).clone()
        self._exp_avg = state["exp_avg"].to(device, torch.float32).clone()
        self._exp_avg_sq = state["exp_avg_sq"].to(device, torch.float32).clone()
        self._pvm = state["pvm"].to(device, torch.float32).clone()
        self._counts = np.array(state["steps"], dtype=np.int64)
        for rng, sampler_state in zip(self._rngs, state["samplers"], strict=True):
            rng.bit_generator.state = copy.deepcopy(sampler_state["rng"])


def _one_row(vector: np.ndarray | None) -> np.ndarray | None:
    return None if vector is None else np.asarray(vector, dtype=np.float64)[None]


class TrainerSlot:
    """Party k of a :class:`BatchedDPGTrainer`, seen through :class:`DPGTrainer`'s single-party API.

    A party object that owns its data and augmentation schedule drives its slot exactly as it would
    drive its own ``DPGTrainer``: :meth:`set_panel`, :meth:`local_train` (one party's
    ``local_train_many``), ``step_count``, :meth:`state_dict` / :meth:`load_state_dict` (party k's rows
    of the engine's state: parameters, Adam moments and step, PVM rows, sampler).  Training many
    parties at once goes through the engine's :meth:`BatchedDPGTrainer.local_train_many`.
    """

    def __init__(self, engine: BatchedDPGTrainer, party: int) -> None:
        self.engine = engine
        self.party = party

    @property
    def config(self) -> AgentConfig:
        return self.engine.config

    @property
    def learning_rate(self) -> float:
        return self.engine.learning_rate

    @property
    def step_count(self) -> int:
        return int(self.engine._counts[self.party])

    @property
    def panel(self) -> PricePanel:
        return self.engine.panel(self.party)

    def set_panel(self, panel: PricePanel) -> None:
        self.engine.set_panel(self.party, panel)

    def local_train(self, params: np.ndarray | None, steps: int, *, mix_target: np.ndarray | None = None,
                    kappa: float = 1.0, prox_center: np.ndarray | None = None,
                    prox_coef: float = 0.0) -> LocalTrainResult:
        """:meth:`DPGTrainer.local_train` of this party alone (arguments and result as there)."""
        if kappa != 1.0 and mix_target is None:
            raise ValueError(f"kappa={kappa!r} mixes towards a target, but mix_target is None")
        result = self.engine.local_train_many(_one_row(params), [steps], parties=[self.party],
                                              mix_targets=_one_row(mix_target),
                                              kappas=None if mix_target is None else [kappa],
                                              prox_centers=_one_row(prox_center), prox_coefs=[prox_coef])
        return LocalTrainResult(params=result.params[0], records=result.records[0])

    def state_dict(self) -> dict[str, Any]:
        """Copies of party k's rows of :meth:`BatchedDPGTrainer.state_dict`."""
        e, k = self.engine, self.party
        base, length = int(e._pvm_base[k]), int(e._pvm_lengths[k])
        return {
            "params": e._theta[k].cpu().clone(),
            "exp_avg": e._exp_avg[k].cpu().clone(),
            "exp_avg_sq": e._exp_avg_sq[k].cpu().clone(),
            "step": int(e._counts[k]),
            "pvm": e._pvm[base : base + length].cpu().clone(),
            "sampler": {"rng": copy.deepcopy(e._rngs[k].bit_generator.state)},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the slot must already hold the panel it was saved with."""
        expected = {"params", "exp_avg", "exp_avg_sq", "step", "pvm", "sampler"}
        if set(state) != expected:
            raise ValueError(f"slot state keys {sorted(state)} differ from {sorted(expected)}")
        e, k = self.engine, self.party
        base, length = int(e._pvm_base[k]), int(e._pvm_lengths[k])
        shapes = {"params": (e.n_parameters,), "exp_avg": (e.n_parameters,), "exp_avg_sq": (e.n_parameters,),
                  "pvm": (length, e.n_assets + 1)}
        for name, shape in shapes.items():
            if tuple(state[name].shape) != shape:
                raise ValueError(f"party {k}: slot state {name} has shape {tuple(state[name].shape)}, expected {shape}")
        device = e._theta.device
        e._theta[k] = state["params"].to(device, torch.float32)
        e._exp_avg[k] = state["exp_avg"].to(device, torch.float32)
        e._exp_avg_sq[k] = state["exp_avg_sq"].to(device, torch.float32)
        e._pvm[base : base + length] = state["pvm"].to(device, torch.float32)
        e._counts[k] = int(state["step"])
        e._rngs[k].bit_generator.state = copy.deepcopy(state["sampler"]["rng"])
