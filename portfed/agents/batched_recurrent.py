"""K parties' recurrent EIIEs (Elman RNN or LSTM) evaluated as one computation on their stacked flat parameters.

Every party owns the network of :class:`~portfed.agents.networks.EIIERecurrent` (Jiang, Xu & Liang 2017,
§5.2, the evaluator of paper 000 §8.2: "the RNN implementation of the EIIE"): one recurrent cell,
shared by the assets, reads each asset's window ``x_1 … x_l`` (``x_j ∈ R^F``, the features of day
``j`` less ``input_offset``) and its last hidden state ``h_l ∈ R^H`` is the asset's map; the head is
the CNN's.  Here the K parameter vectors are the rows of one ``(K, d)`` tensor ``Θ`` in the
per-party network's flat order (``weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0``, score,
cash), so a row *is* the party's ``flat_parameters`` and a model moves between the two freely.

For party k the ``R = B·m`` sequences of its batch (every asset of every batch day) run together:

* input projection: ``A = X W_ihᵀ + (b_ih + b_hh)`` (``G H`` rows: ``G = 1`` for the RNN, 4 for the
  LSTM's gates);
* recurrence, ``l`` days: ``z_j = A_j + h_{j−1} W_hhᵀ``, ``h_0 = 0`` (and ``c_0 = 0``), then
  - Elman: ``h_j = tanh(z_j)``;
  - LSTM (PyTorch's gate order ``i, f, g, o``): ``i, f, o = σ(z_i), σ(z_f), σ(z_o)``, ``g = tanh(z_g)``,
    ``c_j = f ⊙ c_{j−1} + i ⊙ g``, ``h_j = o ⊙ tanh(c_j)``.

The recurrence is one :class:`torch.autograd.Function` with a hand-written backpropagation through
time, so autograd records one node instead of ``~5 l``: from ``∂h_l``, for ``j = l … 1``

* Elman: ``δ_j = ∂h_j ⊙ (1 − h_j²)``, ``∂h_{j−1} = δ_j W_hh``;
* LSTM: ``∂c_j += ∂h_j ⊙ o ⊙ (1 − tanh² c_j)``, ``δ = [∂c_j ⊙ g ⊙ i(1 − i), ∂c_j ⊙ c_{j−1} ⊙ f(1 − f),
  ∂c_j ⊙ i ⊙ (1 − g²), ∂h_j ⊙ tanh c_j ⊙ o(1 − o)]``, ``∂c_{j−1} = ∂c_j ⊙ f``, ``∂h_{j−1} = δ_j W_hh``;

and the weight gradients ``∂W_hh = Σ_j δ_jᵀ h_{j−1}``, ``∂W_ih = Σ_j δ_jᵀ x_j``,
``∂b_ih = ∂b_hh = Σ_j δ_j``.  Measured against autograd over the same products and
``vmap(grad(functional_call))`` of the per-party module (``benchmarks/bench_engine.py --impls``).

Two implementations of these day loops, the two backends of :mod:`portfed.agents.backend` (``agent.backend``)
behind one protocol (:class:`~portfed.agents.backend.DayLoops`: ``forward`` → ``h_l`` and a saved state,
``backward`` → the three gradients): the fused C kernels of ``recurrence.c``
(:class:`~portfed.agents.native.RecurrenceKernels`: all days of a tile of sequences — 8 or 16, one vector
register — at a time with their state in registers, the projection and the gradients folded in, the
parties split over the run's threads) where a C compiler builds them, and :class:`~portfed.agents.torch_backend.TorchDayLoops`, the
same arithmetic as PyTorch operations (the projection and the gradients as single batched products,
the ``l`` steps as a few operations each).  Both sum in a different order from PyTorch's RNN kernels and from each other, so
the results agree with the per-party network to float32 round-off, not bit for bit.
"""

from __future__ import annotations

from typing import Any

import torch

from portfed.agents.backend import Backend, DayLoops, operations
from portfed.agents.batched_head import BatchedEIIE, parameter_slices
from portfed.agents.config import AgentConfig
from portfed.agents.native import RecurrenceKernels
from portfed.agents.networks import EIIERecurrent
from portfed.agents.torch_backend import TORCH_DAY_LOOPS, TorchDayLoops

__all__ = ["GATES", "TORCH_DAY_LOOPS", "TORCH_PARTIES_PER_PASS", "BatchedEIIERecurrent", "TorchDayLoops",
           "parties_per_pass"]

