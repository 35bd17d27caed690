"""The PyTorch backend: the reference implementation of the operations the batched EIIEs ask of a backend
(:mod:`portfed.agents.backend`), on any device PyTorch runs on — the CPU, a GPU.

* :class:`TorchDayLoops`, the recurrent EIIEs' day loops (the maths: :mod:`portfed.agents.batched_recurrent`);
* :class:`TorchConvolutions`, the CNN EIIE's two convolutions and their ReLUs as one banded product per
  layer on the block layout (the maths: :mod:`portfed.agents.batched_networks`,
  :class:`~portfed.agents.conv_layout.ConvolutionLayout`), with the hand-written backward pass
  ``g2 = ∂h2 ⊙ [h2 > 0]``, ``∂K2 = g2ᵀ h1``, ``g1 = (g2 K2) ⊙ [h1 > 0]``, ``∂A = Xᵀ g1``,
  ``∂K1[c, f, s] = Σ_p ∂A[f(P+2) + p + s, c P + p]``, biases the sums of ``g``;
* each with a ``traced`` form of its forward pass: plain differentiable operations, no hand-written
  backward pass and no ``out=`` buffers, which the captured step (:mod:`portfed.agents.captured`) records;
* :class:`TorchBackend`, which hands them out (``agent.backend: torch``, and the fallback of ``auto``).

It has no fused step (the direct learner's whole step in one call, :mod:`portfed.agents.batched_head`):
its step is autograd's over the same operations.
"""

from __future__ import annotations

import torch

from portfed.agents.conv_layout import ConvolutionLayout


