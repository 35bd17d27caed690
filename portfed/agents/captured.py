"""The captured local step: K parties' whole training step recorded once and replayed (``agent.capture``).

On a GPU the engine's PyTorch step (:class:`~portfed.agents.batched_step.LocalStep`) is bound by launching
kernels, not by arithmetic: measured on an H200, the CNN EIIE at K = 50 launched 130 kernels a step with
the GPU busy 6 % of it, the RNN EIIE 2,420 (``docs/reports/performance.md``).  :class:`CapturedStep` runs
the same step — the batch gathered from the stacks, the EIIE, the loss ``L_k`` of
:func:`~portfed.agents.objective.dpg_loss`, its gradient, Adam (:func:`~portfed.agents.adam.adam_update`),
the Fed+ mix ``θ ← κ_k θ + (1 − κ_k) z_k`` (paper 003 eq. 14) and the PVM write — as a recorded program:

* ``compile``: ``torch.compile`` of two functions, the forward pass with the loss (whose backward pass
  AOTAutograd compiles with it) and the update; the day loops of the recurrent EIIEs are unrolled and
  fused by the compiler (:meth:`~portfed.agents.batched_head.BatchedEIIE.traced_maps`).  On CUDA with
  ``mode="reduce-overhead"``: each compiled graph is replayed as a CUDA graph.  On the CPU inductor
  generates C++ (the test of equality with the eager step runs there).
* ``cuda_graph``: the whole step, forward to PVM write, recorded in one ``torch.cuda.CUDAGraph`` and
  replayed — one launch a step.  The first :data:`WARMUP_STEPS` steps of every new shape run eagerly on a
  side stream (real steps, kept: PyTorch's recipe for capturing autograd and cuBLAS), then it records.

A recorded step reads and writes fixed memory, so both modes run on static buffers (:class:`StaticBuffers`):
before each step the active parties' rows, Adam moments and the step's table rows are copied in, after it
the rows and moments copied out (a few device-to-device copies, no host transfer); the call's Fed+ targets,
proximal centres and padding masks are copied once per call.  One recording per shape: the number of
active parties and which of mix / proximal term / padding the call has; when
:meth:`~portfed.agents.stacks.PartyStacks.set_panel` or a loaded checkpoint replaces the stacks' tensors, the
recordings are dropped and made anew.

Scope (decided, ``docs/reports/performance.md``): the direct learner without trading limits
(:meth:`AgentConfig._check_capture` refuses the rest); steps in which only some of a call's parties are
still training (a straggler's shorter call) run the eager step, as every step does with ``capture: none``.
All parties go in one pass; the captured step never uses the C kernels of :mod:`portfed.agents.native`:
a capture runs on ``agent.backend`` ``torch`` (``auto`` resolves to it, ``native`` is refused by the config,
and ``PORTFED_NATIVE=1``, which forces the kernels, is refused here), so that the steps it leaves eager are
the PyTorch step it records.

Numbers: the same operations as the eager PyTorch step, summed in the compiler's order, so parameters and
step records agree with ``capture: none`` to float32 round-off (``tests/test_captured.py``), not bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from portfed.agents.adam import adam_update
from portfed.agents.batched_head import BatchedEIIE
from portfed.agents.batched_step import ActiveParties
from portfed.agents.config import AgentConfig
from portfed.agents.objective import dpg_loss, fedplus_mix
from portfed.agents.stacks import PartyStacks

#: Eager steps of every new shape before ``cuda_graph`` records it (PyTorch's whole-network capture recipe).
WARMUP_STEPS = 3

#: Compilations of each step function per process before ``compile`` fails (with ``fullgraph=True`` Dynamo
#: then raises rather than running the step eagerly).  A new shape recompiles once, after which Dynamo
#: treats the sizes that changed (parties, days in the stacks) as dynamic; the variants with and without a
#: mix, a proximal term, padding are a few more.
RECOMPILE_LIMIT = 64

Pair = tuple[torch.Tensor, torch.Tensor]


@dataclass
class StaticBuffers:
    """The fixed memory a recorded step reads and writes: the active parties' rows ``θ`` and Adam moments
    ``(K, d)``, this step's stack rows ``(K,)`` and bias corrections ``(K, 1)``, and the call's padding mask,
    Fed+ mix ``(z, κ, 1 − κ)`` and proximal term ``(c, ρ)`` (``None`` when the call has none)."""

    theta: torch.Tensor
    exp_avg: torch.Tensor
    exp_avg_sq: torch.Tensor
    window_rows: torch.Tensor
    pvm_rows: torch.Tensor
    step_size: torch.Tensor
    bias2_sqrt: torch.Tensor
    padded: torch.Tensor | None
    mix: tuple[torch.Tensor, ...] | None
    prox: Pair | None
    #: The caller's per-call tensors last copied in (by identity: copied again only when they change).
    sources: dict[str, Any] = field(default_factory=dict)
    #: Steps run on these buffers so far (``cuda_graph`` records after :data:`WARMUP_STEPS`).
    steps: int = 0
    graph: Any = None
    output: torch.Tensor | None = None

    @classmethod
    def like(cls, active: ActiveParties) -> StaticBuffers:
        window_rows, pvm_rows, (step_size, bias2_sqrt), _ = active.tables.at(0)

        def empty(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else torch.empty_like(t)

        return cls(*(empty(t) for t in (active.theta, active.adam.exp_avg, active.adam.exp_avg_sq, window_rows,
                                        pvm_rows, step_size, bias2_sqrt, active.tables.padded)),  # type: ignore[arg-type]
                   None if active.mix is None else tuple(torch.empty_like(t) for t in active.mix),
                   None if active.prox is None else (torch.empty_like(active.prox[0]), torch.empty_like(active.prox[1])))

    def tensors(self) -> list[torch.Tensor]:
        optional = [self.padded, *(self.mix or ()), *(self.prox or ())]
        return [self.theta, self.exp_avg, self.exp_avg_sq, self.window_rows, self.pvm_rows, self.step_size,
                self.bias2_sqrt, *(t for t in optional if t is not None)]

    def load(self, active: ActiveParties, j: int) -> None:
        """Copy in step ``j``'s inputs: the rows and moments, the table rows, the call's tensors when new."""
        window_rows, pvm_rows, (step_size, bias2_sqrt), _ = active.tables.at(j)
        pairs = [(self.theta, active.theta), (self.exp_avg, active.adam.exp_avg),
                 (self.exp_avg_sq, active.adam.exp_avg_sq), (self.window_rows, window_rows),
                 (self.pvm_rows, pvm_rows), (self.step_size, step_size), (self.bias2_sqrt, bias2_sqrt)]
        for name, static, given in (("padded", self.padded, active.tables.padded), ("mix", self.mix, active.mix),
                                    ("prox", self.prox, active.prox)):
            if given is not None and self.sources.get(name) is not given:
                self.sources[name] = given  # held, so that an identity is never reused by another object
                pairs += [(static, given)] if isinstance(given, torch.Tensor) else list(zip(static, given, strict=True))  # type: ignore[arg-type]
        for static, given in pairs:
            static.copy_(given)

    def store(self, active: ActiveParties) -> None:
        """Copy the stepped rows and moments out to the caller's state, and advance its Adam clocks."""
        active.theta.copy_(self.theta)
        active.adam.exp_avg.copy_(self.exp_avg)
        active.adam.exp_avg_sq.copy_(self.exp_avg_sq)
        active.adam.steps += 1