#: Gates per cell: the Elman RNN's one pre-activation, the LSTM's four (i, f, g, o).
GATES = {"rnn": 1, "lstm": 4}
#: Parties per forward/backward pass of the PyTorch day loops (the fused kernels take all parties in one
#: pass: their state per party is one contiguous block).  The PyTorch loops keep ``l`` hidden states (LSTM:
#: and gates) of every sequence of the batch for the backward pass, tens of megabytes for K = 50, which
#: no longer stay in cache, so a few parties per pass are the fastest (idle 2-core machine, K = 50,
#: closes, 1 thread, party-steps/s with 1 / 2 / 5 / 10 / 25 / 50 parties per pass — RNN 418 / 596 / 646
#: / 526 / 406 / 326, LSTM 102 / 127 / 112 / 72 / 65 / 64; ``PORTFED_NATIVE=0
#: benchmarks/bench_engine.py --networks rnn lstm --chunks 1 2 5 10 25 50``).  A CPU cache figure: on a GPU
#: every pass is a few hundred kernel launches and the memory is ample, so all parties go in one pass
#: (:func:`parties_per_pass`).
TORCH_PARTIES_PER_PASS = {"rnn": 5, "lstm": 2}


def parties_per_pass(cell: str, device: torch.device, fused: bool) -> int | None:
    """Parties per forward/backward pass (``None``: all in one): :data:`TORCH_PARTIES_PER_PASS` for the
    PyTorch day loops on the CPU; one pass for the fused kernels and on any other device.  (On an H200 the
    CPU's 5 parties per pass made the RNN step at K = 50 ten passes, 2,420 kernels, the GPU busy 9 % of it:
    ``benchmarks/bench_gpu.py``.)"""
    return TORCH_PARTIES_PER_PASS[cell] if device.type == "cpu" and not fused else None


