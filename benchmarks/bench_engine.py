"""Batched vs per-party training engine at the paper's shapes (DESIGN.md §5: 50 parties × 800 rounds × 50 steps).

Usage: ``.venv/bin/python benchmarks/bench_engine.py [--quick] [--repeats 3] [--impls] [--learners]``.

Each party trains an EIIE (the CNN, then the RNN and the LSTM of hidden size 20) on ~3,000 days of its own synthetic prices (9 assets, correlated GBM,
seeded), window 30, batch 50, with two feature sets: ``close`` — what the bundled datasets, the
augmenters and every shipped config give the network (``configs/paper.yaml`` included: the
generators synthesize closes) — and ``close/high/low``, Jiang et al.'s and the issue's "paper
shapes" (3 features); the recurrent EIIEs on ``close``.  For each, and K = 10 and K = 50 parties,
the script times in the same process local iterations of the plain per-party reference implementation
(K ``DPGTrainer.local_train`` calls, ``examples/dpg_trainer.py``) and of portfed's engine (one
``BatchedDPGTrainer.train`` call), each with 1 and with 2 torch threads, and prints party-steps per second, the ratio of the engines at their best thread count,
the projected time of the paper's 2,000,000 party-steps and the memory.  The timings alternate
between the engines and keep the best of ``--repeats`` (``timeit``'s rule: the machine's noise only
ever adds time).  Then it profiles whole federated rounds of the batched engine
(``run_rounds`` over the engine as a cohort, fedavg+) and prints where their time goes.  ``--impls`` also times one
forward/backward pass of the candidate batched implementations.

The last line printed is the batched engine's party-steps per second at K = 50 on the paper shapes.

``--learners`` only times the two learners (``agent.learner``) of the CNN EIIE on closes, K = 10 and 50,
one thread: the batched engine's party-steps/s with the direct learner and with the actor-critic (actor,
critic and target networks: about twice the forward passes and three times the parameters), and the
actor-critic's per-party reference (``examples/ddpg_trainer.py``).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import os
import pstats
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from portfed.agents import AgentConfig, build_network, flat_parameters
from portfed.agents.batched import BatchedDPGTrainer
from portfed.agents.batched_recurrent import TORCH_DAY_LOOPS, TORCH_PARTIES_PER_PASS
from portfed.data.panel import PricePanel
from portfed.federation import CohortPlan, make_algorithm, run_rounds

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
from ddpg_trainer import DDPGTrainer  # noqa: E402  (the actor-critic's per-party reference)
from dpg_trainer import DPGTrainer  # noqa: E402  (the plain per-party reference, not part of the library)

PAPER_PARTY_STEPS = 50 * 800 * 50
N_ASSETS, TRAIN_DAYS = 9, 3000


def synthetic_panel(seed: int, ohlc: bool) -> PricePanel:
    """3,000 training days (+ one window) of 9 correlated GBM assets; high/low around the close."""
    rng = np.random.default_rng(seed)
    n = TRAIN_DAYS + 31
    mix = rng.normal(0.0, 1.0, (N_ASSETS, N_ASSETS)) / np.sqrt(N_ASSETS)
    shocks = rng.standard_normal((n, N_ASSETS)) @ mix.T
    close = 100.0 * np.exp(np.cumsum(2e-4 + 0.015 * shocks, axis=0))
    dates = pd.bdate_range("2006-01-02", periods=n)
    tickers = tuple(f"P{seed}A{i}" for i in range(N_ASSETS))
    if not ohlc:
        return PricePanel(close[:, :, None], dates, tickers, ("close",))
    spread = 1.0 + 0.01 * np.abs(rng.standard_normal((n, N_ASSETS)))
    return PricePanel(np.stack([close, close * spread, close / spread], axis=-1), dates, tickers,
                      ("close", "high", "low"))


def rate(party_steps: int, seconds: float) -> float:
    return party_steps / seconds


def fmt_duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def rss_mib() -> float:
    """Resident memory now (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


THREADS = (1, 2)


def machine_gflops(threads: int, n: int = 2048, repeats: int = 5) -> float:
    """The machine's float32 matrix-product rate at ``threads`` torch threads: ``2n³`` flops of one
    ``n × n`` product (n = 2048), best of ``repeats`` — the yardstick every figure's share is taken of."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b), threads) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def party_step_flops(config: AgentConfig, assets: int = N_ASSETS) -> float:
    """Flops of one party-step of the EIIE's forward and backward passes, counted from the layers: the
    forward pass's multiply-adds (the convolutions or the recurrence and its input projection, the
    score head), ×3 for forward + backward (the backward forms two products per forward one), ×2
    flops per multiply-add.  The softmax, reward, Adam and bookkeeping are left out (a few per cent)."""
    rows = config.batch_size * assets
    head = rows * (1 + (config.dense_maps if config.network == "cnn" else config.hidden_size))
    if config.network == "cnn":
        width = config.window - 2
        trunk = rows * (width * config.conv_maps * config.n_features * 3 + config.dense_maps * config.conv_maps * width)
    else:
        gates = (1 if config.network == "rnn" else 4) * config.hidden_size
        trunk = rows * config.window * gates * (config.hidden_size + config.n_features)
    return 3 * 2 * (trunk + head)


def share(rate_per_s: float, config: AgentConfig, peak_gflops: float) -> str:
    """``rate_per_s`` party-steps/s as GFLOPS and as a share of the machine's matmul rate."""
    gflops = rate_per_s * party_step_flops(config) / 1e9
    return f"{gflops:.1f} GFLOPS = {100 * gflops / peak_gflops:.0f} % of the machine's {peak_gflops:.0f}"


