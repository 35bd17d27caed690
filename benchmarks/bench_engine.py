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
(``run_rounds`` over the engine as a cohort, fedavg+) and prints where their time goes
(``engine_profiles.py``; the synthetic workload and the yardsticks are ``engine_workload.py``).  ``--impls`` also times one
forward/backward pass of the candidate batched implementations.

The last line printed is the batched engine's party-steps per second at K = 50 on the paper shapes.

``--backends`` only times the engine on each backend (``agent.backend``: ``torch``, the PyTorch operations, and
``native``, the C kernels) side by side, every network, K = 10 and 50, at the best of 1 and 2 threads (the full run
prints the same table); without a C compiler the native column says why it is missing.

``--learners`` only times the two learners (``agent.learner``) of the CNN EIIE on closes, K = 10 and 50,
one thread: the batched engine's party-steps/s with the direct learner and with the actor-critic (actor,
critic and target networks: about twice the forward passes and three times the parameters), and the
actor-critic's per-party reference (``examples/ddpg_trainer.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from engine_profiles import profile_rounds, profile_steps
from engine_workload import (
    N_ASSETS,
    PAPER_PARTY_STEPS,
    THREADS,
    TRAIN_DAYS,
    fmt_duration,
    machine_gflops,
    max_rss_mib,
    party_step_flops,
    rate,
    rss_mib,
    share,
    synthetic_panel,
    timed,
)

from portfed.agents import AgentConfig, build_network, flat_parameters
from portfed.agents.batched import BatchedDPGTrainer
from portfed.agents.native import NativeBuildError
from portfed.federation import CohortPlan

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
from ddpg_trainer import DDPGTrainer  # noqa: E402  (the actor-critic's per-party reference)
from dpg_trainer import DPGTrainer  # noqa: E402  (the plain per-party reference, not part of the library)


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
        timed(lambda: [p.local_train(None, 2) for p in parties], threads)
        timed(lambda: batched.train(CohortPlan(round_index=0, parties=np.arange(k), steps=2, start=None)), threads)
    best = {(engine, t): np.inf for engine in ("per-party", "batched") for t in THREADS}
    for _ in range(repeats):
        for threads in THREADS:
            best["per-party", threads] = min(best["per-party", threads], timed(per_party, threads))
            best["batched", threads] = min(best["batched", threads], timed(all_at_once, threads))
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
            timed(lambda: run(2), threads)
            best = min(timed(lambda: run(steps), threads) for _ in range(repeats))
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
        timed(batched(engine, 2), 1)  # warm-up
    timed(per_party(1), 1)
    best = {name: min(timed(run, 1) for _ in range(repeats)) for name, (run, _) in runs.items()}
    rates = {name: rate(k * runs[name][1], seconds) for name, seconds in best.items()}
    sizes = f"actor {engines['direct'].n_parameters}, actor ⊕ critic {engines['actor_critic'].n_parameters} parameters"
    print(f"K = {k:>2} ({sizes}), 1 thread: " + " | ".join(f"{name} {value:.0f}" for name, value in rates.items())
          + f" party-steps/s; actor-critic / direct {rates['batched actor_critic'] / rates['batched direct']:.2f}")


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
        # the torch backend's day loops pick their own best number of parties per pass (batched_recurrent.py)
        try:
            engine = BatchedDPGTrainer(replace(config, backend="native" if kernels else "torch"), panels,
                                       list(range(k)))
        except NativeBuildError as error:
            raise SystemExit(f"--kernels needs the C kernels: {error}") from None
        if kernels:
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


def engine_rate(engine: BatchedDPGTrainer, k: int, steps: int, repeats: int) -> float:
    """Party-steps/s of ``engine``'s local calls of ``steps`` iterations of its ``k`` parties, at the best of
    :data:`THREADS` threads and ``repeats`` timings (after a warm-up, which builds the kernels)."""

    def run(n: int) -> None:
        engine.train(CohortPlan(round_index=0, parties=np.arange(k), steps=n, start=None))

    for threads in THREADS:
        timed(lambda: run(2), threads)
    return max(rate(k * steps, min(timed(lambda: run(steps), threads) for _ in range(repeats))) for threads in THREADS)


#: ``--backends``: the networks timed on each backend, as (network, close/high/low?).
BACKEND_WORKLOADS = (("cnn", False), ("cnn", True), ("rnn", False), ("lstm", False))


def time_backends(networks: list[str], steps: dict[str, int], repeats: int) -> None:
    """Party-steps/s of the engine with ``agent.backend: torch`` and ``native`` side by side (best of
    :data:`THREADS` threads and ``repeats`` timings, alternating in this process), for each network of
    :data:`BACKEND_WORKLOADS` in ``networks`` and K = 10 and 50; ``steps``: local iterations per timing."""
    print("\nthe engine on each backend (agent.backend), party-steps/s at the best of "
          f"{'/'.join(map(str, THREADS))} threads, best of {repeats}:")
    print(f"  {'network':<22} {'K':>3} {'torch':>9} {'native':>9}  native / torch")
    for network, ohlc in [(n, o) for n, o in BACKEND_WORKLOADS if n in networks]:
        config = AgentConfig(network=network, features=("close", "high", "low") if ohlc else ("close",))
        for k in (10, 50):
            panels = [synthetic_panel(seed, ohlc) for seed in range(k)]
            engines: dict[str, BatchedDPGTrainer | str] = {}
            for backend in ("torch", "native"):
                try:
                    engines[backend] = BatchedDPGTrainer(replace(config, backend=backend), panels, list(range(k)))
                except NativeBuildError as error:
                    engines[backend] = f"unavailable: {str(error)[:60]}"
            rates = {backend: engine_rate(engine, k, steps[network], repeats) for backend, engine in engines.items()
                     if not isinstance(engine, str)}
            name = f"{network.upper()} on {'close/high/low' if ohlc else 'close'}"
            native = f"{rates['native']:9.0f}  {rates['native'] / rates['torch']:.2f}×" if "native" in rates \
                else f"{'—':>9}  ({engines['native']})"
            print(f"  {name:<22} {k:>3} {rates['torch']:9.0f} {native}")


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
            best = min(timed(lambda fn=fn: [fn() for _ in range(5)], threads) for _ in range(3))
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
    parser.add_argument("--backends", action="store_true", help="only time the engine on the torch and the native "
                        "backend side by side (every network, K = 10 and 50)")
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
    backend_steps = {"cnn": 3, "rnn": 2, "lstm": 2} if args.quick else {"cnn": 40, "rnn": 10, "lstm": 5}
    if args.backends:
        time_backends(args.networks, backend_steps, 1 if args.quick else args.repeats)
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
    time_backends(args.networks, backend_steps, repeats)
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


if __name__ == "__main__":
    main()