class BatchedEIIERecurrent(BatchedEIIE):
    """The stacked-parameter recurrent EIIE of ``config`` (``config.network`` ``"rnn"`` or ``"lstm"``).

    Attributes:
        n_parameters: ``d``, the size of one party's flat parameter vector.
        input_width: ``l · F``, the width of one asset's window in :meth:`layout` (day-major).
    """

    def __init__(self, config: AgentConfig) -> None:
        if config.network not in GATES:
            raise ValueError(f"BatchedEIIERecurrent evaluates the RNN and LSTM EIIEs, got network={config.network!r}")
        template = EIIERecurrent(config.n_features, config.hidden_size, cell=config.network)
        self.cell, self.gates = config.network, GATES[config.network]
        self.n_features, self.window, self.hidden = config.n_features, config.window, config.hidden_size
        self.input_offset = config.input_offset
        self._slices, self.n_parameters = parameter_slices(
            template, lambda name: name.removeprefix("recurrent.").removesuffix("_l0"))
        self.input_width = self.window * self.n_features
        #: The recurrence's day loops from ``config.backend`` (:mod:`portfed.agents.backend`): the fused C
        #: kernels (:mod:`portfed.agents.native`), or the PyTorch operations of :class:`TorchDayLoops`.
        backend, day_loops = operations(config.trunk_backend, torch.device(config.device),
                                        lambda chosen: chosen.day_loops(self.hidden))
        self.backend: Backend = backend
        self.day_loops: DayLoops = day_loops
        self.kernels = self.day_loops if isinstance(self.day_loops, RecurrenceKernels) else None
        self.fused_step = self.kernels is not None
        self.parties_per_pass = parties_per_pass(self.cell, torch.device(config.device), self.kernels is not None)

    def layout(self, windows: torch.Tensor) -> torch.Tensor:
        """``(N, F, m, l)`` price windows → ``(N, m, l·F)`` input rows, day-major, less ``input_offset``."""
        n, f_n, m, window = windows.shape
        if (f_n, window) != (self.n_features, self.window):
            raise ValueError(f"windows of shape {tuple(windows.shape)} do not have {self.n_features} features × "
                             f"window {self.window}")
        rows = windows - self.input_offset if self.input_offset else windows
        return rows.permute(0, 2, 3, 1).reshape(n, m, window * f_n).contiguous()

    def maps(self, theta: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        """``(K, B, m, l·F)`` input rows → the ``(K, B·m, H)`` last hidden states."""
        return _Recurrence.apply(self, *self._inputs(theta, history))

    def traced_maps(self, theta: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        """:meth:`maps` as plain differentiable operations, autograd forming the backpropagation through time,
        whatever the backend (:meth:`TorchDayLoops.traced <portfed.agents.torch_backend.TorchDayLoops.traced>`,
        which ``torch.compile`` unrolls and fuses; :meth:`~portfed.agents.batched_head.BatchedEIIE.traced_maps`)."""
        return TORCH_DAY_LOOPS.traced(self.cell, *self._inputs(theta, history)).transpose(1, 2)

    def _inputs(self, theta: torch.Tensor, history: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The day loops' inputs ``x`` ``(K, F, l, R)``, ``W_ih`` ``(K, G·H, F)``, the summed biases ``(K, G·H)``
        and ``W_hh`` ``(K, G·H, H)`` from ``Θ`` and the ``(K, B, m, l·F)`` input rows."""
        k, b, m, _ = history.shape
        sl, gh = self._slices, self.gates * self.hidden
        w_ih = theta[:, sl["weight_ih"]].view(k, gh, self.n_features)
        w_hh = theta[:, sl["weight_hh"]].view(k, gh, self.hidden)
        bias = theta[:, sl["bias_ih"]] + theta[:, sl["bias_hh"]]  # (K, G·H)
        x = history.reshape(k, b * m, self.window, self.n_features).permute(0, 3, 2, 1).contiguous()  # (K, F, l, R)
        return x, w_ih, bias, w_hh

    def reward_gradient(self, theta: torch.Tensor, windows: torch.Tensor, first_rows: torch.Tensor,
                        previous: torch.Tensor, y_now: torch.Tensor, y_next: torch.Tensor, padded: torch.Tensor | None,
                        commission: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The day loops' forward pass, the head and reward with their gradient (``recurrence_head``), the
        backward pass from it — three kernel calls, no autograd
        (:meth:`~portfed.agents.batched_head.BatchedEIIE.reward_gradient`)."""
        if self.kernels is None:
            raise RuntimeError("the recurrent EIIE's step without autograd needs its C kernels (agent.backend native)")
        k, b = previous.shape[:2]
        days = (first_rows.unsqueeze(1) + torch.arange(b, device=first_rows.device)).reshape(-1)
        x, w_ih, bias, w_hh = (t.contiguous() for t in
                               self._inputs(theta, windows.index_select(0, days).view(k, b, windows.shape[1], -1)))
        h_last, saved = self.kernels.forward(self.cell, x, w_ih, bias, w_hh)
        head = self._head_columns
        weights, rewards, grad_h, grad_head = self.kernels.head(
            h_last, theta[:, head].contiguous(), previous.contiguous(), y_now.contiguous(), y_next.contiguous(),
            None if padded is None else padded.reshape(k, -1).contiguous(), commission)
        grad_bias, grad_w_ih, grad_w_hh = self.kernels.backward(self.cell, x, w_hh, saved, grad_h)
        grad, sl = torch.empty_like(theta), self._slices
        grad[:, sl["weight_ih"]] = grad_w_ih.reshape(k, -1)
        grad[:, sl["weight_hh"]] = grad_w_hh.reshape(k, -1)
        grad[:, sl["bias_ih"]] = grad_bias
        grad[:, sl["bias_hh"]] = grad_bias
        grad[:, head] = grad_head
        return weights, rewards, grad


class _Recurrence(torch.autograd.Function):
    """``h_l`` ``(K, R, H)`` of the recurrence of the module doc from the inputs ``x`` ``(K, F, l, R)``,
    ``W_ih`` ``(K, G·H, F)``, the summed biases ``(K, G·H)`` and ``W_hh`` ``(K, G·H, H)``.

    The day loops — the only sequential part — are ``net.day_loops`` (module doc), the backend's
    :class:`~portfed.agents.backend.DayLoops`: the fused C kernels or :data:`TORCH_DAY_LOOPS`.  One
    backward pass per forward pass: the kernels reuse the saved state's buffer afterwards.  No gradient is formed for the (constant) inputs."""

    @staticmethod
    def forward(ctx: Any, net: BatchedEIIERecurrent, x: torch.Tensor, w_ih: torch.Tensor, bias: torch.Tensor,
                w_hh: torch.Tensor) -> torch.Tensor:
        w_ih, bias, w_hh = w_ih.contiguous(), bias.contiguous(), w_hh.contiguous()
        h_last, saved = net.day_loops.forward(net.cell, x, w_ih, bias, w_hh, keep=any(ctx.needs_input_grad))
        ctx.save_for_backward(x, w_hh, *saved)
        ctx.net = net
        return h_last.transpose(1, 2)

    @staticmethod
    def backward(ctx: Any, grad_h: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        net = ctx.net
        if getattr(ctx, "consumed", False):  # the fused kernels reuse the saved state after a backward pass
            raise RuntimeError("the batched recurrent EIIE supports one backward pass per forward pass "
                               "(retain_graph=True and a second backward are not supported)")
        ctx.consumed = True
        x, w_hh, *saved = ctx.saved_tensors
        dh = grad_h.transpose(1, 2).contiguous()  # ∂h_lᵀ
        grad_bias, grad_w_ih, grad_w_hh = net.day_loops.backward(net.cell, x, w_hh, tuple(saved), dh)
        return None, None, grad_w_ih, grad_bias, grad_w_hh