def _timed(fn: Callable[[], None], threads: int) -> float:
    torch.set_num_threads(threads)
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def time_engines(config: AgentConfig, k: int, ohlc: bool, ref_steps: int, batched_steps: int,
                 repeats: int, peak: dict[int, float]) -> tuple[float, float]:
    """Party-steps/s of the per-party and of the batched engine for ``k`` parties, each at its best thread count."""
    panels = [synthetic_panel(seed, ohlc) for seed in range(k)]
    parties = [DPGTrainer(config, panel, seed) for seed, panel in enumerate(panels)]
    before = rss_mib()
    batched = BatchedDPGTrainer(config, panels, list(range(k)))
    batched_mib = rss_mib() - before

    def per_party() -> None:
        for party in parties:
            party.local_train(None, ref_steps)

    def all_at_once() -> None:
        batched.train(CohortPlan(round_index=0, parties=np.arange(k), steps=batched_steps, start=None))

    for threads in THREADS:  # warm-up
        _timed(lambda: [p.local_train(None, 2) for p in parties], threads)
        _timed(lambda: batched.train(CohortPlan(round_index=0, parties=np.arange(k), steps=2, start=None)), threads)
    best = {(engine, t): np.inf for engine in ("per-party", "batched") for t in THREADS}
    for _ in range(repeats):
        for threads in THREADS:
            best["per-party", threads] = min(best["per-party", threads], _timed(per_party, threads))
            best["batched", threads] = min(best["batched", threads], _timed(all_at_once, threads))
    rates = {key: rate(k * (ref_steps if key[0] == "per-party" else batched_steps), seconds)
             for key, seconds in best.items()}
    reference = max(rates["per-party", t] for t in THREADS)
    fast_threads = max(THREADS, key=lambda t: rates["batched", t])
    fast = rates["batched", fast_threads]
    stored = batched.data_bytes
    by_threads = " | ".join(f"{engine} {'/'.join(f'{rates[engine, t]:.0f}' for t in THREADS)}"
                            for engine in ("per-party", "batched"))
    print(f"K = {k:>2}: party-steps/s at {'/'.join(map(str, THREADS))} threads: {by_threads} | best ratio "
          f"{fast / reference:4.1f}× | paper's 2M party-steps: per-party {fmt_duration(PAPER_PARTY_STEPS / reference)}, "
          f"batched {fmt_duration(PAPER_PARTY_STEPS / fast)} | batched data {stored / 2**20:.0f} MiB, "
          f"engine resident +{batched_mib:.0f} MiB, process peak RSS {max_rss_mib():.0f} MiB")
    print(f"        batched at {fast_threads} thread(s): {fast:.0f} party-steps/s × {party_step_flops(config) / 1e6:.1f} "
          f"MFLOP = {share(fast, config, peak[fast_threads])} at that thread count")
    return reference, fast


