"""portfed's fused C kernels — ``recurrence.c`` (the recurrent EIIEs' day loops) and ``convolution.c``
(the CNN EIIE's two convolutions, and the direct learner's whole CNN step with the head of ``head.h``)
— compiled on first use, cached, called through ctypes.

The recurrent EIIEs' day loop (:mod:`portfed.agents.batched_recurrent`) is sequential: 30 small
products and nonlinearities per pass, forward and backward.  As PyTorch operations each of them is a
kernel over megabytes of the ``(K, units, days, R)`` buffers; ``recurrence.c`` runs all days of 16
sequences at a time with their hidden state in registers (its header has the maths and the why).  The
CNN's convolutions (:mod:`portfed.agents.batched_networks`) are thin products over 450 rows per party;
``convolution.c`` runs both layers and their backward pass 16 rows at a time in registers.  Around
the trunk, the direct learner's head, reward and their gradient were some twenty PyTorch operations and
as many autograd nodes on ``(K, B, m + 1)`` tensors, and the batch's input rows a gathered copy — half
of a CNN step (``docs/reports/performance.md``); ``cnn_step`` runs a party's whole step instead: the forward
pass on its rows where the engine stacks them, the head and the reward with their gradient written out
(``head.h``), the backward pass while the rows are still in cache.
They are plain C with no dependency (the vector helpers they share are ``vectors.h``): this module
compiles them with the machine's C compiler (``$CC``, else ``cc``; ``-O3 -march=native``, one library
per shape — hidden size, or features, window and maps — as compile-time constants), caches the
libraries under ``$PORTFED_CACHE_DIR/native`` (else ``~/.cache/portfed/native``), named by a digest of
the sources, the flags, the compiler's version and the CPU, and loads them with :mod:`ctypes` — only a
library this user owns that neither group nor others may write, from a cache directory of the same kind
(created ``0o700``; :func:`portfed._io.private_dir`); anything else is refused as a build error.  Built with
OpenMP, a kernel splits its parties over the threads of the OpenMP runtime PyTorch has loaded (one pool
for both: ``vectors.h``); without it, this module splits them over Python threads (ctypes releases the
GIL during a call).

Which backend runs — these kernels, or the PyTorch operations — is ``agent.backend`` (with the
``PORTFED_NATIVE`` override): :mod:`portfed.agents.backend`, which calls the builders here; a kernel set
that cannot be built raises :class:`NativeBuildError`.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from portfed._io import atomic_path, cache_root, check_private, private_dir
from portfed.agents.conv_layout import ConvolutionLayout

HERE = Path(__file__).parent
#: The headers the kernel sources include (part of every library's digest): the vector helpers, the EIIE head.
HEADERS = (HERE / "vectors.h", HERE / "head.h")
#: The flags tried in order: the machine's own vector instructions with OpenMP (the kernels then split their
#: parties over PyTorch's own OpenMP workers: ``vectors.h``), without it (a compiler without OpenMP, e.g.
#: Apple's clang: the parties are split over Python threads), then the compiler's default target (a
#: compiler that does not know ``-march=native``, e.g. some ARM toolchains).
FLAG_SETS = (("-O3", "-march=native", "-fopenmp"), ("-O3", "-march=native"), ("-O3",))
#: Linked after the source: the C maths library (the head's exp and log, ``head.h``), so that a library does
#: not rely on the loading process to have it.
LIBRARIES = ("-lm",)

_POINTER = ctypes.c_void_p
_INT = ctypes.c_int
#: Each source's entry points: argument types and result type.  The recurrence: (threads, k0, k1, cell, l,
#: R, F, tensors…) with cell 0 (Elman) or 1 (LSTM); the convolutions: (threads, k0, k1, R, width,
#: tensors…), their whole step (threads, k0, k1, B, M, width, commission, tensors…); the backward passes and
#: the step return 0, or −1 when their scratch could not be allocated.
_SIGNATURES = {
    "recurrence.c": {
        "recurrence_forward": ([_INT] * 7 + [_POINTER] * 6, None),
        "recurrence_backward": ([_INT] * 7 + [_POINTER] * 7, _INT),
        "recurrence_head": ([_INT] * 5 + [ctypes.c_double] + [_POINTER] * 10, None),
        "tile_width": ([], _INT),
        "openmp": ([], _INT),
    },
    "convolution.c": {
        "cnn_forward": ([_INT] * 5 + [_POINTER] * 7, None),
        "cnn_backward": ([_INT] * 5 + [_POINTER] * 11, _INT),
        "cnn_step": ([_INT] * 6 + [ctypes.c_double] + [_POINTER] * 19, _INT),
        "openmp": ([], _INT),
    },
}
#: The recurrence kernels' cells, in the order of their ``cell`` argument.
CELLS = ("rnn", "lstm")
#: Vectors per saved record of a tile-day, in units of H: Elman h_j; LSTM its gates i f g o.
RECORD = {"rnn": 1, "lstm": 4}
#: The records' alignment in bytes: the forward passes write them with 64-byte vector stores that bypass the cache.
ALIGNMENT = 64



class NativeBuildError(RuntimeError):
    """A kernel source could not be compiled or loaded (the message holds the compiler's output)."""


def recurrence_kernels(hidden: int) -> RecurrenceKernels:
    """The recurrence kernels for hidden size ``hidden``.

    Raises:
        NativeBuildError: they cannot be built (no C compiler, a refused cache: module doc).
    """
    return RecurrenceKernels(_library("recurrence.c", (("HIDDEN", hidden),)))


def convolution_kernels(layout: ConvolutionLayout) -> ConvolutionKernels:
    """The CNN trunk's kernels for ``layout``'s shape, reading its rows through ``layout.window_columns``.

    Raises:
        NativeBuildError: they cannot be built (as :func:`recurrence_kernels`).
    """
    shape = (("FEATURES", layout.n_features), ("WINDOW", layout.window), ("CONV_MAPS", layout.conv_maps),
             ("DENSE_MAPS", layout.dense_maps))
    return ConvolutionKernels(_library("convolution.c", shape), layout.window_columns)


@functools.cache
def _library(source: str, defines: tuple[tuple[str, int], ...]) -> ctypes.CDLL:
    """Compile (or find in the cache) and load ``source`` (a file of this package) with ``defines``."""
    compiler = os.environ.get("CC", "cc")
    if shutil.which(compiler) is None:
        raise NativeBuildError(f"no C compiler {compiler!r} on PATH")
    version = _run([compiler, "--version"]).splitlines()[0]
    path_of_source, errors = HERE / source, []
    texts = [path_of_source.read_text(), *(header.read_text() for header in HEADERS)]
    name = "-".join([Path(source).stem, *(f"{key.lower()}{value}" for key, value in defines)])
    try:
        directory = private_dir(cache_root() / "native", "kernel cache directory")
    except OSError as error:  # UnsafeCacheError included: never load from a directory another user can write
        raise NativeBuildError(str(error)) from error
    for flags in FLAG_SETS:
        options = [*flags, "-fPIC", "-shared", *(f"-D{key}={value}" for key, value in defines)]
        command = [compiler, *options, f"-I{HERE}"]  # the include path is where the package lies: not in the digest
        digest = hashlib.sha256("\0".join([*texts, compiler, *options, *LIBRARIES, version, _cpu()]).encode()).hexdigest()[:16]
        path = directory / f"{name}-{digest}.so"
        if not path.exists():
            try:
                with atomic_path(path) as tmp:
                    _run([*command, "-o", str(tmp), str(path_of_source), *LIBRARIES])
                    tmp.chmod(0o700)  # the linker writes a file of its own mode
            except NativeBuildError as error:
                errors.append(str(error))
                continue
        try:
            check_private(path, "kernel library")
        except OSError as error:  # a library planted by another user, or one others may rewrite: not loaded
            raise NativeBuildError(str(error)) from error
        try:
            library = ctypes.CDLL(str(path))
        except OSError as error:
            errors.append(f"{path}: {error}")
            continue
        for function_name, (argtypes, restype) in _SIGNATURES[source].items():
            function = getattr(library, function_name)
            function.argtypes, function.restype = argtypes, restype
        return library
    raise NativeBuildError("; ".join(errors))


def _run(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise NativeBuildError(f"{' '.join(command)}: {error}") from error
    if done.returncode != 0:
        raise NativeBuildError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def _cpu() -> str:
    """What ``-march=native`` depends on: the CPU's model and feature flags (Linux), else the platform."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() + platform.machine()
    return "\n".join(sorted({line for line in lines if line.startswith(("model name", "flags", "Features"))}))


class NativeKernels:
    """A loaded kernel library on the engine's tensors (CPU, contiguous), its parties split over threads."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._library = library
        #: The entry points split their parties over OpenMP threads themselves (else: over Python threads here).
        self.openmp = bool(library.openmp())
        #: Threads the parties are split over; ``None``: ``torch.get_num_threads()``.
        self.threads: int | None = None

    def _call(self, name: str, k: int, sizes: tuple[int | float, ...], *tensors: torch.Tensor | None) -> None:
        """``name(threads, k0, k1, *sizes, *tensors)`` on the ``k`` parties (float32 tensors, int32 index
        tables, bool masks; ``None``: a null pointer): one call on OpenMP threads, or each range of parties
        on a Python thread of its own."""
        for tensor in tensors:
            if tensor is not None and (tensor.dtype not in (torch.float32, torch.int32, torch.bool)
                                       or tensor.device.type != "cpu" or not tensor.is_contiguous()):
                raise ValueError(f"{name}: tensors must be contiguous float32 (int32 index tables, bool masks) on the "
                                 f"CPU, got {tensor.dtype} {tensor.device} contiguous={tensor.is_contiguous()}")
        function = getattr(self._library, name)
        pointers = [None if t is None else t.data_ptr() for t in tensors]
        threads = min(self.threads or torch.get_num_threads(), k)
        if threads <= 1 or self.openmp:
            results = [function(threads, 0, k, *sizes, *pointers)]
        else:
            bounds = [k * i // threads for i in range(threads + 1)]
            pool = _pool(os.getpid(), threads)
            results = [future.result() for future in [pool.submit(function, 1, lo, hi, *sizes, *pointers)
                                                      for lo, hi in zip(bounds, bounds[1:], strict=False)]]
        if any(result not in (None, 0) for result in results):
            raise MemoryError(f"{name}: could not allocate its scratch memory")


class RecurrenceKernels(NativeKernels):
    """The entry points of ``recurrence.c``.  The forward pass saves its state tile-major
    (``(K, tiles, l, S, lanes)``, the C header), which only the backward pass reads; the backward pass
    then keeps the buffer for the next forward pass of the same shape (a fresh buffer of tens of
    megabytes costs its page faults: a quarter of the Elman forward pass, measured), so a graph's
    backward pass runs once."""

    def __init__(self, library: ctypes.CDLL) -> None:
        super().__init__(library)
        #: Float32 lanes per register tile: 16 where the library targets AVX-512, else 8 (``vectors.h``).
        self.lanes = int(library.tile_width())
        self._spare: dict[tuple[int, ...], list[torch.Tensor]] = {}

    def forward(self, cell: str, x: torch.Tensor, w_ih: torch.Tensor, bias: torch.Tensor,
                w_hh: torch.Tensor, keep: bool = True) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """``h_l`` ``(K, H, R)`` and the saved state, from ``x`` ``(K, F, l, R)``, ``W_ih`` ``(K, G·H, F)``,
        the summed biases ``(K, G·H)`` and ``W_hh`` ``(K, G·H, H)``; ``keep=False`` (no backward pass will
        follow, e.g. a target network's pass) hands the state's buffer straight back and saves nothing."""
        k, _, days, sequences = x.shape
        hidden = w_hh.shape[2]
        tiles = -(-sequences // self.lanes)
        shape = (k, tiles, days, RECORD[cell] * hidden, self.lanes)
        spare = self._spare.get(shape)
        states = spare.pop() if spare else x.new_empty(shape)
        if states.data_ptr() % ALIGNMENT:
            raise RuntimeError(f"recurrence_forward ({cell}): the state buffer at {states.data_ptr():#x} is not "
                               f"{ALIGNMENT}-byte aligned")
        h_last = x.new_empty(k, hidden, sequences)
        self._call("recurrence_forward", k, _sizes(cell, x), x, w_ih, bias, w_hh, states, h_last)
        if not keep:
            self._spare.setdefault(shape, []).append(states)
            return h_last, ()
        return h_last, (states,)

    def backward(self, cell: str, x: torch.Tensor, w_hh: torch.Tensor, saved: tuple[torch.Tensor, ...],
                 grad_h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The gradients of the summed biases, ``W_ih`` and ``W_hh`` from ``∂h_l`` ``(K, H, R)``."""
        k, features = x.shape[:2]
        rows, hidden = w_hh.shape[1:]
        grads = (x.new_empty(k, rows), x.new_empty(k, rows, features), x.new_empty(k, rows, hidden))
        self._call("recurrence_backward", k, _sizes(cell, x), x, w_hh, *saved, grad_h, *grads)
        self._spare.setdefault(tuple(saved[0].shape), []).append(saved[0])
        return grads


    def head(self, h_last: torch.Tensor, head: torch.Tensor, previous: torch.Tensor, y_now: torch.Tensor,
             y_next: torch.Tensor, padded: torch.Tensor | None, commission: float
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The direct learner's head and reward on the last states ``h_last`` ``(K, H, R)`` (``recurrence_head``,
        ``head.h``): the portfolios ``(K, B, M + 1)``, the rewards ``(K, B)``, and the gradients of
        ``−(1/B) Σ_t r_t`` with respect to ``h_last`` (the backward pass's ``∂h_l``) and to the head's
        parameters ``(K, H + 3)``; ``previous``, ``y_now``, ``y_next`` ``(K, B, M + 1)``, ``padded`` ``(K, M)``
        or ``None``."""
        k, b, width = previous.shape
        weights, rewards = previous.new_empty(k, b, width), previous.new_empty(k, b)
        grad_h, grad_head = torch.empty_like(h_last), torch.empty_like(head)
        self._call("recurrence_head", k, (b, width - 1, float(commission)), h_last, head, previous, y_now, y_next,
                   padded, weights, rewards, grad_h, grad_head)
        return weights, rewards, grad_h, grad_head


def _sizes(cell: str, x: torch.Tensor) -> tuple[int, int, int, int]:
    """The recurrence's ``(cell, l, R, F)`` from the cell's name and its inputs ``x`` ``(K, F, l, R)``."""
    _, features, days, sequences = x.shape
    return CELLS.index(cell), days, sequences, features


class ConvolutionKernels(NativeKernels):
    """The entry points of ``convolution.c``: the CNN EIIE's two convolutions and their ReLUs on the
    engine's input rows ``(K, R, width)``, whose column ``columns[f·l + j]`` holds feature f on day j, as
    two passes (:meth:`forward`, :meth:`backward`: the backend protocol's
    :class:`~portfed.agents.backend.Convolutions`) or as the direct learner's whole step (:meth:`step`)."""

    def __init__(self, library: ctypes.CDLL, columns: torch.Tensor) -> None:
        super().__init__(library)
        #: ``(F·l,)`` int32: the layout column of each (feature, day) (:class:`ConvolutionLayout`).
        self.columns = columns

    def forward(self, rows: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                b2: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """The maps ``h2`` ``(K, R, D)`` and the state :meth:`backward` reads, from the rows and the flat weights
        ``(K, C·F·3)``, ``(K, C)``, ``(K, D·C·W)``, ``(K, D)``."""
        rows = rows.contiguous()
        w1, b1, w2, b2 = (w.contiguous() for w in (w1, b1, w2, b2))
        k, r, width = rows.shape
        out = rows.new_empty(k, r, b2.shape[1])
        self._call("cnn_forward", k, (r, width), rows, self.columns, w1, b1, w2, b2, out)
        return out, (rows, w1, b1, w2, out)

    def step(self, windows: torch.Tensor, first_rows: torch.Tensor, batch: int,
             weights: tuple[torch.Tensor, ...], head: torch.Tensor, previous: torch.Tensor, y_now: torch.Tensor,
             y_next: torch.Tensor, padded: torch.Tensor | None, commission: float
             ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        """The direct learner's step (``cnn_step``): the portfolios ``(K, B, M + 1)``, the rewards ``(K, B)`` and
        the gradients of ``−(1/B) Σ_t r_t`` — ``∂K1, ∂b1, ∂K2, ∂b2`` and the head's ``(K, D + 3)`` — from the
        stacked input rows ``windows`` ``(days, M, width)``, each party's first batch row ``first_rows``
        ``(K,)`` int32 (its ``batch`` days are consecutive rows), the flat weights ``K1, b1, K2, b2``, the head's
        parameters ``(K, D + 3)``, ``w_{t−1}``, ``y_t``, ``y_{t+1}`` ``(K, B, M + 1)`` and the ``(K, M)``
        padding mask (or ``None``)."""
        k, _, width = previous.shape
        m = width - 1
        if windows.shape[1] != m or first_rows.dtype != torch.int32:
            # The rows are the engine's own (PartyStacks.start_rows, within each party's days): not read back
            # here, which would move data to the host every step.
            raise ValueError(f"cnn_step: windows {tuple(windows.shape)} do not hold {m} assets, or first rows of "
                             f"{first_rows.dtype} are not int32")
        portfolios, rewards = previous.new_empty(k, batch, width), previous.new_empty(k, batch)
        grads = (*(torch.empty_like(w) for w in weights), torch.empty_like(head))
        self._call("cnn_step", k, (batch, m, windows.shape[2], float(commission)), windows, first_rows,
                   self.columns, *weights, head, previous, y_now, y_next, padded, portfolios, rewards, *grads)
        return portfolios, rewards, grads

    def backward(self, saved: tuple[torch.Tensor, ...], grad: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``∂K1, ∂b1, ∂K2, ∂b2`` (the weights' shapes) from :meth:`forward`'s saved state and the maps'
        gradient ``grad`` ``(K, R, D)``."""
        rows, w1, b1, w2, maps = saved
        k, r, width = rows.shape
        grads = (torch.empty_like(w1), torch.empty_like(b1), torch.empty_like(w2), rows.new_empty(k, maps.shape[2]))
        self._call("cnn_backward", k, (r, width), rows, self.columns, w1, b1, w2, maps, grad.contiguous(), *grads)
        return grads


@functools.cache
def _pool(pid: int, threads: int) -> ThreadPoolExecutor:
    """A pool per process (``pid``: a forked sweep worker inherits the parent's pool object, not its threads)."""
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="portfed-kernels")
