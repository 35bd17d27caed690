"""``agent.capture``: the engine's step recorded once and replayed (:mod:`portfed.agents.captured`) trains to the
same numbers as the eager step, to float32 round-off.

On the CPU ``capture: compile`` runs through inductor's C++ (tens of seconds to compile a step on a loaded
2-core machine: marked slow) and, fast, through ``aot_eager`` (Dynamo traces the whole step, AOTAutograd its
backward pass; only inductor's code generation is left out).  ``cuda_graph`` and ``compile``'s CUDA graphs
run only on a CUDA device: those tests skip without one (``benchmarks/gpu_checks.sh`` runs them)."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch
from engines import CONFIG, assert_equal_but_for_adams_round_off, random_walk, train_plan

import portfed.agents.captured as captured
from portfed.agents import AgentConfig
from portfed.agents.batched import BatchedDPGTrainer, batched_network

SEEDS = [3, 5, 7, 11]
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: benchmarks/gpu_checks.sh runs these")


def engine(config: AgentConfig) -> BatchedDPGTrainer:
    """Four parties of 2 or 3 assets (padded universes) and different lengths; the CNN on close/high/low."""
    ohlc = config.network == "cnn"
    panels = [random_walk(40 + 7 * k, k, m=2 + k % 2, ohlc=ohlc) for k in range(len(SEEDS))]
    return BatchedDPGTrainer(config, panels, SEEDS)


def small(network: str, device: str = "cpu", **changes) -> AgentConfig:
    features = ("close", "high", "low") if network == "cnn" else ("close",)
    return dataclasses.replace(CONFIG, network=network, window=6, features=features, device=device, **changes)


#: The plans two engines run in turn: plain; a proximal term in the loss; the Fed+ mix with stragglers (the
#: shorter parties' last steps run eagerly); a subset of the parties (new static buffers, a new recording);
#: a checkpoint loaded (new stacks tensors: the recordings made anew).
PLANS = {
    "plain": lambda e, start: train_plan(e, None, 3),
    "prox": lambda e, start: train_plan(e, start, 2, targets=start * 0.5, sigmas=[10.0] * 4, proximal_update="loss"),
    "mix": lambda e, start: train_plan(e, None, [3, 2, 3, 1], targets=start * 0.9, sigmas=[5.0] * 4),
    "subset": lambda e, start: train_plan(e, None, 2, parties=[0, 2]),
    "reload": lambda e, start: (e.load_state_dict(e.state_dict()), train_plan(e, None, 2))[1],
}


def assert_same_training(eager: BatchedDPGTrainer, replayed: BatchedDPGTrainer, plans: tuple[str, ...]) -> None:
    """The two engines run ``plans`` (:data:`PLANS`) and end each with the same parameters and step records,
    and the same PVMs and Adam clocks at the end, to float32 round-off."""
    results = []
    for engine_ in (eager, replayed):
        start = engine_.parameters()
        results.append([PLANS[name](engine_, start) for name in plans])
    steps = 0
    for got, want in zip(results[1], results[0], strict=True):
        steps += int(want.steps.max())
        assert_equal_but_for_adams_round_off(got.params, want.params, atol=1e-5, step=CONFIG.learning_rate,
                                             steps=steps)
        np.testing.assert_allclose(got.stats, want.stats, rtol=1e-4, atol=1e-5)
    assert np.array_equal(replayed.step_counts, eager.step_counts)
    np.testing.assert_allclose(replayed.stacks.pvm.cpu(), eager.stacks.pvm.cpu(), atol=1e-5)


# ---------------------------------------------------------------------- the config key
def test_capture_is_checked_where_it_is_set() -> None:
    assert AgentConfig().capture == "none"
    with pytest.raises(ValueError, match=r"capture must be one of \('none', 'compile', 'cuda_graph'\), got 'graph'"):
        AgentConfig(capture="graph")
    with pytest.raises(ValueError, match=r"learner 'actor_critic' trains with capture: none"):
        AgentConfig(capture="compile", learner="actor_critic")
    with pytest.raises(ValueError, match=r"max_weight / max_turnover trains with capture: none"):
        AgentConfig(capture="compile", max_weight=0.5)
    with pytest.raises(ValueError, match=r"capture 'cuda_graph' needs a CUDA device, got device 'cpu'"):
        AgentConfig(capture="cuda_graph", device="cpu")
    with pytest.raises(ValueError, match=r"capture 'compile' records the PyTorch step, not the C kernels of "
                                         r"backend 'native'; use backend 'torch' or 'auto' with it, or capture: none"):
        AgentConfig(capture="compile", backend="native", device="cpu")


def test_a_capture_runs_on_the_torch_backend(monkeypatch) -> None:
    """``auto`` resolves to ``torch`` with a capture (the steps it leaves eager are the PyTorch step it records)."""
    monkeypatch.delenv("PORTFED_NATIVE", raising=False)
    for network in ("cnn", "rnn"):
        config = small(network, capture="compile")
        assert (config.backend, config.trunk_backend) == ("auto", "torch")
        net = batched_network(config)
        assert net.backend.name == "torch" and net.kernels is None and not net.fused_step
    assert small("cnn").trunk_backend == "auto"


@pytest.mark.native
def test_portfed_native_1_with_a_capture_is_refused(monkeypatch) -> None:
    monkeypatch.setenv("PORTFED_NATIVE", "1")
    with pytest.raises(ValueError, match=r"agent.capture 'compile' records the PyTorch step, but the network runs "
                                         r"on backend 'native' \(PORTFED_NATIVE=1 forces the C kernels\)"):
        engine(small("cnn", capture="compile"))


def test_a_compiler_failure_is_one_clear_error(monkeypatch) -> None:
    def broken(graph, inputs):
        raise RuntimeError("no C++ compiler here")

    monkeypatch.setattr(captured.torch, "compile", functools.partial(torch.compile, backend=broken))
    replayed = engine(small("cnn", capture="compile"))
    with pytest.raises(RuntimeError, match=r"agent.capture 'compile' could not compile the local step on cpu: .*"
                                           r"no C\+\+ compiler here"):
        train_plan(replayed, None, 1)


# ---------------------------------------------------------------------- the traced maps
@pytest.mark.parametrize("network", ["cnn", "rnn", "lstm"])
def test_traced_maps_equal_the_engines_maps_and_their_gradients(network: str, backend: str) -> None:
    """The plain operations the compiler traces (``traced_maps``) give the maps of the eager step on either
    backend (its hand-written backward passes, or the C kernels) and the same gradients."""
    config = small(network, backend=backend)
    net, batched = batched_network(config), engine(config)
    rng = np.random.default_rng(0)
    theta = torch.as_tensor(batched.parameters(), dtype=torch.float32)
    rows = torch.as_tensor(rng.integers(0, 20, size=4))
    history = batched.stacks.windows.index_select(0, (rows[:, None] + torch.arange(8)).reshape(-1)).view(4, 8, 3, -1)
    probe = None
    grads = []
    for maps in (net.maps, net.traced_maps):
        leaf = theta.clone().requires_grad_(True)
        out = maps(leaf, history)
        probe = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)) if probe is None else probe
        grads.append((out.detach(), torch.autograd.grad((out * probe).sum(), leaf)[0]))
    torch.testing.assert_close(grads[1][0], grads[0][0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads[1][1], grads[0][1], rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------- compiled vs eager, CPU
@pytest.mark.extended  # CI's second stage (make test-extended): one of make test's slowest, kept out of its 10 minutes
def test_the_step_traced_whole_trains_as_the_eager_step(monkeypatch) -> None:
    """Dynamo traces the LSTM's whole step with ``fullgraph=True`` (no graph break) and, run by AOTAutograd
    without inductor, the captured engine trains as the eager one through a plain call and one with the Fed+
    mix and stragglers, and after a checkpoint is loaded (the slow test below runs every kind of plan through
    inductor)."""
    monkeypatch.setattr(captured.torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    assert_same_training(engine(small("lstm")), engine(small("lstm", capture="compile")),
                         plans=("plain", "mix", "reload"))


@pytest.mark.slow
@pytest.mark.parametrize("network", ["cnn", "rnn"])
def test_compiled_by_inductor_trains_as_the_eager_step(network: str) -> None:
    """``capture: compile`` on the CPU (inductor's C++) equals the eager PyTorch step through every kind of plan."""
    assert_same_training(engine(small(network)), engine(small(network, capture="compile")), plans=tuple(PLANS))


# ---------------------------------------------------------------------- CUDA
@CUDA
@pytest.mark.parametrize("capture", ["compile", "cuda_graph"])
@pytest.mark.parametrize("network", ["cnn", "rnn"])
def test_cuda_capture_trains_as_the_eager_step(network: str, capture: str) -> None:
    """Every kind of plan through the CUDA graphs; ``compile`` through two of them (each new shape compiles for
    tens of seconds, and ``gpu_checks.sh`` has ten minutes for everything)."""
    plans = tuple(PLANS) if capture == "cuda_graph" else ("plain", "mix")
    assert_same_training(engine(small(network, "cuda")), engine(small(network, "cuda", capture=capture)), plans)


@CUDA
@pytest.mark.parametrize("capture", ["compile", "cuda_graph"])
def test_cuda_capture_is_reproducible(capture: str) -> None:
    """The same config and seeds give the same numbers, bit for bit, on the same device."""
    runs = [train_plan(engine(small("cnn", "cuda", capture=capture)), None, 8) for _ in range(2)]
    assert np.array_equal(runs[0].params, runs[1].params) and np.array_equal(runs[0].stats, runs[1].stats)
