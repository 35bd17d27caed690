"""What every batched EIIE shares: the per-asset head on the K parties' maps, and padded universes.

A batched EIIE (:class:`~portfed.agents.batched_networks.BatchedEIIECNN`,
:class:`~portfed.agents.batched_recurrent.BatchedEIIERecurrent`) computes the maps ``h_i`` of every
asset of every party's batch from the stacked flat parameters ``Θ`` ``(K, d)``; the head is the
per-party network's (:class:`~portfed.agents.networks.EIIENetwork`):

    s_i = a · [h_i, w_{t−1,i}] + b,        w_t = softmax([s_0, s_1, …, s_m]),   s_0 the cash bias.

**Universes of different sizes.**  The EIIE scores every asset with the same weights, so parties
with ``m_k ≤ M`` assets share one computation: their assets are padded to ``M`` and the padded
assets get the score ``−∞``, hence weight exactly 0 — out of the softmax.  With a zero weight (and
a zero previous weight, which the PVM holds for them) a padded asset adds exactly 0 to the reward
``y_{t+1} · w_t``, to the drift ``y_t ⊙ w_{t−1}`` and to the transaction cost ``Σ |w'_i − w_i|``
(:mod:`portfed.agents.objective`), and the gradient through a ``−∞`` score is 0: party k's loss
and gradient are those of its own ``m_k``-asset network.

**The direct learner's step without autograd** (:meth:`BatchedEIIE.reward_gradient`).  Where the C
kernels build, the CNN EIIE's step is one kernel call per thread's parties (``convolution.c``'s
``cnn_step``): for each party the trunk's forward pass on its batch rows where the engine stacks them,
the head, the reward ``r_t`` of :mod:`portfed.agents.objective` and the gradient of ``−(1/B) Σ_t r_t``
with respect to the maps and the head's parameters (written out in ``head.h``), and the trunk's backward
pass while the party's rows are still in cache — no autograd graph, no copy of the batch's windows.
The recurrent EIIEs' step is three calls: the day loops' forward pass, the same head (``recurrence.c``'s
``recurrence_head``), the backward pass.  Measured: the head, loss and autograd around the CNN's trunk
were a third of a K = 50 step and the window gather a seventh (``docs/reports/performance.md``).  The
actor-critic learner keeps autograd (its actor's gradient comes through the critic).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator

import torch
from torch import nn

from portfed._threads import torch_threads
from portfed.agents.backend import Backend
from portfed.agents.native import NativeKernels
from portfed.agents.torch_backend import TORCH_BACKEND


def parameter_slices(module: nn.Module, rename: Callable[[str], str] = str) -> tuple[dict[str, slice], int]:
    """Each parameter's slice of ``module``'s flat vector (``named_parameters`` order, as
    :func:`~portfed.agents.networks.flat_parameters` concatenates them), keyed by ``rename(name)``, and
    the vector's size ``d``."""
    slices: dict[str, slice] = {}
    offset = 0
    for name, p in module.named_parameters():
        slices[rename(name)] = slice(offset, offset + p.numel())
        offset += p.numel()
    return slices, offset