def time_chunks(network: str, k: int, chunks: list[int], steps: int = 4, repeats: int = 3) -> None:
    """Party-steps/s of whole engine steps of the ``network`` EIIE (closes, 1 and 2 threads) for each number
    of parties per forward/backward pass (``BatchedDPGTrainer(chunk=…)``)."""
    config = AgentConfig(network=network)
    panels = [synthetic_panel(seed, False) for seed in range(k)]
    for chunk in chunks:
        engine = BatchedDPGTrainer(config, panels, list(range(k)), chunk=chunk)

        def run(n: int, engine: BatchedDPGTrainer = engine) -> None:
            engine.train(CohortPlan(round_index=0, parties=np.arange(k), steps=n, start=None))

        figures = []
        for threads in THREADS:
            _timed(lambda: run(2), threads)
            best = min(_timed(lambda: run(steps), threads) for _ in range(repeats))
            figures.append(f"{rate(k * steps, best):6.0f}")
        print(f"{network.upper()} K = {k}, {chunk:>2} parties per pass: {' / '.join(figures)} party-steps/s "
              f"at {' / '.join(map(str, THREADS))} threads")


def time_learners(k: int, ref_steps: int, batched_steps: int, repeats: int) -> None:
    """Party-steps/s (1 thread) of the batched engine with each learner and of the per-party actor-critic."""
    panels = [synthetic_panel(seed, False) for seed in range(k)]
    direct, actor_critic = AgentConfig(), AgentConfig(learner="actor_critic")
    engines = {name: BatchedDPGTrainer(config, panels, list(range(k)))
               for name, config in (("direct", direct), ("actor_critic", actor_critic))}
    reference = [DDPGTrainer(actor_critic, panel, seed) for seed, panel in enumerate(panels)]

    def batched(engine: BatchedDPGTrainer, steps: int) -> Callable[[], None]:
        return lambda: engine.train(CohortPlan(round_index=0, parties=np.arange(k), steps=steps, start=None))

    def per_party(steps: int) -> Callable[[], None]:
        return lambda: [trainer.local_train(None, steps) for trainer in reference]

    runs = {f"batched {name}": (batched(engine, batched_steps), batched_steps) for name, engine in engines.items()}
    runs["per-party actor_critic"] = (per_party(ref_steps), ref_steps)
    for engine in engines.values():
        _timed(batched(engine, 2), 1)  # warm-up
    _timed(per_party(1), 1)
    best = {name: min(_timed(run, 1) for _ in range(repeats)) for name, (run, _) in runs.items()}
    rates = {name: rate(k * runs[name][1], seconds) for name, seconds in best.items()}
    sizes = f"actor {engines['direct'].n_parameters}, actor ⊕ critic {engines['actor_critic'].n_parameters} parameters"
    print(f"K = {k:>2} ({sizes}), 1 thread: " + " | ".join(f"{name} {value:.0f}" for name, value in rates.items())
          + f" party-steps/s; actor-critic / direct {rates['batched actor_critic'] / rates['batched direct']:.2f}")


def profile_rounds(config: AgentConfig, k: int, ohlc: bool, rounds: int, steps: int) -> None:
    """Where the time of whole batched rounds goes (fedavg+, all parties active)."""
    panels = [synthetic_panel(seed, ohlc) for seed in range(k)]
    trainer = BatchedDPGTrainer(config, panels, list(range(k)))
    init = flat_parameters(build_network(config, 0))
    spec = make_algorithm("fedavg+")
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    run_rounds(trainer, spec, rounds, steps, seed=0, init_params=init)
    profiler.disable()
    total = time.perf_counter() - start
    stats = pstats.Stats(profiler)
    table = stats.stats  # type: ignore[attr-defined]

    def cumulative(name: str, file_part: str) -> float:
        return sum(v[3] for key, v in table.items() if key[2] == name and file_part in key[0])

    parts = {
        "batched local steps (forward, backward, Adam, PVM)": cumulative("_step", "agents/batched.py"),
        "batch sampling (K generators, geometric inversion)": cumulative("sample_starts", "agents/sampler.py"),
        "step statistics (the round's per-party means)": cumulative("sums", "agents/batched.py"),
        "Local-Solve plan (θ, z, start for the stack)": cumulative("plan_local_solve", "local_solve.py"),
        "server step (aggregation) and round records": cumulative("finish_round", "rounds.py"),
    }
    print(f"\nwhole rounds: {rounds} × fedavg+, K = {k}, E = {steps}: {total:.2f} s "
          f"({rate(rounds * k * steps, total):.0f} party-steps/s, {total / rounds:.2f} s/round under cProfile)")
    for label, seconds in parts.items():
        print(f"  {label:<52} {seconds:7.3f} s  {100 * seconds / total:5.1f} %")
    rest = total - sum(parts.values())
    print(f"  {'other (validation, round loop, profiler)':<52} {rest:7.3f} s  {100 * rest / total:5.1f} %")
    print("  top operations by own time:")
    stats.sort_stats("tottime")
    ranked = sorted(table.items(), key=lambda item: -item[1][2])[:8]
    for (file, line, name), v in ranked:
        where = name if file == "~" else f"{name} ({file.rsplit('/', 1)[-1]}:{line})"
        print(f"    {v[2]:7.3f} s  {where}")