class CapturedStep:
    """Local iteration ``j`` of a call's active parties, captured (module doc); :meth:`run` has
    :meth:`LocalStep.run <portfed.agents.batched_step.LocalStep.run>`'s contract.

    Args:
        config: the agent hyper-parameters (``config.capture`` ``compile`` or ``cuda_graph``).
        net: the engine's batched EIIE; ``stacks``: its parties' market data and PVMs.
        offsets: ``0 … B − 1`` on the device.
    """

    def __init__(self, config: AgentConfig, net: BatchedEIIE, stacks: PartyStacks, offsets: torch.Tensor) -> None:
        if config.capture not in ("compile", "cuda_graph"):
            raise ValueError(f"CapturedStep runs capture 'compile' or 'cuda_graph', got {config.capture!r}")
        if net.backend.name != "torch":
            raise ValueError(f"agent.capture {config.capture!r} records the PyTorch step, but the network runs on "
                             f"backend {net.backend.name!r} (PORTFED_NATIVE=1 forces the C kernels); unset "
                             "PORTFED_NATIVE or set capture: none")
        self.config, self.net, self.stacks, self._offsets = config, net, stacks, offsets
        self.mode, self.device = config.capture, torch.device(config.device)
        self._buffers: dict[tuple[Any, ...], StaticBuffers] = {}
        self._stacks_held: tuple[Any, ...] = ()  # the addresses and shapes of the stacks' tensors the buffers serve
        self._forward: Callable[..., Any] = self.forward_loss
        self._update: Callable[..., Any] = self.update
        if self.mode == "compile":
            mode = "reduce-overhead" if self.device.type == "cuda" else None
            options: dict[str, Any] = {"mode": mode, "fullgraph": True, "recompile_limit": RECOMPILE_LIMIT}
            self._forward = torch.compile(self.forward_loss, **options)
            self._update = torch.compile(self.update, **options)

    # ------------------------------------------------------------------ the step itself (plain operations)
    def forward_loss(self, theta: torch.Tensor, window_rows: torch.Tensor, pvm_rows: torch.Tensor,
                     padded: torch.Tensor | None, prox: Pair | None) -> tuple[torch.Tensor, ...]:
        """The batch from the stacks, the portfolios ``(K, B, M + 1)`` of the EIIE on ``theta`` (a leaf that
        requires its gradient), the losses ``(K,)``, the rewards ``(K, B)`` and the PVM rows of the batch."""
        history, previous, y_now, y_next, pvm_days, _ = self.stacks.gather(window_rows, pvm_rows, None, self._offsets)
        assert history is not None  # gathered: windows=True
        weights = self.net.head(theta, self.net.traced_maps(theta, history), previous[..., 1:], padded)
        loss, rewards = dpg_loss(theta, weights, previous, y_now, y_next, self.config, prox)
        return weights, loss, rewards, pvm_days

    def update(self, theta: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
               step_size: torch.Tensor, bias2_sqrt: torch.Tensor, mix: tuple[torch.Tensor, ...] | None,
               weights: torch.Tensor, loss: torch.Tensor, rewards: torch.Tensor,
               pvm_days: torch.Tensor) -> torch.Tensor:
        """Adam, the Fed+ mix and the PVM write, in place; the step's ``(K, 4)`` records (mean r, loss, ‖g‖,
        mean cash weight), as :meth:`LocalStep.run` returns them."""
        with torch.no_grad():
            adam_update(theta, grad, exp_avg, exp_avg_sq, step_size, bias2_sqrt, betas=self.config.adam_betas,
                        eps=self.config.adam_eps)
            if mix is not None:
                fedplus_mix(theta, *mix)
            weights = weights.detach()
            self.stacks.write_pvm(pvm_days, weights)
            return torch.stack([rewards.detach().mean(dim=1), loss.detach(), torch.linalg.vector_norm(grad, dim=1),
                                weights[..., 0].mean(dim=1)], dim=1)

    def step(self, b: StaticBuffers) -> torch.Tensor:
        """One step on the static buffers: forward and loss, ``∇_θ Σ_k L_k`` (row k is ``∇ L_k``), update."""
        with torch.enable_grad():
            theta = b.theta.detach().requires_grad_(True)
            weights, loss, rewards, pvm_days = self._forward(theta, b.window_rows, b.pvm_rows, b.padded, b.prox)
            (grad,) = torch.autograd.grad(loss.sum(), theta)
        return self._update(b.theta, grad, b.exp_avg, b.exp_avg_sq, b.step_size, b.bias2_sqrt, b.mix, weights,
                            loss, rewards, pvm_days)

    # ------------------------------------------------------------------ the engine's call
    def run(self, active: ActiveParties, j: int, noise: torch.Tensor | None = None) -> torch.Tensor:
        """Local iteration ``j`` of every party in ``active``, captured; returns ``(K, 4)`` records (the
        contract of :meth:`LocalStep.run`; ``noise`` is the actor-critic's, which capture does not run)."""
        if noise is not None or active.critic is not None:
            raise ValueError("the captured step runs the direct learner only (agent.capture)")
        b = self._buffers_for(active)
        b.load(active, j)
        if self.mode == "compile":
            records = self._compiled_step(b)
        else:
            records = self._graph_step(b)
        b.store(active)
        b.steps += 1
        return records

    def _buffers_for(self, active: ActiveParties) -> StaticBuffers:
        stacks = self.stacks
        held = tuple((t.data_ptr(), tuple(t.shape)) for t in (stacks.windows, stacks.y_now, stacks.y_next, stacks.pvm))
        if held != self._stacks_held:  # set_panel or load_state_dict replaced them: the old recordings are void
            self._buffers.clear()
            self._stacks_held = held
        key = (active.parties.size, active.tables.padded is None, active.mix is None, active.prox is None)
        if key not in self._buffers:
            b = StaticBuffers.like(active)
            if self.mode == "compile" and self.device.type == "cuda":  # CUDA graphs need fixed addresses
                for t in (*b.tensors(), stacks.windows, stacks.y_now, stacks.y_next, stacks.pvm):
                    torch._dynamo.mark_static_address(t)
            self._buffers[key] = b
        return self._buffers[key]

    def _compiled_step(self, b: StaticBuffers) -> torch.Tensor:
        if self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()  # the last step's graph outputs are done with
        try:  # the first step of a shape compiles it
            return self.step(b).clone()
        except Exception as error:  # noqa: BLE001 - a compiler failure, named once, never run eagerly instead
            if b.steps:
                raise
            cause: BaseException = error
            while (inner := getattr(cause, "inner_exception", None) or cause.__cause__) is not None:
                cause = inner  # the compiler's own error, under Dynamo's wrappers
            lines = str(cause).strip().splitlines()
            raise RuntimeError(f"agent.capture 'compile' could not compile the local step on {self.device}: "
                               f"{type(cause).__name__}: {lines[0] if lines else ''}") from error

    def _graph_step(self, b: StaticBuffers) -> torch.Tensor:
        if b.graph is None and b.steps >= WARMUP_STEPS:
            b.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(b.graph):
                b.output = self.step(b)
        if b.graph is not None:
            b.graph.replay()
            assert b.output is not None
            return b.output.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            records = self.step(b)
        torch.cuda.current_stream().wait_stream(side)
        return records
