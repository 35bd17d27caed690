"""The engine's compute backends: what the batched EIIEs ask of the machine, and which implementation runs.

**The seam.**  A batched EIIE (:mod:`portfed.agents.batched_networks`, :mod:`portfed.agents.batched_recurrent`)
computes everything but its trunk's inner loops itself; those it asks of a :class:`Backend`, one small
protocol with two operation sets, each a forward pass that returns its output and the state its backward
pass reads, and that backward pass:

* :class:`DayLoops` — the recurrent EIIEs' ``l`` sequential days: ``h_l`` from the inputs and weights,
  then the weights' gradients from ``∂h_l`` (backpropagation through time);
* :class:`Convolutions` — the CNN EIIE's two convolutions and their ReLUs on the block layout
  (:class:`~portfed.agents.conv_layout.ConvolutionLayout`): the maps ``h2``, then ``∂K1, ∂b1, ∂K2, ∂b2``.

Two backends implement it:

* ``torch`` (:class:`~portfed.agents.torch_backend.TorchBackend`) — PyTorch operations: the reference, on
  the CPU and on a GPU, everywhere PyTorch runs;
* ``native`` (:class:`NativeBackend`) — the fused C kernels of ``recurrence.c`` / ``convolution.c``
  (:mod:`portfed.agents.native`), compiled on first use with ``-march=native``: the faster one on x86 CPUs
  with AVX2 or AVX-512 (their tiles are one vector register wide, 8 or 16 float32 lanes: ``vectors.h``;
  ``docs/backends.md``, ``benchmarks/bench_engine.py --backends``) and the only one with the direct
  learner's *fused step* (the whole step in one call, :mod:`portfed.agents.batched_head`).

The two agree to float32 round-off, not bit for bit (they sum in different orders); each is
deterministic on its own: the same config, seed and backend give the same numbers.

**The choice** — ``agent.backend`` (:attr:`~portfed.agents.config.AgentConfig.backend`):

* ``auto`` (the default): ``native`` on a CPU with AVX2 or AVX-512 (:func:`kernels_pay_off`) when the kernels
  build; when they cannot (no C compiler, a refused kernel cache), a warning naming the compiler's error,
  once, and ``torch``; ``torch`` on any other CPU (ARM, POWER, x86 without AVX2: the kernels were not
  measured there; logged once) and on any other device;
* ``torch``: the PyTorch operations, never a compiler;
* ``native``: the kernels, or :class:`~portfed.agents.native.NativeBuildError` when they cannot be built
  (refused on a non-CPU device by the config).

The environment variable ``PORTFED_NATIVE`` (:data:`OVERRIDE`, the switch before the config key) overrides
it: ``0`` means ``torch`` and ``1`` ``native`` whatever the config says, ``auto`` or unset leaves the
config's choice (:func:`requested_backend`).  CI runs the torch path with ``PORTFED_NATIVE=0`` and the
compiler hidden (``CC=no-such-cc``, the compiler :mod:`portfed.agents.native` calls being ``$CC``, else
``cc``).  On a non-CPU device the backend is ``torch`` whatever the override says (the kernels are CPU code).

**Records.**  Every in-process run logs the backend it resolved to and writes it into its algorithm's
``run.json`` (``backend``) (:mod:`portfed.experiment.runs.federated`, :mod:`portfed.experiment.runs.single_party`).
The run's fingerprint holds ``agent.backend`` only where the config sets it to another value than ``auto``
(``auto`` is left out of the stored config), so every config written before the key existed keeps its
fingerprint and its stored, resumable runs; what ``auto`` resolved to is in ``run.json``, not the
fingerprint, as ``agent.device: auto`` is (a resumed run that resolves differently logs a warning).
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
from collections.abc import Callable
from typing import Protocol, TypeVar

import torch

from portfed.agents.config import BACKENDS
from portfed.agents.conv_layout import ConvolutionLayout
from portfed.agents.native import (
    ConvolutionKernels,
    NativeBuildError,
    RecurrenceKernels,
    convolution_kernels,
    recurrence_kernels,
)
from portfed.agents.torch_backend import TORCH_BACKEND

logger = logging.getLogger(__name__)

#: PyTorch's CPU capabilities (:func:`torch.backends.cpu.get_cpu_capability`) on which ``auto`` picks the C kernels:
#: those where they were measured faster than the PyTorch operations (``docs/backends.md``).
KERNEL_CAPABILITIES = frozenset({"AVX512", "AVX2"})

#: The environment variable that overrides ``agent.backend`` (module doc).
OVERRIDE = "PORTFED_NATIVE"
#: Its values: ``0`` → torch, ``1`` → native, ``auto`` → the config's choice.
OVERRIDES = {"0": "torch", "1": "native", "auto": None}

_Ops = TypeVar("_Ops")


class DayLoops(Protocol):
    """The recurrent EIIEs' day loops (maths: :mod:`portfed.agents.batched_recurrent`)."""

    def forward(self, cell: str, x: torch.Tensor, w_ih: torch.Tensor, bias: torch.Tensor, w_hh: torch.Tensor,
                keep: bool = True) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """``h_l`` ``(K, H, R)`` and the saved state from ``x`` ``(K, F, l, R)``, ``W_ih`` ``(K, G·H, F)``, the
        summed biases ``(K, G·H)`` and ``W_hh`` ``(K, G·H, H)``; ``keep=False``: no backward pass follows."""
        ...

    def backward(self, cell: str, x: torch.Tensor, w_hh: torch.Tensor, saved: tuple[torch.Tensor, ...],
                 grad_h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The gradients of the summed biases, ``W_ih`` and ``W_hh`` from ``∂h_l`` ``(K, H, R)``."""
        ...


class Convolutions(Protocol):
    """The CNN EIIE's trunk on its block layout (maths: :mod:`portfed.agents.batched_networks`)."""

    def forward(self, rows: torch.Tensor, kernel1: torch.Tensor, bias1: torch.Tensor, kernel2: torch.Tensor,
                bias2: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """The maps ``h2`` ``(K, R, D)`` and the saved state from the ``(K, R, input_width)`` rows and the flat
        weights ``K1`` ``(K, C·F·3)``, ``b1`` ``(K, C)``, ``K2`` ``(K, D·C·W)``, ``b2`` ``(K, D)``."""
        ...

    def backward(self, saved: tuple[torch.Tensor, ...], grad_maps: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``∂K1, ∂b1, ∂K2, ∂b2`` (the flat weights' shapes) from the saved state and ``∂h2`` ``(K, R, D)``."""
        ...


class Backend(Protocol):
    """A set of the operations above: ``name`` is what runs record (``torch`` or ``native``)."""

    name: str

    def day_loops(self, hidden: int) -> DayLoops:
        """The day loops of hidden size ``hidden``."""
        ...

    def convolutions(self, layout: ConvolutionLayout) -> Convolutions:
        """The CNN trunk on ``layout``."""
        ...


class NativeBackend:
    """The fused C kernels (:mod:`portfed.agents.native`): each operation set raises
    :class:`~portfed.agents.native.NativeBuildError` when its library cannot be built."""

    name = "native"

    def day_loops(self, hidden: int) -> RecurrenceKernels:
        return recurrence_kernels(hidden)

    def convolutions(self, layout: ConvolutionLayout) -> ConvolutionKernels:
        return convolution_kernels(layout)


#: The C kernels' backend (stateless: the libraries are cached by :mod:`portfed.agents.native`).
NATIVE_BACKEND = NativeBackend()


def requested_backend(configured: str) -> str:
    """``configured`` (an ``agent.backend``) with :data:`OVERRIDE` applied (module doc).

    Raises:
        ValueError: ``PORTFED_NATIVE`` is not one of ``0``, ``1``, ``auto``.
    """
    value = os.environ.get(OVERRIDE, "auto").strip().lower()
    if value not in OVERRIDES:
        raise ValueError(f"{OVERRIDE} must be one of {', '.join(OVERRIDES)}, got {value!r}")
    if configured not in BACKENDS:
        raise ValueError(f"agent.backend must be one of {BACKENDS}, got {configured!r}")
    return OVERRIDES[value] or configured


def operations(configured: str, device: torch.device,
               build: Callable[[Backend], _Ops]) -> tuple[Backend, _Ops]:
    """The backend that runs on ``device`` for ``configured`` (``agent.backend``, module doc) and the operation
    set ``build(backend)`` it gives, e.g. ``lambda b: b.day_loops(20)``.

    Raises:
        NativeBuildError: ``native`` requested (or ``PORTFED_NATIVE=1``) and the kernels cannot be built.
    """
    chosen = requested_backend(configured)
    if chosen == "torch" or device.type != "cpu":
        return TORCH_BACKEND, build(TORCH_BACKEND)
    if chosen == "auto" and not kernels_pay_off():
        _note_once(torch.backends.cpu.get_cpu_capability())
        return TORCH_BACKEND, build(TORCH_BACKEND)
    try:
        return NATIVE_BACKEND, build(NATIVE_BACKEND)
    except NativeBuildError as error:
        if chosen == "native":
            why = f"{OVERRIDE}=1" if requested_backend("auto") == "native" else "agent.backend native"
            raise NativeBuildError(f"{why}: the C kernels cannot be built ({error}); set agent.backend to torch "
                                   "or auto, or install a C compiler") from error
        _warn_once(str(error))
        return TORCH_BACKEND, build(TORCH_BACKEND)


def kernels_pay_off() -> bool:
    """Whether ``auto`` picks the C kernels on this CPU: PyTorch reports one of :data:`KERNEL_CAPABILITIES` (module
    doc; ``agent.backend: native`` runs them anywhere they build)."""
    return torch.backends.cpu.get_cpu_capability() in KERNEL_CAPABILITIES


@functools.cache
def _note_once(capability: str) -> None:
    logger.info("agent.backend auto: torch, because this CPU's vectors are %s, neither AVX2 nor AVX-512, where "
                "the C kernels were measured faster than PyTorch's operations (docs/backends.md); "
                "agent.backend: native runs them anyway", capability)


@functools.cache
def _warn_once(message: str) -> None:
    warnings.warn(f"portfed's fused C kernels are not available ({message}); the EIIEs train with PyTorch "
                  "operations instead (same results to float32 round-off, slower). Set agent.backend: torch "
                  "(or PORTFED_NATIVE=0) to silence this, or install a C compiler.", RuntimeWarning, stacklevel=4)
