"""The fused C kernels (portfed/agents/recurrence.c and convolution.c, loaded by portfed.agents.native)
against the PyTorch operations they replace, and how they are built, cached and chosen (``agent.backend``,
``PORTFED_NATIVE``: portfed.agents.backend).  Tests that run the kernels are marked ``native`` and skip where
they cannot run (tests/conftest.py); the others hold on either backend."""

from __future__ import annotations

import importlib.util
import platform
import re
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from portfed.agents import AgentConfig, build_network, flat_parameters, native
from portfed.agents import backend as backends
from portfed.agents.batched_head import BatchedEIIE, parameter_slices
from portfed.agents.batched_networks import BatchedEIIECNN
from portfed.agents.batched_recurrent import TORCH_DAY_LOOPS, BatchedEIIERecurrent
from portfed.agents.native import ConvolutionKernels, NativeBuildError, RecurrenceKernels, recurrence_kernels
from portfed.agents.objective import log_returns
from portfed.agents.torch_backend import TorchConvolutions

ROOT = Path(__file__).parents[1]


def _forward_backward(net: BatchedEIIE, theta: torch.Tensor, history: torch.Tensor,
                      previous: torch.Tensor, probe: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    theta = theta.clone().requires_grad_(True)
    weights = net(theta, torch.stack([net.layout(h) for h in history]), previous[..., 1:])
    (weights * probe).sum().backward()
    return weights.detach(), theta.grad


def _kernels_equal_torch(fused: BatchedEIIE, reference: BatchedEIIE, config: AgentConfig, threads: int,
                         seed: int) -> torch.Tensor:
    """Portfolios and gradients of K = 3 parties, B = 5 days × m = 7 assets (R = 35 rows: full tiles and a partial
    one, at 16 lanes (AVX-512) and at 8), ``fused`` on ``threads`` threads against ``reference``: equal to float32
    round-off; returns the gradient."""
    generator = torch.Generator().manual_seed(seed)
    k, b, m = 3, 5, 7
    theta = torch.tensor(np.stack([flat_parameters(build_network(config, s)) for s in range(k)]), dtype=torch.float32)
    history = 1 + 0.05 * torch.randn(k, b, config.n_features, m, config.window, generator=generator)
    previous = torch.softmax(torch.randn(k, b, m + 1, generator=generator), -1)
    probe = torch.randn(k, b, m + 1, generator=generator)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = _forward_backward(fused, theta, history, previous, probe)
    finally:
        torch.set_num_threads(before)
    want = _forward_backward(reference, theta, history, previous, probe)
    torch.testing.assert_close(got[0], want[0], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got[1], want[1], atol=2e-6, rtol=1e-4)
    return got[1]


#: (threads, split over OpenMP threads): one thread; two OpenMP threads; two Python threads (a library without OpenMP)
SPLITS = [(1, True), (2, True), (2, False)]


def torch_twin(config: AgentConfig) -> AgentConfig:
    """``config`` on the torch backend: the reference the kernels are compared with."""
    return replace(config, backend="torch")


@pytest.mark.native
@pytest.mark.parametrize(("threads", "openmp"), SPLITS)
@pytest.mark.parametrize("hidden", [6, 20])
@pytest.mark.parametrize("features", [("close",), ("close", "high", "low")])
@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_fused_kernels_equal_the_torch_day_loops(cell: str, features: tuple, hidden: int, threads: int,
                                                 openmp: bool) -> None:
    config = AgentConfig(network=cell, window=9, features=features, hidden_size=hidden, input_scale="raw",
                         backend="native")
    fused, reference = BatchedEIIERecurrent(config), BatchedEIIERecurrent(torch_twin(config))
    assert isinstance(fused.day_loops, RecurrenceKernels) and reference.day_loops is TORCH_DAY_LOOPS
    fused.day_loops.openmp = openmp
    gradient = _kernels_equal_torch(fused, reference, config, threads, seed=1)
    assert gradient.abs().sum() > 0


@pytest.mark.parametrize(("threads", "openmp"), SPLITS)
@pytest.mark.parametrize(("features", "window", "conv_maps", "dense_maps"), [
    (("close",), 9, 2, 20),                 # W = 7: h1 shorter than one block of g1
    (("close", "high", "low"), 30, 2, 20),  # the paper's shapes: W = 28, two blocks of the layout
    (("close", "high"), 12, 3, 7),          # D and C·W not multiples of the register blocks
])
@pytest.mark.native
def test_fused_convolutions_equal_the_torch_trunk(features: tuple, window: int, conv_maps: int, dense_maps: int,
                                                  threads: int, openmp: bool) -> None:
    config = AgentConfig(window=window, features=features, conv_maps=conv_maps, dense_maps=dense_maps, backend="native")
    fused, reference = BatchedEIIECNN(config), BatchedEIIECNN(torch_twin(config))
    assert isinstance(fused.kernels, ConvolutionKernels)
    assert isinstance(reference.convolutions, TorchConvolutions)  # the blocked products of PyTorch
    fused.kernels.openmp = openmp
    gradient = _kernels_equal_torch(fused, reference, config, threads, seed=2)
    conv = parameter_slices(build_network(config, 0))[0]["conv1.weight"]
    assert gradient[:, conv].abs().sum() > 0 and (gradient != 0).float().mean() > 0.5  # the ReLUs pass gradients


def _fused_step_errors(fused: BatchedEIIE, reference: BatchedEIIE, config: AgentConfig, threads: int,
                       seed: int) -> tuple[float, float]:
    """The direct learner's step without autograd (the CNN's ``cnn_step``, the recurrence's three calls) of K = 3 parties, B = 5 days × m = 7 assets (party 1 with 2 padded
    assets), its batch rows read in place from a stack of 40 days, against the float64 autograd of the PyTorch
    trunk, head and :func:`log_returns`: the portfolios and rewards to float32 round-off, padded assets
    exactly 0; returns the largest errors of the head's gradient of the kernel and of float32 autograd."""
    generator = torch.Generator().manual_seed(seed)
    k, b, m, days = 3, 5, 7, 40
    theta = torch.tensor(np.stack([flat_parameters(build_network(config, s)) for s in range(k)]), dtype=torch.float32)
    stack = fused.layout(1 + 0.05 * torch.randn(days, config.n_features, m, config.window, generator=generator))
    first_rows = torch.tensor([0, 17, days - b])
    padded = torch.zeros(k, 1, m, dtype=torch.bool)
    padded[1, 0, m - 2:] = True
    previous = torch.softmax(torch.randn(k, b, m + 1, generator=generator), -1)
    previous = previous.masked_fill(torch.cat([torch.zeros(k, 1, 1, dtype=torch.bool), padded], -1), 0.0)
    previous = previous / previous.sum(-1, keepdim=True)
    y_now, y_next = (1 + 0.03 * torch.randn(k, b, m + 1, generator=generator) for _ in range(2))
    y_now[..., 0] = y_next[..., 0] = 1.0
    commission = 0.01  # larger than the paper's, so that the cost term's gradient counts
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        weights, rewards, grad = fused.reward_gradient(theta, stack, first_rows, previous, y_now, y_next, padded,
                                                       commission)
    finally:
        torch.set_num_threads(before)

    def autograd(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        params = theta.to(dtype).requires_grad_(True)
        history = stack[first_rows[:, None] + torch.arange(b)].to(dtype)
        chosen = reference(params, history, previous[..., 1:].to(dtype), padded)
        returns = log_returns(chosen, previous.to(dtype), y_now.to(dtype), y_next.to(dtype), commission)
        (gradient,) = torch.autograd.grad(-returns.mean(-1).sum(), params)
        return chosen.detach(), returns.detach(), gradient

    want_weights, want_rewards, want_grad = autograd(torch.float64)
    _, _, grad32 = autograd(torch.float32)
    torch.testing.assert_close(weights.double(), want_weights, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(rewards.double(), want_rewards, atol=1e-6, rtol=1e-5)
    assert bool((weights[1, :, m - 1:] == 0).all()) and bool((grad.isfinite()).all())
    torch.testing.assert_close(grad.double(), want_grad, atol=2e-6 * float(want_grad.abs().max()), rtol=1e-4)
    head = slice(fused._slices["score.weight"].start, None)
    return (float((grad[:, head].double() - want_grad[:, head]).abs().max()),
            float((grad32[:, head].double() - want_grad[:, head]).abs().max()))


@pytest.mark.parametrize(("threads", "openmp"), SPLITS)
@pytest.mark.parametrize(("features", "window", "conv_maps", "dense_maps"), [
    (("close", "high", "low"), 30, 2, 20),  # the paper's shapes
    (("close", "high"), 12, 3, 7),          # D and C·W not multiples of the register blocks
])
@pytest.mark.native
def test_the_fused_cnn_step_is_the_float64_gradient(features: tuple, window: int, conv_maps: int, dense_maps: int,
                                                     threads: int, openmp: bool) -> None:
    """The direct learner's step in one kernel call (trunk, head, reward and their gradient: ``head.h``) equals
    float64 autograd to float32 round-off, and its head gradient is closer to it than float32 autograd's (the
    kernel computes the softmax's Jacobian in double: head.h)."""
    config = AgentConfig(window=window, features=features, conv_maps=conv_maps, dense_maps=dense_maps, backend="native")
    fused, reference = BatchedEIIECNN(config), BatchedEIIECNN(torch_twin(config))
    assert isinstance(fused.kernels, ConvolutionKernels) and fused.fused_step
    fused.kernels.openmp = openmp
    kernel_error, autograd_error = _fused_step_errors(fused, reference, config, threads, seed=4)
    assert kernel_error < autograd_error


@pytest.mark.native
@pytest.mark.parametrize(("threads", "openmp"), SPLITS)
@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_the_recurrent_step_without_autograd_is_the_float64_gradient(cell: str, threads: int, openmp: bool) -> None:
    """The recurrent EIIEs' direct step as three kernel calls (forward, ``recurrence_head``, backward) equals
    float64 autograd of the PyTorch day loops, head and reward to float32 round-off; its head gradient is
    closer to it than float32 autograd's."""
    config = AgentConfig(network=cell, window=12, features=("close", "high"), hidden_size=6, backend="native")
    fused, reference = BatchedEIIERecurrent(config), BatchedEIIERecurrent(torch_twin(config))
    assert isinstance(fused.kernels, RecurrenceKernels) and fused.fused_step
    fused.kernels.openmp = openmp
    kernel_error, autograd_error = _fused_step_errors(fused, reference, config, threads, seed=6)
    assert kernel_error < autograd_error


def test_without_kernels_the_cnn_has_no_fused_step() -> None:
    net = BatchedEIIECNN(AgentConfig(backend="torch"))
    assert net.kernels is None and not net.fused_step and net.backend.name == "torch"
    with pytest.raises(RuntimeError, match="C kernels"):
        net.reward_gradient(torch.zeros(1, net.n_parameters), torch.zeros(5, 9, net.input_width), torch.zeros(1),
                            torch.zeros(1, 5, 10), torch.ones(1, 5, 10), torch.ones(1, 5, 10), None, 0.002)


@pytest.mark.native
def test_tanh_and_sigmoid_of_the_kernels_are_within_float32_round_off() -> None:
    # W_hh = 0, W_ih = 1, b = 0: the Elman forward pass is h_1 = tanh(x), the LSTM's gates σ(x) and tanh(x)
    kernels = recurrence_kernels(4)
    assert kernels is not None
    values = torch.cat([torch.linspace(-70, 70, 200_003), torch.logspace(-9, 0, 20_000),
                        -torch.logspace(-9, 0, 20_000)]).float()
    r = values.numel()
    x = values.view(1, 1, 1, r)  # one feature, one day, r sequences
    eps = torch.finfo(torch.float32).eps

    def relative(got: torch.Tensor, exact: torch.Tensor) -> float:
        return float(((got.double() - exact).abs() / exact.abs().clamp_min(1e-30)).max())

    # σ within 2.5 eps (exponential-based, about 1 ulp); tanh within 3 eps: its rational form reaches 2.5 eps
    # relative (5 ulp) near |tanh| = 1 on a dense grid, from the rounding of its two Horner evaluations
    h_last, _ = kernels.forward("rnn", x, torch.ones(1, 4, 1), torch.zeros(1, 4), torch.zeros(1, 4, 4))
    assert relative(h_last[0, 0], torch.tanh(values.double())) < 3 * eps
    assert float(h_last.abs().max()) <= 1.0
    _, (states,) = kernels.forward("lstm", x, torch.ones(1, 16, 1), torch.zeros(1, 16), torch.zeros(1, 16, 4))
    record = states[0, :, 0].transpose(0, 1).reshape(16, -1)[:, :r]  # (4H, R): i f g o
    assert relative(record[0], torch.sigmoid(values.double())) < 2.5 * eps
    assert relative(record[8], torch.tanh(values.double())) < 3 * eps


@pytest.mark.native
@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64", "aarch64", "arm64"),
                    reason="the flush is x86's FTZ/DAZ and AArch64's FZ (vectors.h)")
@pytest.mark.parametrize("threads", [1, 2])
def test_the_kernels_flush_subnormals_and_restore_the_callers_floating_point_state(threads: int) -> None:
    # W_hh = 0, W_ih = 1, b = 0: h_1 = tanh(x) ≈ x for tiny x; a subnormal x (or result) is 0 in the kernels.
    # Two parties, so that with two threads the second is run by an OpenMP worker, not the calling thread.
    kernels = recurrence_kernels(4)
    assert kernels is not None
    tiny = torch.finfo(torch.float32).tiny  # 2^−126, the smallest normal float32
    values = torch.tensor([tiny / 4, -tiny / 64, 1e-45, tiny, 4 * tiny, 1e-30] * 6, dtype=torch.float32)
    assert bool((values[:3] != 0).all())  # subnormal, not zero, before the call
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        h_last, _ = kernels.forward("rnn", values.view(1, 1, 1, -1).repeat(2, 1, 1, 1), torch.ones(2, 4, 1),
                                    torch.zeros(2, 4), torch.zeros(2, 4, 4))
    finally:
        torch.set_num_threads(before)
    h = h_last[:, 0].reshape(2, 6, 6)
    assert bool((h[..., :3] == 0).all())  # subnormal operands are read as 0, by both parties' threads
    torch.testing.assert_close(h[..., 3:], values.view(1, 6, 6)[..., 3:].expand(2, 6, 3), rtol=3e-7, atol=0)
    # the calling thread computes subnormals again after the call
    assert np.float32(tiny) / np.float32(4) != 0
    assert float(torch.tensor(tiny) / 4) != 0


@pytest.mark.native
def test_the_tanh_coefficients_are_the_fit_that_benchmarks_fit_tanh_prints() -> None:
    # the kernel's literals are the script's fit rounded to float32, and the script's emulation of the kernel's
    # float32 evaluation (a correctly rounded 1/Q where the kernel has rcp14 and a Newton step) is within 2 ulp
    spec = importlib.util.spec_from_file_location("fit_tanh", ROOT / "benchmarks" / "fit_tanh.py")
    fit_tanh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit_tanh)
    p, q, error = fit_tanh.fit(6, 3, 9.0)
    assert error < 1e-8
    source = (ROOT / "portfed" / "agents" / "recurrence.c").read_text()
    body = source[source.index("static inline vf vtanh(vf x) {"):]
    literals = [np.float32(v) for v in re.findall(r"splat\(([-0-9.e]+)f\)", body[:body.index("\n}")])]
    # Horner from the highest power: P6, P5, P4 … P0, then Q3, Q2, Q1, Q0; the clamp 9 first, the min with 1 last
    assert literals == [np.float32(9.0), *p[::-1].astype(np.float32), *q[::-1].astype(np.float32), np.float32(1.0)]
    kernels = recurrence_kernels(4)
    values = torch.linspace(-12, 12, 100_001)
    h_last, _ = kernels.forward("rnn", values.view(1, 1, 1, -1), torch.ones(1, 4, 1), torch.zeros(1, 4),
                                torch.zeros(1, 4, 4))
    emulated = fit_tanh.kernel_tanh(values.numpy(), p, q, 9.0)
    assert (np.abs(h_last[0, 0].numpy().astype(np.float64) - emulated) <= 2 * np.spacing(np.abs(emulated))).all()


@pytest.mark.native
@pytest.mark.parametrize("network", ["cnn", "lstm"])
def test_the_portable_build_equals_the_torch_operations(network: str, tmp_path, monkeypatch) -> None:
    # the compiler's default target, no OpenMP: the generic vector code of vectors.h and the Python-thread split
    monkeypatch.setenv("PORTFED_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(native, "FLAG_SETS", (("-O3",),))
    native._library.cache_clear()
    try:
        config = AgentConfig(network=network, window=12, features=("close", "high"), hidden_size=6, backend="native")
        cls = BatchedEIIECNN if network == "cnn" else BatchedEIIERecurrent
        portable, reference = cls(config), cls(torch_twin(config))
        assert portable.kernels is not None and not portable.kernels.openmp and reference.kernels is None
        _kernels_equal_torch(portable, reference, config, threads=2, seed=3)
        if network == "cnn":
            _fused_step_errors(portable, reference, config, threads=2, seed=3)
    finally:
        native._library.cache_clear()


@pytest.mark.native
def test_a_tile_is_one_vector_register_of_the_cpu_the_kernels_are_built_for(tmp_path, monkeypatch) -> None:
    # vectors.h: 16 lanes where the compiler targets AVX-512, else 8 (AVX2; the portable build's SSE: two registers)
    avx512 = torch.backends.cpu.get_cpu_capability() == "AVX512"
    assert native.recurrence_kernels(5).lanes == (16 if avx512 else 8)
    monkeypatch.setenv("PORTFED_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(native, "FLAG_SETS", (("-O3",),))
    native._library.cache_clear()
    try:
        assert native.recurrence_kernels(5).lanes == 8
    finally:
        native._library.cache_clear()


@pytest.mark.native
def test_the_library_is_compiled_once_into_the_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PORTFED_CACHE_DIR", str(tmp_path))
    native._library.cache_clear()
    try:
        assert recurrence_kernels(3) is not None
        built = sorted((tmp_path / "native").iterdir())
        assert [p.suffix for p in built] == [".so"] and built[0].name.startswith("recurrence-hidden3-")  # no temporaries left
        stamp = built[0].stat().st_mtime_ns
        native._library.cache_clear()
        assert recurrence_kernels(3) is not None
        assert sorted((tmp_path / "native").iterdir()) == built and built[0].stat().st_mtime_ns == stamp
    finally:
        native._library.cache_clear()


def test_the_backend_is_chosen_by_the_config_and_the_override_and_a_missing_compiler_is_named(tmp_path,
                                                                                              monkeypatch) -> None:
    # no compiler needed: the compiler is a path that does not exist; torch never looks for one
    monkeypatch.setenv("PORTFED_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.delenv("PORTFED_NATIVE", raising=False)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")  # where auto tries the kernels
    native._library.cache_clear()
    backends._warn_once.cache_clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # agent.backend torch: no build attempted, nothing to warn about
            assert BatchedEIIERecurrent(AgentConfig(network="rnn", hidden_size=5, backend="torch")).day_loops \
                is TORCH_DAY_LOOPS
            assert BatchedEIIECNN(AgentConfig(window=11, backend="torch")).backend.name == "torch"
        with pytest.raises(NativeBuildError, match="no-such-cc"):
            BatchedEIIECNN(AgentConfig(window=11, backend="native"))
        with pytest.warns(RuntimeWarning, match="no-such-cc"):  # auto: a warning, once, and the torch backend
            net = BatchedEIIERecurrent(AgentConfig(network="lstm", hidden_size=5))
        assert net.day_loops is TORCH_DAY_LOOPS and net.backend.name == "torch" and net.kernels is None
        assert BatchedEIIECNN(AgentConfig(window=11)).kernels is None  # warned once
        # PORTFED_NATIVE overrides agent.backend: 0 → torch (no build), 1 → native (the build error)
        monkeypatch.setenv("PORTFED_NATIVE", "0")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert BatchedEIIECNN(AgentConfig(window=11, backend="native")).backend.name == "torch"
        monkeypatch.setenv("PORTFED_NATIVE", "1")
        with pytest.raises(NativeBuildError, match="no-such-cc"):
            BatchedEIIECNN(AgentConfig(window=11, backend="torch"))
        monkeypatch.setenv("PORTFED_NATIVE", "sometimes")
        with pytest.raises(ValueError, match="PORTFED_NATIVE must be one of 0, 1, auto, got 'sometimes'"):
            BatchedEIIECNN(AgentConfig(window=11))
        assert not (tmp_path / "native").exists() or not any((tmp_path / "native").iterdir())
    finally:
        native._library.cache_clear()
        backends._warn_once.cache_clear()


@pytest.mark.parametrize("capability", ["DEFAULT", "SVE256", "NO AVX"])
def test_auto_runs_torch_without_building_on_a_cpu_without_avx2(capability, tmp_path, monkeypatch, caplog) -> None:
    # the kernels were measured faster only on AVX2 and AVX-512; elsewhere auto takes torch, builds nothing, warns nothing
    monkeypatch.setenv("PORTFED_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))  # a build attempt would warn: none is made
    monkeypatch.delenv("PORTFED_NATIVE", raising=False)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    native._library.cache_clear()
    backends._warn_once.cache_clear()
    backends._note_once.cache_clear()
    try:
        with warnings.catch_warnings(), caplog.at_level("INFO", logger=backends.__name__):
            warnings.simplefilter("error")
            assert not backends.kernels_pay_off()
            assert BatchedEIIERecurrent(AgentConfig(network="rnn", hidden_size=5)).backend.name == "torch"
            assert BatchedEIIECNN(AgentConfig(window=11)).backend.name == "torch"
        assert [r.getMessage() for r in caplog.records].count(
            f"agent.backend auto: torch, because this CPU's vectors are {capability}, neither AVX2 nor AVX-512, where "
            "the C kernels were measured faster than PyTorch's operations (docs/backends.md); "
            "agent.backend: native runs them anyway") == 1  # once
        assert not (tmp_path / "native").exists()
        with pytest.raises(NativeBuildError, match="no-such-cc"):  # native is still the user's to ask for
            BatchedEIIECNN(AgentConfig(window=11, backend="native"))
        monkeypatch.setenv("PORTFED_NATIVE", "1")
        with pytest.raises(NativeBuildError, match="no-such-cc"):
            BatchedEIIECNN(AgentConfig(window=11))
    finally:
        native._library.cache_clear()
        backends._warn_once.cache_clear()
        backends._note_once.cache_clear()


@pytest.mark.native
@pytest.mark.parametrize("capability", ["AVX512", "AVX2"])
def test_auto_runs_the_kernels_on_a_cpu_with_avx2_or_avx512(capability, monkeypatch) -> None:
    monkeypatch.delenv("PORTFED_NATIVE", raising=False)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    assert backends.kernels_pay_off()
    assert BatchedEIIERecurrent(AgentConfig(network="rnn", hidden_size=5)).backend.name == "native"
    assert BatchedEIIECNN(AgentConfig(window=11)).backend.name == "native"


def test_a_gpu_runs_the_torch_backend_and_native_is_refused_there() -> None:
    assert backends.operations("auto", torch.device("cuda"), lambda b: b.name) == (backends.TORCH_BACKEND, "torch")
    with pytest.raises(ValueError, match="backend 'native' .* runs on the CPU, not on device 'cuda'"):
        AgentConfig(backend="native", device="cuda")
    with pytest.raises(ValueError, match="backend must be one of .* got 'gpu'"):
        AgentConfig(backend="gpu")


def test_a_second_backward_pass_of_one_graph_is_refused() -> None:
    # the fused kernels hand the saved state to the next forward pass after the first backward pass
    config = AgentConfig(network="lstm", window=5, hidden_size=4)
    net = BatchedEIIERecurrent(config)
    theta = torch.tensor(np.stack([flat_parameters(build_network(config, s)) for s in range(2)]), dtype=torch.float32,
                         requires_grad=True)
    history = torch.stack([net.layout(1 + 0.01 * torch.randn(3, 1, 4, 5)) for _ in range(2)])
    loss = net(theta, history, torch.full((2, 3, 4), 0.2)).log().sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="one backward pass per forward pass"):
        loss.backward()


def test_a_pass_without_gradients_keeps_no_state_and_gives_the_same_portfolios() -> None:
    config = AgentConfig(network="rnn", window=6, hidden_size=4)
    net = BatchedEIIERecurrent(config)
    theta = torch.tensor(np.stack([flat_parameters(build_network(config, s)) for s in range(2)]), dtype=torch.float32)
    history = torch.stack([net.layout(1 + 0.01 * torch.randn(3, 1, 4, 6)) for _ in range(2)])
    previous = torch.full((2, 3, 4), 0.2)
    with torch.no_grad():
        first = net(theta, history, previous)
        second = net(theta, history, previous)  # reuses the buffer the first pass handed back
    with_grad = net(theta.clone().requires_grad_(True), history, previous)
    torch.testing.assert_close(first, second, rtol=0, atol=0)
    torch.testing.assert_close(with_grad.detach(), first, rtol=0, atol=0)


def test_every_kernel_source_and_header_ships_in_the_package() -> None:
    """A wheel holds what ``pyproject.toml``'s package data lists: the kernels compile on the user's machine from
    those files, so each source and each header they include must be there."""
    import tomllib

    shipped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["portfed.agents"]
    needed = {*native._SIGNATURES, *(header.name for header in native.HEADERS)}
    included = {name for source in native._SIGNATURES
                for name in re.findall(r'#include "([^"]+)"', (native.HERE / source).read_text())}
    assert included <= {header.name for header in native.HEADERS}  # every included header is in the digest
    assert needed <= set(shipped)