#: One local call's time by part (``profile_step``): label → the functions whose cumulative time it is
#: (name, a piece of their file's path[, the caller it is counted under: the fused step's penalties, not
#: the autograd loss's]).  The network's own passes are also shown inside the forward and backward passes;
#: "Python glue" is the call's time outside every part.
STEP_PARTS = {
    "batch starts (K samplers) and exploration noise": [("sample_starts", "agents/sampler.py"),
                                                         ("_draw_noise", "agents/batched.py")],
    "batch gather: windows, PVM reads, price relatives": [("gather", "agents/stacks.py")],
    "fused step (no autograd): trunk, head, reward, gradient": [("reward_gradient", "agents/batched_networks.py"),
                                                                ("reward_gradient", "agents/batched_recurrent.py")],
    "forward pass: network and head": [("forward", "agents/batched_head.py")],
    "loss: reward, transaction cost, proximal term": [("dpg_loss", "agents/objective.py"),
                                                      ("actor_critic_loss", "agents/actor_critic.py"),
                                                      ("with_penalties", "agents/objective.py", "_step"),
                                                      ("penalty_gradient", "agents/objective.py", "_step")],
    "backward pass (autograd)": [("grad", "torch/autograd/__init__.py")],
    "Adam step": [("adam_step", "agents/adam.py")],
    "Fed+ mix": [("fedplus_mix", "agents/")],
    "PVM writes": [("write_pvm", "agents/stacks.py")],
    "step statistics (per-party sums)": [("sums", "agents/batched.py")],
}
#: The kernels inside a part: (label, functions) lines printed under it.
TRUNK_PARTS = {
    "fused step (no autograd): trunk, head, reward, gradient": [
        ("  of which the kernels (the CNN's cnn_step; the recurrence's forward, head, backward)", [
            ("step", "agents/native.py"), ("forward", "agents/native.py"), ("head", "agents/native.py"),
            ("backward", "agents/native.py")])],
    "forward pass: network and head": [("  of which the trunk (convolutions / recurrence kernels)", [
        ("forward", "agents/batched_networks.py"), ("forward", "agents/batched_recurrent.py")])],
    "backward pass (autograd)": [("  of which the trunk's hand-written backward", [
        ("backward", "agents/batched_networks.py"), ("backward", "agents/batched_recurrent.py")])],
}


def profile_step(config: AgentConfig, k: int, ohlc: bool, steps: int, label: str) -> None:
    """Where one local call's time goes (``train_steps`` of K parties × ``steps`` iterations with the Fed+
    mix, as a fedavg+ round runs it), by part of the step (:data:`STEP_PARTS`), under cProfile."""
    panels = [synthetic_panel(seed, ohlc) for seed in range(k)]
    trainer = BatchedDPGTrainer(config, panels, list(range(k)))
    start = np.stack([flat_parameters(build_network(config, seed)) for seed in range(k)])
    plan = CohortPlan(round_index=0, parties=np.arange(k), steps=np.full(k, steps), start=start,
                      target=start.copy(), sigma=np.full(k, 0.01))
    trainer.train_steps(dataclasses.replace(plan, steps=np.full(k, 2)))  # warm-up
    timed = time.perf_counter()
    trainer.train_steps(plan)
    plain = time.perf_counter() - timed
    profiler = cProfile.Profile()
    timed = time.perf_counter()
    profiler.enable()
    trainer.train_steps(plan)
    profiler.disable()
    total = time.perf_counter() - timed
    table = pstats.Stats(profiler).stats  # type: ignore[attr-defined]

    def cumulative(functions: list[tuple[str, ...]]) -> float:
        total = 0.0
        for key, v in table.items():
            for name, file_part, *caller in functions:
                if key[2] == name and file_part in key[0]:
                    total += sum(c[3] for where, c in v[4].items() if where[2] == caller[0]) if caller else v[3]
        return total

    print(f"\none local call, {label}, K = {k}, E = {steps} with the Fed+ mix, {torch.get_num_threads()} thread(s): "
          f"{plain * 1e3:.0f} ms ({rate(k * steps, plain):.0f} party-steps/s; {total * 1e3:.0f} ms under cProfile, "
          f"{total / steps * 1e3:.2f} ms per step)")
    parts = {name: cumulative(functions) for name, functions in STEP_PARTS.items()}
    for name, seconds in parts.items():
        print(f"  {name:<68} {seconds / steps * 1e3:6.2f} ms/step  {100 * seconds / total:5.1f} %")
        for trunk, functions in TRUNK_PARTS.get(name, []):
            seconds = cumulative(functions)
            print(f"  {trunk:<68} {seconds / steps * 1e3:6.2f} ms/step  {100 * seconds / total:5.1f} %")
    glue = total - sum(parts.values())
    print(f"  {'Python glue (the step outside the parts above)':<68} {glue / steps * 1e3:6.2f} ms/step  "
          f"{100 * glue / total:5.1f} %")