class BatchedEIIE(ABC):
    """K parties' EIIEs of one architecture on stacked flat parameters (module doc).

    Subclasses set ``n_parameters``, ``input_width``, ``input_offset`` and ``_slices`` (the per-party
    network's parameter names → their slice of the flat vector; the head's ``score.weight``,
    ``score.bias`` and ``cash.bias`` last) and implement :meth:`layout`, :meth:`maps` and :meth:`traced_maps`.
    """

    n_parameters: int
    input_width: int
    input_offset: float
    _slices: dict[str, slice]
    #: Parties per forward/backward pass the engine uses by default; ``None``: all of them in one pass.
    parties_per_pass: int | None = None
    #: The backend the trunk runs on (``agent.backend`` resolved: :mod:`portfed.agents.backend`).
    backend: Backend = TORCH_BACKEND
    #: The fused C kernels the trunk runs in (:mod:`portfed.agents.native`), or ``None``: PyTorch operations.
    kernels: NativeKernels | None = None
    #: PyTorch's threads around kernels that split their parties over Python threads (a library built
    #: without OpenMP, :meth:`threads`); ``None``: the caller's.
    torch_threads_with_kernels: int | None = 1
    #: Whether :meth:`reward_gradient` runs: the direct learner's step in one kernel call (module doc).
    fused_step: bool = False

    @contextlib.contextmanager
    def threads(self) -> Iterator[None]:
        """The thread use of a training call (entered around it by the engine).  Without kernels: as the
        caller set it.  With them, the caller's ``torch.get_num_threads()`` threads split the parties of
        each kernel call.  Kernels built with OpenMP run on PyTorch's own OpenMP workers, so PyTorch keeps
        all its threads for the operations around them.  Kernels on Python threads compete with
        PyTorch's idle workers, which spin for a while after each operation, so there PyTorch runs on
        ``torch_threads_with_kernels`` threads: one for the recurrent EIIEs, all for the CNN.  Measured
        (``benchmarks/bench_engine.py --kernels``, idle 2-core machine, two threads, K = 50, party-steps/s
        with the kernels on Python threads and PyTorch on one thread / on both / the kernels on OpenMP):
        CNN close/high/low 7,065 / 7,311 / 10,344; RNN 2,733 / 2,148 / 3,179; LSTM 770 / 740 / 827."""
        if self.kernels is None:
            yield
            return
        self.kernels.threads = torch.get_num_threads()
        try:
            with torch_threads(None if self.kernels.openmp else self.torch_threads_with_kernels):
                yield
        finally:
            self.kernels.threads = None

    @abstractmethod
    def layout(self, windows: torch.Tensor) -> torch.Tensor:
        """``(N, F, m, l)`` price windows (divided by the latest close) → ``(N, m, input_width)`` input rows."""

    @abstractmethod
    def maps(self, theta: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        """``(K, B, m, input_width)`` input rows → ``(K, B·m, D)`` per-asset maps."""

    @abstractmethod
    def traced_maps(self, theta: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        """:meth:`maps` of the PyTorch path as plain differentiable operations — autograd forms the backward pass,
        no hand-written :class:`torch.autograd.Function`, no ``out=`` buffers — which ``torch.compile`` traces
        whole and a CUDA graph records (the captured step, :mod:`portfed.agents.captured`).  Equal to
        :meth:`maps` to float32 round-off."""

    def reward_gradient(self, theta: torch.Tensor, windows: torch.Tensor, first_rows: torch.Tensor,
                        previous: torch.Tensor, y_now: torch.Tensor, y_next: torch.Tensor, padded: torch.Tensor | None,
                        commission: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The direct learner's step without autograd (module doc; networks with :attr:`fused_step`).

        Args:
            theta: ``(K, d)`` stacked flat parameters.
            windows: the stacked :meth:`layout` rows ``(days, m, input_width)`` of every party.
            first_rows: ``(K,)`` the row of ``windows`` of each party's first batch day; its ``B`` days are
                the consecutive rows.
            previous, y_now, y_next: ``(K, B, m + 1)`` ``w_{t−1}``, ``y_t``, ``y_{t+1}``, cash first.
            padded: as in :meth:`forward`.
            commission: ``c``.

        Returns:
            the portfolios ``(K, B, m + 1)``, the rewards ``r_t`` ``(K, B)`` and ``∇_Θ`` of ``−(1/B) Σ_t r_t``
            ``(K, d)`` (penalties excluded): :meth:`forward`, :func:`~portfed.agents.objective.log_returns`
            and autograd to float32 round-off.
        """
        raise NotImplementedError(f"{type(self).__name__} has no fused step")

    @property
    def _head_columns(self) -> slice:
        """The head's parameters in ``Θ``: ``a`` (the maps' weights, then the previous weight's), ``b`` and the
        cash bias, its last ``D + 3`` columns (the class doc's order)."""
        return slice(self._slices["score.weight"].start, self._slices["cash.bias"].stop)

    def forward(self, theta: torch.Tensor, history: torch.Tensor, previous: torch.Tensor,
                padded: torch.Tensor | None = None) -> torch.Tensor:
        """Portfolios of K parties.

        Args:
            theta: ``(K, d)`` stacked flat parameters.
            history: ``(K, B, m, input_width)`` input rows (:meth:`layout`).
            previous: ``(K, B, m)`` non-cash previous weights.
            padded: ``(K, 1, m)`` True where party k's universe has no asset (module doc), or ``None``.

        Returns:
            ``(K, B, m + 1)`` weights on the simplex, cash first.
        """
        return self.head(theta, self.maps(theta, history), previous, padded)

    def head(self, theta: torch.Tensor, maps: torch.Tensor, previous: torch.Tensor,
             padded: torch.Tensor | None = None) -> torch.Tensor:
        """The head of the module doc on the ``(K, B·m, D)`` maps: :meth:`forward` after :meth:`maps` (or after
        :meth:`traced_maps`, the captured step's); ``previous`` ``(K, B, m)``, ``padded`` as in :meth:`forward`."""
        k, b, m = previous.shape
        sl = self._slices
        score = theta[:, sl["score.weight"]]  # (K, D + 1): the D maps' weights, then the previous weight's
        offset = torch.addcmul(theta[:, sl["score.bias"]], previous.reshape(k, b * m), score[:, -1:])
        scores = torch.baddbmm(offset.unsqueeze(-1), maps, score[:, :-1].unsqueeze(-1)).view(k, b, m)
        if padded is not None:
            scores = scores.masked_fill(padded, float("-inf"))
        cash = theta[:, sl["cash.bias"]].unsqueeze(1).expand(k, b, 1)
        return torch.softmax(torch.cat([cash, scores], dim=-1), dim=-1)

    __call__ = forward
