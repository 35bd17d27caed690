"""K parties' CNN EIIEs evaluated as one computation on their stacked flat parameters.

Every party owns the network of :class:`~portfed.agents.networks.EIIECNN`; here the K parameter
vectors are the rows of one ``(K, d)`` tensor ``Θ`` (the federation's flat order, so a row *is* the
party's ``flat_parameters``) and every layer becomes a batched matrix product (``torch.bmm``) over
the party axis — no Python loop over parties; the per-party losses are independent, so
``∇_Θ Σ_k L_k`` has row k equal to ``∇ L_k``.

Layers, for party k, batch day b, asset i (``X = history − input_offset``: centred windows, or the
raw ratios with ``input_scale: raw``; ``F`` features,
window ``l``, ``W = l − 2`` conv outputs, ``C`` first maps, ``D`` second maps):

* conv ``1×3``: ``h1[c, w] = relu(b1[c] + Σ_{f,s} K1[c, f, s] X[f, w + s])``.  The ``W`` outputs are
  cut into ``n`` blocks of ``P`` consecutive outputs starting at ``s_j = min(j P, W − P)`` (the last
  block may overlap the one before it); block j reads the ``P + 2`` days ``s_j … s_j + P + 1`` of
  every feature.  :meth:`BatchedEIIECNN.layout` stores each asset's window as these ``n`` blocks
  (``n · F · (P + 2)`` numbers), so the convolution of all blocks of all rows is *one* matrix product
  with the banded matrix ``A ∈ R^{F(P+2) × C P}``, ``A[f(P+2) + q, c P + p] = K1[c, f, q − p]`` for
  ``0 ≤ q − p < 3`` (gathered from ``K1`` by a fixed index).  ``P = W`` is the plain banded product
  of the whole window (10× the multiply-adds of the convolution); smaller blocks cost
  ``(P + 2)/3`` times the convolution's multiply-adds but give thinner products.
* conv ``1×W``: ``h2 = relu(b2 + K2 · h1)``, ``K2`` gathered into the block order of ``h1`` (zero
  columns for the outputs an overlapping block repeats, so each output counts once).
* head: ``s_i = a · [h2_i, w_{t−1,i}] + b``; ``w_t = softmax([cash, s_1 … s_m])``
  (:class:`~portfed.agents.batched_head.BatchedEIIE`, shared with the recurrent EIIEs).

The two convolutions and their ReLUs are one :class:`torch.autograd.Function` with a hand-written
backward — ``g2 = ∂h2 ⊙ [h2 > 0]``, ``∂K2 = g2ᵀ h1``, ``g1 = (g2 K2) ⊙ [h1 > 0]``, ``∂A = Xᵀ g1``,
``∂K1[c, f, s] = Σ_p ∂A[f(P+2) + p + s, c P + p]``, biases the sums of ``g`` — so the ReLUs run in
place on contiguous buffers and no gradient is formed for the (constant) windows.  Both passes are the
backend's (:mod:`portfed.agents.backend`, ``agent.backend``; the layout's indices:
:class:`~portfed.agents.conv_layout.ConvolutionLayout`): with ``torch`` the banded products above
(:class:`~portfed.agents.torch_backend.TorchConvolutions`).  Measured
(``benchmarks/bench_engine.py --impls``): autograd over the same products, grouped convolutions,
``vmap(grad(functional_call))`` and ``P = W`` are slower on CPU.

With ``native`` (where a C compiler builds them) the two convolutions and their backward run instead in
the fused kernels of ``convolution.c`` (:class:`~portfed.agents.native.ConvolutionKernels`):
16 rows at a time, every intermediate in registers, the plain convolution's multiply-adds (no band
of zeros), the rows read straight from this layout, the parties split over PyTorch's own OpenMP
workers; measured (``benchmarks/bench_engine.py --kernels``, two threads, close/high/low): K = 50 6,781 →
10,344 party-steps/s, K = 10 4,398 → 5,558.  With the direct learner the whole step is one call of
``cnn_step`` (:meth:`BatchedEIIECNN.reward_gradient`; :mod:`~portfed.agents.batched_head`): K = 50
11,467 → 16,862, K = 10 6,029 → 11,806 (``benchmarks/ab_engine.py``, same run, idle machine, 2026-11-26).

The sums run in a different order from oneDNN's convolutions, so results agree with the per-party
network to float32 round-off (≈1e-6 relative), not bit for bit.
"""