#: ``--kernels``: the ways the engine can run a network's trunk, as (label, kernels?, OpenMP split?, PyTorch's
#: threads around the kernels: 1 or ``None`` = the caller's).
KERNEL_VARIANTS = (("PyTorch operations", False, False, None),
                   ("kernels on Python threads, PyTorch on 1 thread", True, False, 1),
                   ("kernels on Python threads, PyTorch on both", True, False, None),
                   ("kernels on OpenMP (PyTorch on both)", True, True, None))


def time_kernels(network: str, ohlc: bool, k: int, steps: int = 40, repeats: int = 3) -> None:
    """Party-steps/s of the engine at two threads with each of :data:`KERNEL_VARIANTS` (alternating in this
    process, best of ``repeats``), then the kernels' own forward and backward time per party-step on one
    thread."""
    config = AgentConfig(network=network, features=("close", "high", "low") if ohlc else ("close",))
    panels = [synthetic_panel(seed, ohlc) for seed in range(k)]
    engines = {}
    for label, kernels, openmp, torch_around in KERNEL_VARIANTS:
        # the PyTorch day loops run their own best number of parties per pass (batched_recurrent.py)
        chunk = None if kernels or network == "cnn" else TORCH_PARTIES_PER_PASS[network]
        engine = BatchedDPGTrainer(config, panels, list(range(k)), chunk=chunk)
        if engine.net.kernels is None:
            raise SystemExit("--kernels needs the C kernels (a C compiler; PORTFED_NATIVE not 0)")
        if not kernels:  # the autograd step: the fused one (the whole step in one kernel call) needs the kernels
            engine.net.kernels, engine.net.fused_step = None, False
            if network != "cnn":
                engine.net.day_loops = TORCH_DAY_LOOPS
        else:
            engine.net.kernels.openmp = openmp
            engine.net.torch_threads_with_kernels = torch_around
        engines[label] = engine
    torch.set_num_threads(2)

    def run(engine: BatchedDPGTrainer, n: int) -> float:
        start = time.perf_counter()
        engine.train(CohortPlan(round_index=0, parties=np.arange(k), steps=n, start=None))
        return time.perf_counter() - start

    for engine in engines.values():
        run(engine, 2)
    best = {label: min(run(engine, steps) for _ in range(repeats)) for label, engine in engines.items()}
    name = f"{network.upper()}{' on close/high/low' if ohlc else ''}"
    print(f"{name}, K = {k}, two threads, party-steps/s: "
          + " | ".join(f"{label} {rate(k * steps, seconds):.0f}" for label, seconds in best.items()))
    net = engines[KERNEL_VARIANTS[-1][0]].net
    history = torch.stack([net.layout(1 + 0.02 * torch.randn(config.batch_size, config.n_features, N_ASSETS,
                                                             config.window)) for _ in range(k)])
    theta = torch.tensor(np.stack([flat_parameters(build_network(config, s)) for s in range(k)]),
                         dtype=torch.float32, requires_grad=True)
    torch.set_num_threads(1)
    passes = {"forward": [], "backward": []}
    for _ in range(repeats + 1):
        start = time.perf_counter()
        maps = net.maps(theta, history)
        middle = time.perf_counter()
        maps.backward(torch.ones_like(maps))
        passes["forward"].append(middle - start)
        passes["backward"].append(time.perf_counter() - middle)
    print(f"  the trunk's kernels alone, one thread: forward {min(passes['forward'][1:]) / k * 1e3:.3f} ms, "
          f"backward {min(passes['backward'][1:]) / k * 1e3:.3f} ms per party-step")