class TorchDayLoops:
    """The day loops of the module doc as PyTorch operations, with the interface of
    :class:`~portfed.agents.native.RecurrenceKernels` (which fuses them).

    Layout: every per-day quantity is stored unit-major, ``(K, ·, l, R)`` — the transposed recurrence
    ``z_jᵀ = A_jᵀ + W_hh h_{j−1}ᵀ`` — so that (measured, ``PORTFED_NATIVE=0
    benchmarks/bench_engine.py --chunks``): every element-wise operation runs along the ``R = B·m``
    sequences, a contiguous inner loop of hundreds of numbers, not along the 20 hidden units; the
    recurrence runs in place in the buffer that holds the input projections; the sums over days and
    sequences of the weight gradients are one batched product each over the ``(K, ·, l·R)`` views of
    the same storage.  The saved state is unit-major:
    ``hs`` ``(K, H, l + 1, R)`` (``h_0 = 0``; the LSTM's ``cs`` too), the LSTM's activated gates ``acts``
    ``(K, 4H, l, R)`` (the input projections until the day's update) and ``tanh_c`` ``(K, H, l, R)``; the
    backward pass keeps every ``δ_j`` (``(K, G·H, l, R)``) and sums the weight gradients over days and
    sequences as one batched product each over its ``(K, ·, l·R)`` view."""

    def forward(self, cell: str, x: torch.Tensor, w_ih: torch.Tensor, bias: torch.Tensor,
                w_hh: torch.Tensor, keep: bool = True) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """``h_l`` ``(K, H, R)`` and the saved state (class doc; ``keep`` is the fused kernels' hint, the
        state is returned either way)."""
        k, _, window, r = x.shape
        h_n = w_hh.shape[2]
        hs = x.new_empty(k, h_n, window + 1, r)  # h_0ᵀ … h_lᵀ
        hs[:, :, 0] = 0.0
        if cell == "rnn":  # h_jᵀ = tanh(A_jᵀ + W_hh h_{j−1}ᵀ), in the buffer of A
            _project(x, w_ih, bias, out=hs[:, :, 1:])
            for j in range(window):
                hs[:, :, j + 1].baddbmm_(w_hh, hs[:, :, j]).tanh_()
            return hs[:, :, window], (hs,)
        acts = _project(x, w_ih, bias, out=x.new_empty(k, 4 * h_n, window, r))  # → σ(i), σ(f), tanh(g), σ(o)
        cs = torch.zeros_like(hs)  # c_0 … c_l
        tanh_c = x.new_empty(k, h_n, window, r)
        for j in range(window):
            z = acts[:, :, j].baddbmm_(w_hh, hs[:, :, j])
            z[:, : 2 * h_n].sigmoid_()
            z[:, 2 * h_n : 3 * h_n].tanh_()
            z[:, 3 * h_n :].sigmoid_()
            i, f, g, o = z.split(h_n, dim=1)
            torch.mul(f, cs[:, :, j], out=cs[:, :, j + 1]).addcmul_(i, g)
            torch.tanh(cs[:, :, j + 1], out=tanh_c[:, :, j])
            torch.mul(o, tanh_c[:, :, j], out=hs[:, :, j + 1])
        return hs[:, :, window], (hs, acts, cs, tanh_c)

    def backward(self, cell: str, x: torch.Tensor, w_hh: torch.Tensor, saved: tuple[torch.Tensor, ...],
                 grad_h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The gradients of the summed biases, ``W_ih`` and ``W_hh`` from ``∂h_l`` ``(K, H, R)`` (overwritten)."""
        hs = saved[0]
        window = hs.shape[2] - 1
        dh, w_hh_t, h_n = grad_h, w_hh.transpose(1, 2), grad_h.shape[1]
        deltas = hs.new_empty(hs.shape[0], w_hh.shape[1], window, hs.shape[3])  # δ_jᵀ
        scratch = torch.empty_like(dh)
        if cell == "rnn":
            for j in range(window, 0, -1):
                delta = deltas[:, :, j - 1]  # δ_j = ∂h_j ⊙ (1 − h_j²) = ∂h_j − (∂h_j ⊙ h_j) ⊙ h_j
                h = hs[:, :, j]
                torch.addcmul(dh, torch.mul(dh, h, out=scratch), h, value=-1.0, out=delta)
                if j > 1:
                    torch.bmm(w_hh_t, delta, out=dh)
            return _weight_gradients(x, hs, deltas)
        _, acts, cs, tanh_c = saved
        dc, other = torch.zeros_like(dh), torch.empty_like(dh)
        for j in range(window, 0, -1):
            i, f, g, o = acts[:, :, j - 1].split(h_n, dim=1)
            tc = tanh_c[:, :, j - 1]
            delta = deltas[:, :, j - 1]
            di, df, dg, do = delta.split(h_n, dim=1)
            # ∂o: ∂h ⊙ tanh c ⊙ o(1 − o);  ∂c += ∂h ⊙ o ⊙ (1 − tanh² c)
            torch.mul(dh, tc, out=scratch)
            torch.addcmul(scratch, scratch, o, value=-1.0, out=do).mul_(o)
            torch.mul(dh, o, out=scratch)
            dc.add_(scratch).addcmul_(torch.mul(scratch, tc, out=other), tc, value=-1.0)
            # ∂i: ∂c ⊙ g ⊙ i(1 − i);  ∂f: ∂c ⊙ c_{j−1} ⊙ f(1 − f);  ∂g: ∂c ⊙ i ⊙ (1 − g²)
            torch.mul(dc, g, out=scratch)
            torch.addcmul(scratch, scratch, i, value=-1.0, out=di).mul_(i)
            torch.mul(dc, cs[:, :, j - 1], out=scratch)
            torch.addcmul(scratch, scratch, f, value=-1.0, out=df).mul_(f)
            torch.mul(dc, i, out=scratch)
            torch.addcmul(scratch, torch.mul(scratch, g, out=other), g, value=-1.0, out=dg)
            if j > 1:
                dc.mul_(f)
                torch.bmm(w_hh_t, delta, out=dh)
        return _weight_gradients(x, hs, deltas)

    def traced(self, cell: str, x: torch.Tensor, w_ih: torch.Tensor, bias: torch.Tensor,
               w_hh: torch.Tensor) -> torch.Tensor:
        """``h_l`` ``(K, H, R)`` of :meth:`forward` as ``l`` out-of-place steps, autograd forming the
        backpropagation through time: plain differentiable operations that ``torch.compile`` traces whole,
        unrolling and fusing the day loop, and a CUDA graph records (the captured step,
        :meth:`~portfed.agents.batched_head.BatchedEIIE.traced_maps`).  Equal to :meth:`forward` to float32
        round-off."""
        k, _, window, r = x.shape
        h_n = w_hh.shape[2]
        a = _project(x, w_ih, bias)  # (K, G·H, l, R)
        h = x.new_zeros(k, h_n, r)
        c = torch.zeros_like(h)
        for j in range(window):
            z = torch.baddbmm(a[:, :, j], w_hh, h)
            if cell == "rnn":
                h = z.tanh()
                continue
            i, f, g, o = z.split(h_n, dim=1)
            c = torch.addcmul(f.sigmoid() * c, i.sigmoid(), g.tanh())
            h = o.sigmoid() * c.tanh()
        return h


def _weight_gradients(x: torch.Tensor, hs: torch.Tensor,
                      deltas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``∂b = Σ_j δ_j``, ``∂W_ih = Σ_j δ_jᵀ x_j`` and ``∂W_hh = Σ_j δ_jᵀ h_{j−1}`` over days and sequences,
    one product each over the ``(K, ·, l·R)`` views of the same storage."""
    k, gh, window, r = deltas.shape
    flat = deltas.view(k, gh, window * r)
    return (flat.sum(dim=2), torch.bmm(flat, x.view(k, x.shape[1], window * r).transpose(1, 2)),
            torch.bmm(flat, hs[:, :, :window].reshape(k, hs.shape[1], window * r).transpose(1, 2)))


#: The PyTorch day loops (stateless).
TORCH_DAY_LOOPS = TorchDayLoops()


def _project(x: torch.Tensor, w_ih: torch.Tensor, bias: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``A_jᵀ = W_ih x_jᵀ + b`` for every day and sequence at once, ``(K, G·H, l, R)``, written into ``out`` when
    given."""
    k, f, window, r = x.shape
    bias = bias.view(k, -1, 1, 1)
    if f == 1:  # an outer product: no matrix product with an inner size of 1
        return torch.addcmul(bias, w_ih.unsqueeze(-1), x, out=out)
    product = torch.bmm(w_ih, x.view(k, f, window * r))
    return torch.add(product.view(k, -1, window, r), bias, out=out)


class TorchConvolutions:
    """The CNN trunk ``h2 = relu(b2 + K2 · relu(b1 + conv1(X)))`` of K parties as PyTorch operations on the
    block layout ``layout`` (module doc): two batched banded products, the ReLUs in place."""

    def __init__(self, layout: ConvolutionLayout) -> None:
        self.layout = layout

    def forward(self, rows: torch.Tensor, kernel1: torch.Tensor, bias1: torch.Tensor, kernel2: torch.Tensor,
                bias2: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """The maps ``h2`` ``(K, R, D)`` and the state the backward pass reads, from the ``(K, R, input_width)``
        layout rows and the flat weights ``K1`` ``(K, C·F·3)``, ``b1`` ``(K, C)``, ``K2`` ``(K, D·C·W)``, ``b2``."""
        lay = self.layout
        k = kernel1.shape[0]
        band = torch.cat([kernel1, kernel1.new_zeros(k, 1)], dim=1)[:, lay.band]  # (K, F(P+2), C·P)
        kernel2 = kernel2.view(k, lay.dense_maps, lay.conv_maps * lay.width)
        blocked = torch.cat([kernel2, kernel2.new_zeros(k, lay.dense_maps, 1)], dim=2)[:, :, lay.kernel2]
        rows, hidden, maps = self._products(rows, band, bias1, blocked, bias2)
        return maps, (rows, hidden, blocked, maps)

    def traced(self, rows: torch.Tensor, kernel1: torch.Tensor, bias1: torch.Tensor, kernel2: torch.Tensor,
               bias2: torch.Tensor) -> torch.Tensor:
        """The maps ``h2`` of :meth:`forward` as plain differentiable operations, autograd forming their backward
        pass: ``A`` and the block order of ``K2`` as products with the layout's fixed 0/1 matrices
        (:attr:`~portfed.agents.conv_layout.ConvolutionLayout.band_matrix`, ``kernel2_matrix``) rather than
        gathers — what ``torch.compile`` traces and a CUDA graph records (the captured step,
        :meth:`~portfed.agents.batched_head.BatchedEIIE.traced_maps`).  Equal to :meth:`forward` to float32
        round-off."""
        lay = self.layout
        k = kernel1.shape[0]
        band = (torch.cat([kernel1, kernel1.new_zeros(k, 1)], dim=1) @ lay.band_matrix).view(k, *lay.band.shape)
        kernel2 = kernel2.view(k, lay.dense_maps, lay.conv_maps * lay.width)
        blocked = torch.cat([kernel2, kernel2.new_zeros(k, lay.dense_maps, 1)], dim=2) @ lay.kernel2_matrix
        return self._products(rows, band, bias1, blocked, bias2)[2]

    def _products(self, rows: torch.Tensor, band: torch.Tensor, bias1: torch.Tensor, blocked: torch.Tensor,
                  bias2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The two layers from the banded ``A`` ``(K, F(P+2), C·P)`` and ``K2`` in block order ``(K, D, n·C·P)``:
        the rows one per block ``(K, R·n, F(P+2))``, ``h1`` ``(K, R, n·C·P)`` and ``h2`` ``(K, R, D)`` (the
        ReLUs in place on the products' fresh outputs, which autograd allows)."""
        lay = self.layout
        k, p_n = band.shape[0], lay.block
        rows = rows.reshape(k, -1, lay.n_features * (p_n + 2))  # one row per block
        hidden = torch.baddbmm(bias1.repeat_interleave(p_n, dim=1).unsqueeze(1), rows, band).relu_()
        hidden = hidden.view(k, -1, lay.n_blocks * lay.conv_maps * p_n)  # (K, R, n·C·P)
        return rows, hidden, torch.baddbmm(bias2.unsqueeze(1), hidden, blocked.transpose(1, 2)).relu_()

    def backward(self, saved: tuple[torch.Tensor, ...], grad_maps: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``∂K1, ∂b1, ∂K2, ∂b2`` (the flat weights' shapes) from the saved state and ``∂h2`` ``(K, R, D)``."""
        lay = self.layout
        rows, hidden, blocked, maps = saved
        k, p_n = hidden.shape[0], lay.block
        g2 = torch.ops.aten.threshold_backward(grad_maps.contiguous(), maps, 0)  # ∂h2 ⊙ [h2 > 0]
        grad_kernel2 = torch.bmm(g2.transpose(1, 2), hidden)[:, :, lay.kernel2_grad]
        g1 = torch.ops.aten.threshold_backward(torch.bmm(g2, blocked), hidden, 0).view(k, rows.shape[1], -1)
        grad_band = torch.bmm(rows.transpose(1, 2), g1)  # (K, F(P+2), C·P)
        grad_kernel1 = grad_band.reshape(k, -1)[:, lay.band_grad].sum(dim=-1)
        grad_bias1 = g1.sum(dim=1).view(k, lay.conv_maps, p_n).sum(dim=-1)
        return grad_kernel1, grad_bias1, grad_kernel2.reshape(k, -1), g2.sum(dim=1)


class TorchBackend:
    """The PyTorch operations (module doc): the reference backend, on any device."""

    name = "torch"

    def day_loops(self, hidden: int) -> TorchDayLoops:
        """The recurrent EIIEs' day loops (any hidden size: they are stateless)."""
        return TORCH_DAY_LOOPS

    def convolutions(self, layout: ConvolutionLayout) -> TorchConvolutions:
        """The CNN trunk on ``layout``."""
        return TorchConvolutions(layout)


#: The PyTorch backend (stateless).
TORCH_BACKEND = TorchBackend()