from __future__ import annotations

from typing import Any

import torch

from portfed.agents.backend import Backend, Convolutions, operations
from portfed.agents.batched_head import BatchedEIIE, parameter_slices
from portfed.agents.config import AgentConfig
from portfed.agents.conv_layout import ConvolutionLayout
from portfed.agents.native import ConvolutionKernels
from portfed.agents.networks import EIIECNN
from portfed.agents.torch_backend import TorchConvolutions

#: Conv outputs per block (``P``, capped at ``W``): 14 measured fastest at the paper's window 30
#: (``W = 28``) for 1 and 3 features, 1 and 2 threads (``benchmarks/bench_engine.py --impls``).
DEFAULT_BLOCK = 14


class BatchedEIIECNN(BatchedEIIE):
    """The stacked-parameter CNN EIIE of ``config`` (``config.network`` must be ``"cnn"``).

    Args:
        config: the agents' hyper-parameters.
        block: conv outputs per block ``P`` (module doc); ``None``: ``min(DEFAULT_BLOCK, W)``.

    Attributes:
        n_parameters: ``d``, the size of one party's flat parameter vector.
        input_width: ``n · F · (P + 2)``, the width of one asset's window in :meth:`layout`.
    """

    def __init__(self, config: AgentConfig, block: int | None = None) -> None:
        if config.network != "cnn":
            raise ValueError(
                f"the batched engine evaluates the CNN EIIE only, got network={config.network!r}; "
                "(BatchedEIIERecurrent evaluates the RNN and LSTM)"
            )
        template = EIIECNN(config.n_features, config.window, config.conv_maps, config.dense_maps)
        self.n_features, self.window = config.n_features, config.window
        self.input_offset = config.input_offset
        self.conv_maps, self.dense_maps = config.conv_maps, config.dense_maps
        self.width = config.window - 2
        block = min(DEFAULT_BLOCK, self.width) if block is None else block
        if isinstance(block, bool) or not isinstance(block, int) or not 1 <= block <= self.width:
            raise ValueError(f"block must be an integer in [1, {self.width}] (window − 2), got {block!r}")
        device = torch.device(config.device)
        #: The block layout and its indices (:class:`~portfed.agents.conv_layout.ConvolutionLayout`).
        self.conv_layout = ConvolutionLayout.build(self.n_features, self.window, self.conv_maps, self.dense_maps,
                                                   block, device)
        self.block, self.n_blocks = block, self.conv_layout.n_blocks
        self._slices, self.n_parameters = parameter_slices(template)
        self.input_width = self.conv_layout.input_width
        backend, convolutions = operations(config.trunk_backend, device,
                                           lambda chosen: chosen.convolutions(self.conv_layout))
        #: The backend (``agent.backend``) and the trunk's two passes it gives (:mod:`portfed.agents.backend`).
        self.backend: Backend = backend
        self.convolutions: Convolutions = convolutions
        self.kernels = convolutions if isinstance(convolutions, ConvolutionKernels) else None
        #: The trunk as plain PyTorch operations on the same layout, for :meth:`traced_maps` (any backend).
        self.traced_convolutions = TorchConvolutions(self.conv_layout)
        self.torch_threads_with_kernels = None  # Adam, the gathers (and the actor-critic's head) keep both threads
        self.fused_step = self.kernels is not None

    def layout(self, windows: torch.Tensor) -> torch.Tensor:
        """``(N, F, m, l)`` price windows (``history``, divided by the latest close) → the network's
        ``(N, m, input_width)`` input rows: less ``input_offset`` (centred, or raw) and cut into blocks
        (module doc)."""
        n, f_n, m, window = windows.shape
        if (f_n, window) != (self.n_features, self.window):
            raise ValueError(f"windows of shape {tuple(windows.shape)} do not have {self.n_features} features × "
                             f"window {self.window}")
        rows = (windows - self.input_offset if self.input_offset else windows).permute(0, 2, 1, 3)
        rows = rows.reshape(n, m, f_n * window)
        return rows[..., self.conv_layout.columns].contiguous()

    def maps(self, theta: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        """``(K, B, m, input_width)`` input rows (:meth:`layout`) → the ``(K, B·m, D)`` maps ``h2``."""
        k, b, m, _ = history.shape
        sl = self._slices
        return _Trunk.apply(self.convolutions, history.reshape(k, b * m, -1), theta[:, sl["conv1.weight"]],
                            theta[:, sl["conv1.bias"]], theta[:, sl["conv2.weight"]], theta[:, sl["conv2.bias"]])

    def traced_maps(self, theta: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        """:meth:`maps` as plain differentiable operations, autograd forming their backward pass, whatever the
        backend (:meth:`TorchConvolutions.traced <portfed.agents.torch_backend.TorchConvolutions.traced>`;
        :meth:`~portfed.agents.batched_head.BatchedEIIE.traced_maps`)."""
        k, b, m, _ = history.shape
        sl = self._slices
        return self.traced_convolutions.traced(history.reshape(k, b * m, -1), theta[:, sl["conv1.weight"]],
                                               theta[:, sl["conv1.bias"]], theta[:, sl["conv2.weight"]],
                                               theta[:, sl["conv2.bias"]])

    #: The trunk's parameters, in the order of the kernels' arguments; the head's follow them in ``Θ``.
    TRUNK = ("conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias")

    def reward_gradient(self, theta: torch.Tensor, windows: torch.Tensor, first_rows: torch.Tensor,
                        previous: torch.Tensor, y_now: torch.Tensor, y_next: torch.Tensor, padded: torch.Tensor | None,
                        commission: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The whole step in ``cnn_step`` (:meth:`~portfed.agents.batched_head.BatchedEIIE.reward_gradient`)."""
        if self.kernels is None:
            raise RuntimeError("the CNN EIIE's fused step needs its C kernels (agent.backend native)")
        k, sl, head = theta.shape[0], self._slices, self._head_columns
        weights, rewards, grads = self.kernels.step(
            windows, first_rows.to(torch.int32), previous.shape[1],
            tuple(theta[:, sl[name]].contiguous() for name in self.TRUNK), theta[:, head].contiguous(),
            previous.contiguous(), y_now.contiguous(), y_next.contiguous(),
            None if padded is None else padded.reshape(k, -1).contiguous(), commission)
        grad = torch.empty_like(theta)
        for name, part in zip(self.TRUNK, grads[:-1], strict=True):
            grad[:, sl[name]] = part
        grad[:, head] = grads[-1]
        return weights, rewards, grad


class _Trunk(torch.autograd.Function):
    """``h2`` ``(K, B·m, D)`` of the module doc's two layers in the backend's
    :class:`~portfed.agents.backend.Convolutions`, from the ``(K, B·m, input_width)`` rows and the flat
    weights ``K1`` ``(K, C·F·3)``, ``b1``, ``K2`` ``(K, D·C·W)``, ``b2``; no gradient for the rows."""

    @staticmethod
    def forward(ctx: Any, convolutions: Convolutions, rows: torch.Tensor, kernel1: torch.Tensor,
                bias1: torch.Tensor, kernel2: torch.Tensor, bias2: torch.Tensor) -> torch.Tensor:
        maps, saved = convolutions.forward(rows, kernel1, bias1, kernel2, bias2)
        ctx.convolutions = convolutions
        ctx.save_for_backward(*saved)
        return maps

    @staticmethod
    def backward(ctx: Any, grad_maps: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        return None, None, *ctx.convolutions.backward(ctx.saved_tensors, grad_maps)