def compare_implementations(config: AgentConfig, k: int) -> None:
    """One forward+backward of K parties: the engine's blocked products for several block sizes
    ``P`` (``P = W``: one banded product per window), grouped convolutions and ``vmap``."""
    from torch.func import functional_call, grad, vmap

    from portfed.agents.batched_networks import BatchedEIIECNN

    b, m, f, l_ = config.batch_size, N_ASSETS, config.n_features, config.window
    windows = 1.0 + 0.01 * torch.randn(b, f, m, l_)
    previous = torch.softmax(torch.randn(k, b, m), -1)
    theta = torch.stack([torch.as_tensor(flat_parameters(build_network(config, s)), dtype=torch.float32)
                         for s in range(k)]).requires_grad_(True)

    def blocked(block: int) -> Callable[[], None]:
        net = BatchedEIIECNN(config, block=block)
        history = net.layout(windows).expand(k, -1, -1, -1).contiguous()
        return lambda: torch.autograd.grad(net(theta, history, previous).log().sum(), theta) and None

    template = build_network(config, 0)
    stacked = {name: torch.stack([p.detach().clone()] * k) for name, p in template.named_parameters()}
    vmapped = vmap(grad(lambda params, x, prev: functional_call(template, params, (x, prev)).log().sum()))
    stacked_windows = windows.expand(k, -1, -1, -1, -1).contiguous()
    conv1 = torch.randn(k * config.conv_maps, f, 1, 3, requires_grad=True)
    conv2 = torch.randn(k * config.dense_maps, config.conv_maps, 1, l_ - 2, requires_grad=True)

    def grouped() -> None:
        x = stacked_windows.transpose(0, 1).reshape(b, k * f, m, l_) - 1.0
        h = torch.relu(torch.nn.functional.conv2d(x, conv1, groups=k))
        out = torch.relu(torch.nn.functional.conv2d(h, conv2, groups=k))
        torch.autograd.grad(out.sum(), (conv1, conv2))

    candidates = {f"blocked products, P = {p}{' (= W)' if p == l_ - 2 else ''}": blocked(p) for p in (1, 4, 7, 14, l_ - 2)}
    candidates["grouped conv2d (the convolutions only)"] = grouped
    candidates["vmap(grad(functional_call))"] = lambda: vmapped(stacked, stacked_windows, previous) and None
    print(f"\nforward+backward of K = {k} parties on {'/'.join(config.features)} (ms per step, best of 3 × 5):")
    for threads in THREADS:
        torch.set_num_threads(threads)
        for label, fn in candidates.items():
            fn()
            best = min(_timed(lambda fn=fn: [fn() for _ in range(5)], threads) for _ in range(3))
            print(f"  {threads} thread(s)  {label:<40} {best / 5 * 1e3:7.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few steps, one repeat and one round: a smoke run")
    parser.add_argument("--repeats", type=int, default=3, help="timings per engine and thread count (best kept)")
    parser.add_argument("--impls", action="store_true", help="also time the candidate batched implementations")
    parser.add_argument("--networks", nargs="+", default=["cnn", "rnn", "lstm"], choices=["cnn", "rnn", "lstm"],
                        help="the EIIEs to time (the round profile and the projections need cnn)")
    parser.add_argument("--learners", action="store_true", help="only time the direct and the actor-critic learner")
    parser.add_argument("--chunks", type=int, nargs="+", help="only time the recurrent networks' engine steps at "
                        "K = 50 for these numbers of parties per forward/backward pass")
    parser.add_argument("--kernels", action="store_true", help="only compare the ways of running the trunk "
                        "(PyTorch operations, the C kernels on Python threads or OpenMP) at K = 10 and 50, and time "
                        "the kernels alone")
    parser.add_argument("--profile", action="store_true", help="only profile one local call of each network at "
                        "K = 10 and 50 by part of the step (the full run prints these profiles at its end)")
    args = parser.parse_args()
    if args.kernels:
        for network, ohlc in [(n, n == "cnn") for n in args.networks]:
            for k in (10, 50):
                time_kernels(network, ohlc, k, steps=10 if args.quick else (40 if network == "cnn" else 10),
                             repeats=1 if args.quick else 3)
        return
    if args.profile:
        profile_steps(args.networks, 10 if args.quick else 50)
        return
    if args.chunks:
        for network in [n for n in ("rnn", "lstm") if n in args.networks]:
            time_chunks(network, 50, args.chunks)
        return
    ref_steps, batched_steps = (3, 5) if args.quick else (20, 50)
    repeats = 1 if args.quick else args.repeats
    if args.learners:
        print(f"CNN EIIE on close, {N_ASSETS} assets, window 30, batch 50, {TRAIN_DAYS} training days per party; "
              f"best of {repeats}")
        for k in (10, 50):
            time_learners(k, max(2, ref_steps // 4), max(2, batched_steps // 5), repeats)
        return
    print(f"{N_ASSETS} assets, window 30, batch 50, {TRAIN_DAYS} training days per party; "
          f"timed: {ref_steps} per-party and {batched_steps} batched steps per party, best of {repeats}; "
          f"{os.cpu_count()} CPUs")
    peak = {t: machine_gflops(t) for t in THREADS}
    print("the machine's float32 matrix products (torch.mm, n = 2048): "
          + ", ".join(f"{peak[t]:.0f} GFLOPS at {t} thread(s)" for t in THREADS))
    fast = {}
    for features in (("close",), ("close", "high", "low")) if "cnn" in args.networks else ():
        ohlc = len(features) > 1
        config = AgentConfig(features=features)
        d = flat_parameters(build_network(config, 0)).size
        print(f"\nCNN EIIE on {'/'.join(features)} ({d} parameters)")
        for k in (10, 50):
            fast[features, k] = time_engines(config, k, ohlc, ref_steps, batched_steps, repeats, peak)[1]
    for network in [n for n in ("rnn", "lstm") if n in args.networks]:
        config = AgentConfig(network=network)
        d = flat_parameters(build_network(config, 0)).size
        print(f"\n{network.upper()} EIIE on close ({d} parameters)")
        for k in (10, 50):
            fast[network, k] = time_engines(config, k, False, max(2, ref_steps // 4), max(2, batched_steps // 5),
                                            repeats, peak)[1]
    for network in [n for n in ("rnn", "lstm") if n in args.networks]:
        print(f"paper scale with the {network.upper()} EIIE (closes, K = 50): "
              f"{fmt_duration(PAPER_PARTY_STEPS / fast[network, 50])} per algorithm")
    if "cnn" not in args.networks:
        return
    torch.set_num_threads(2)
    paper = AgentConfig(features=("close", "high", "low"))
    profile_rounds(paper, 10 if args.quick else 50, True, 1 if args.quick else 3, 5 if args.quick else 50)
    if args.impls:
        compare_implementations(paper, 50)
    print(f"\nprojected federated training of configs/paper.yaml and configs/paper_bundled.yaml (800 rounds × 50 "
          f"parties × 50 local iterations = {PAPER_PARTY_STEPS:,} party-steps, closes) at the batched K = 50 rate: "
          f"{fmt_duration(PAPER_PARTY_STEPS / fast[('close',), 50])}; with close/high/low: "
          f"{fmt_duration(PAPER_PARTY_STEPS / fast[('close', 'high', 'low'), 50])} (network steps only; "
          "benchmarks/profile_paper_round.py measures whole rounds)")
    profile_steps(args.networks, 10 if args.quick else 50)
    print(f"batched K=50 party-steps/s (close/high/low, best of 1/2 threads): {fast[('close', 'high', 'low'), 50]:.0f}")


def profile_steps(networks: list[str], steps: int) -> None:
    """:func:`profile_step` for each network (the CNN on close/high/low, the recurrent ones on closes) at
    K = 10 and 50, two threads (on a machine busy with other work the times stretch, and two threads
    wait on each other: compare shares, not times)."""
    torch.set_num_threads(2)
    for network in networks:
        ohlc = network == "cnn"
        config = AgentConfig(network=network, features=("close", "high", "low") if ohlc else ("close",))
        label = f"{network.upper()} EIIE on {'/'.join(config.features)}"
        for k in (10, 50):
            profile_step(config, k, ohlc, steps, label)


if __name__ == "__main__":
    main()
