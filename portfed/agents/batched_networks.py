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
place on contiguous buffers and no gradient is formed for the (constant) windows.  Measured
(``benchmarks/bench_engine.py --impls``): autograd over the same products, grouped convolutions,
``vmap(grad(functional_call))`` and ``P = W`` are slower on CPU.

Where a C compiler builds them, the two convolutions and their backward run instead in the fused
kernels of ``convolution.c`` (:class:`~portfed.agents.native.ConvolutionKernels`, ``PORTFED_NATIVE``):
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

from portfed.agents.batched_head import BatchedEIIE, parameter_slices
from portfed.agents.config import AgentConfig
from portfed.agents.native import convolution_kernels
from portfed.agents.networks import EIIECNN

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
        self.block = block
        self.n_blocks = -(-self.width // block)
        self._starts = [min(j * block, self.width - block) for j in range(self.n_blocks)]
        self._slices, self.n_parameters = parameter_slices(template)
        self.input_width = self.n_blocks * self.n_features * (block + 2)
        device = torch.device(config.device)
        self._columns, self._band, self._band_grad, self._kernel2, self._kernel2_grad = (
            index.to(device) for index in self._indices()
        )
        # traced_maps' 0/1 matrices of the gathers _band and _kernel2 (their last class: the zero slot)
        self._band_matrix, self._kernel2_matrix = (
            torch.nn.functional.one_hot(index.flatten(), classes).T.to(torch.float32)
            for index, classes in ((self._band, self.conv_maps * self.n_features * 3 + 1),
                                   (self._kernel2, self.conv_maps * self.width + 1)))
        self.kernels = convolution_kernels(self.n_features, self.window, self.conv_maps, self.dense_maps, device)
        self.torch_threads_with_kernels = None  # Adam, the gathers (and the actor-critic's head) keep both threads
        self.fused_step = self.kernels is not None
        #: The column of each (feature, day) in a :meth:`layout` row (its first, where blocks overlap), for the kernels.
        first = {int(q): p for p, q in reversed(list(enumerate(self._columns.tolist())))}
        self._window_columns = torch.tensor([first[q] for q in range(self.n_features * self.window)],
                                            dtype=torch.int32)

    def _indices(self) -> tuple[torch.Tensor, ...]:
        """Fixed gather indices: window → blocks, ``K1`` → ``A`` and back, ``K2`` → block order and back."""
        c_maps, f_n, width, window, p_n = self.conv_maps, self.n_features, self.width, self.window, self.block
        q_n = p_n + 2
        columns = torch.tensor([f * window + start + q for start in self._starts for f in range(f_n) for q in range(q_n)])
        band = torch.full((f_n * q_n, c_maps * p_n), c_maps * f_n * 3, dtype=torch.long)  # last: the zero slot
        band_grad = torch.empty(c_maps * f_n * 3, p_n, dtype=torch.long)
        for c in range(c_maps):
            for f in range(f_n):
                for s in range(3):
                    for p in range(p_n):
                        band[f * q_n + p + s, c * p_n + p] = (c * f_n + f) * 3 + s
                        band_grad[(c * f_n + f) * 3 + s, p] = (f * q_n + p + s) * c_maps * p_n + c * p_n + p
        kernel2 = torch.full((self.n_blocks * c_maps * p_n,), c_maps * width, dtype=torch.long)
        first: dict[tuple[int, int], int] = {}
        for j, start in enumerate(self._starts):
            for c in range(c_maps):
                for p in range(p_n):
                    position = (j * c_maps + c) * p_n + p
                    if (c, start + p) not in first:
                        first[(c, start + p)] = position
                        kernel2[position] = c * width + start + p
        kernel2_grad = torch.tensor([first[(c, w)] for c in range(c_maps) for w in range(width)])
        return columns, band, band_grad, kernel2, kernel2_grad

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
        return rows[..., self._columns].contiguous()

    def maps(self, theta: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        """``(K, B, m, input_width)`` input rows (:meth:`layout`) → the ``(K, B·m, D)`` maps ``h2``."""
        k, b, m, _ = history.shape
        sl = self._slices
        if self.kernels is not None:
            return _FusedTrunk.apply(self, history.reshape(k, b * m, -1), theta[:, sl["conv1.weight"]],
                                     theta[:, sl["conv1.bias"]], theta[:, sl["conv2.weight"]], theta[:, sl["conv2.bias"]])
        kernel2 = theta[:, sl["conv2.weight"]].view(k, self.dense_maps, self.conv_maps * self.width)
        return _ConvTrunk.apply(self, history.reshape(k, b * m * self.n_blocks, -1), theta[:, sl["conv1.weight"]],
                                theta[:, sl["conv1.bias"]], kernel2, theta[:, sl["conv2.bias"]])

    def traced_maps(self, theta: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        """The two layers of :class:`_ConvTrunk` as plain operations, autograd forming their backward pass
        (:meth:`~portfed.agents.batched_head.BatchedEIIE.traced_maps`).  ``A`` and the block order of ``K2`` are
        products with fixed 0/1 matrices rather than gathers — the same numbers (one term per entry), and a
        backward pass that is a product too, where a gather's is a scatter-add (atomic, in no fixed order, on
        a GPU)."""
        k, b, m, _ = history.shape
        sl = self._slices
        kernel1, kernel2 = theta[:, sl["conv1.weight"]], theta[:, sl["conv2.weight"]]
        band = (torch.cat([kernel1, kernel1.new_zeros(k, 1)], dim=1) @ self._band_matrix).view(k, *self._band.shape)
        kernel2 = torch.cat([kernel2.view(k, self.dense_maps, -1), kernel2.new_zeros(k, self.dense_maps, 1)], dim=2)
        return conv_trunk(self, history.reshape(k, b * m * self.n_blocks, -1), band, theta[:, sl["conv1.bias"]],
                          kernel2 @ self._kernel2_matrix, theta[:, sl["conv2.bias"]])[-1]

    #: The trunk's parameters, in the order of the kernels' arguments; the head's follow them in ``Θ``.
    TRUNK = ("conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias")

    def reward_gradient(self, theta: torch.Tensor, windows: torch.Tensor, first_rows: torch.Tensor,
                        previous: torch.Tensor, y_now: torch.Tensor, y_next: torch.Tensor, padded: torch.Tensor | None,
                        commission: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The whole step in ``cnn_step`` (:meth:`~portfed.agents.batched_head.BatchedEIIE.reward_gradient`)."""
        if self.kernels is None:
            raise RuntimeError("the CNN EIIE's fused step needs its C kernels (PORTFED_NATIVE)")
        k, sl, head = theta.shape[0], self._slices, self._head_columns
        weights, rewards, grads = self.kernels.step(
            windows, first_rows.to(torch.int32), previous.shape[1], self._window_columns,
            tuple(theta[:, sl[name]].contiguous() for name in self.TRUNK), theta[:, head].contiguous(),
            previous.contiguous(), y_now.contiguous(), y_next.contiguous(),
            None if padded is None else padded.reshape(k, -1).contiguous(), commission)
        grad = torch.empty_like(theta)
        for name, part in zip(self.TRUNK, grads[:-1], strict=True):
            grad[:, sl[name]] = part
        grad[:, head] = grads[-1]
        return weights, rewards, grad


class _FusedTrunk(torch.autograd.Function):
    """``h2`` ``(K, B·m, D)`` of the module doc's two layers in the fused kernels, from the ``(K, B·m,
    input_width)`` rows and the flat weights ``K1`` ``(K, C·F·3)``, ``b1``, ``K2`` ``(K, D·C·W)``, ``b2``."""

    @staticmethod
    def forward(ctx: Any, net: BatchedEIIECNN, rows: torch.Tensor, kernel1: torch.Tensor, bias1: torch.Tensor,
                kernel2: torch.Tensor, bias2: torch.Tensor) -> torch.Tensor:
        rows = rows.contiguous()
        weights = tuple(w.contiguous() for w in (kernel1, bias1, kernel2, bias2))
        maps = net.kernels.forward(rows, net._window_columns, *weights)  # (K, R, D)
        ctx.net = net
        ctx.save_for_backward(rows, *weights[:3], maps)
        return maps

    @staticmethod
    def backward(ctx: Any, grad_maps: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        rows, kernel1, bias1, kernel2, maps = ctx.saved_tensors
        grads = ctx.net.kernels.backward(rows, ctx.net._window_columns, kernel1, bias1, kernel2, maps,
                                         grad_maps.contiguous())
        return None, None, *grads


class _ConvTrunk(torch.autograd.Function):
    """``h2 = relu(b2 + K2 · relu(b1 + conv1(X)))`` of K parties with the backward of the module doc."""

    @staticmethod
    def forward(ctx: Any, net: BatchedEIIECNN, rows: torch.Tensor, kernel1: torch.Tensor, bias1: torch.Tensor,
                kernel2: torch.Tensor, bias2: torch.Tensor) -> torch.Tensor:
        k = kernel1.shape[0]
        band = torch.cat([kernel1, kernel1.new_zeros(k, 1)], dim=1)[:, net._band]  # (K, F(P+2), C·P)
        blocked = torch.cat([kernel2, kernel2.new_zeros(k, net.dense_maps, 1)], dim=2)[:, :, net._kernel2]
        hidden, maps = conv_trunk(net, rows, band, bias1, blocked, bias2)
        ctx.net = net
        ctx.save_for_backward(rows, hidden, blocked, maps)
        return maps

    @staticmethod
    def backward(ctx: Any, grad_maps: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        net = ctx.net
        rows, hidden, blocked, maps = ctx.saved_tensors
        k, p_n = hidden.shape[0], net.block
        g2 = torch.ops.aten.threshold_backward(grad_maps.contiguous(), maps, 0)  # ∂h2 ⊙ [h2 > 0]
        grad_kernel2 = torch.bmm(g2.transpose(1, 2), hidden)[:, :, net._kernel2_grad]
        g1 = torch.ops.aten.threshold_backward(torch.bmm(g2, blocked), hidden, 0).view(k, rows.shape[1], -1)
        grad_band = torch.bmm(rows.transpose(1, 2), g1)  # (K, F(P+2), C·P)
        grad_kernel1 = grad_band.reshape(k, -1)[:, net._band_grad].sum(dim=-1)
        grad_bias1 = g1.sum(dim=1).view(k, net.conv_maps, p_n).sum(dim=-1)
        return None, None, grad_kernel1, grad_bias1, grad_kernel2, g2.sum(dim=1)


def conv_trunk(net: BatchedEIIECNN, rows: torch.Tensor, band: torch.Tensor, bias1: torch.Tensor,
               blocked: torch.Tensor, bias2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The module doc's two layers on the ``(K, B·m·n, F(P+2))`` blocks, from the banded ``A`` ``(K, F(P+2), C·P)``
    and ``K2`` in block order ``(K, D, n·C·P)``: ``h1`` ``(K, B·m, n·C·P)`` and ``h2`` ``(K, B·m, D)`` —
    :class:`_ConvTrunk`'s forward pass, and under autograd :meth:`BatchedEIIECNN.traced_maps` (the ReLUs in
    place on the products' fresh outputs)."""
    k, p_n = band.shape[0], net.block
    hidden = torch.baddbmm(bias1.repeat_interleave(p_n, dim=1).unsqueeze(1), rows, band).relu_()
    hidden = hidden.view(k, -1, net.n_blocks * net.conv_maps * p_n)  # (K, B·m, n·C·P)
    return hidden, torch.baddbmm(bias2.unsqueeze(1), hidden, blocked.transpose(1, 2)).relu_()
