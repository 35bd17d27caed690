"""The batched engine on a CUDA device, eager and captured side by side: party-steps/s, launches and kernels per step.

Usage: ``.venv/bin/python benchmarks/bench_gpu.py [--steps 50] [--parties 50 1000] [--networks cnn rnn lstm]
[--captures none compile cuda_graph] [--device cuda]``.  On a machine without CUDA it says so and exits 0
(``make bench`` runs it everywhere; CI and the 2-core machine have no GPU).  ``--device cpu --parties 2
--steps 1`` runs the measuring code on the CPU in seconds (``tests/test_device.py``); ``--device cpu --quick``
is the CPU smoke check of the captured path: K = 4, 5 steps, window 10, the CNN and the RNN, eager against
``capture: compile`` (inductor's C++; minutes, most of it compiling).  ``benchmarks/gpu_checks.sh`` runs it
on CUDA.

Same shapes as ``bench_engine.py`` (but ``--quick``): 9 assets, window 30, batch 50, 3,000 training days per
party of seeded correlated GBM; the CNN on close/high/low, the recurrent EIIEs on closes.  Each row: one
warm-up call of ``--steps`` steps (it compiles and records the captured step), then the best of three timed
``BatchedDPGTrainer.train`` calls of ``--steps`` local iterations per party, synchronized.  ``capture`` is
``agent.capture`` (:mod:`portfed.agents.captured`): ``none`` the eager step, ``compile`` ``torch.compile``
(``reduce-overhead`` on CUDA), ``cuda_graph`` one recorded ``torch.cuda.CUDAGraph`` per step; every row runs
``agent.backend: torch``, so that the eager row is the PyTorch step the captured rows record.

On CUDA each row also gets a profile of one call (``torch.profiler``): the host's launches per local step
(``cudaLaunchKernel`` and the like, a graph replay counting one), the GPU kernels run per step and the
share of the step's wall time the GPU spends in them.  The issue's targets on one H100/H200 (CNN K = 50
≥ 100,000 party-steps/s, K = 1,000 ≥ 1,000,000; RNN K = 50 ≥ 50,000) are printed beside their rows.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_workload import PAPER_PARTY_STEPS, fmt_duration, synthetic_panel  # noqa: E402

from portfed.agents import AgentConfig  # noqa: E402
from portfed.agents.batched import BatchedDPGTrainer  # noqa: E402
from portfed.data.panel import PricePanel  # noqa: E402
from portfed.federation import CohortPlan  # noqa: E402

#: party-steps/s on one H100/H200 that issue 50 asks of the GPU path, by (network, K).
TARGETS = {("cnn", 50): 100_000, ("cnn", 1000): 1_000_000, ("rnn", 50): 50_000}
#: Host calls that launch work on the GPU, as torch.profiler names them (a graph replay is one).
LAUNCHES = ("LaunchKernel", "GraphLaunch", "LaunchCooperativeKernel")


def synchronize(device: str) -> None:
    """Wait for the device's queued kernels (CUDA launches return before the work is done)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def config_for(network: str, device: str, capture: str = "none", window: int = 30) -> AgentConfig:
    """The CNN on close/high/low, the recurrent EIIEs on closes; ``agent.backend: torch`` in every row, so that
    the eager row is the PyTorch step the captured rows record (on the CPU ``auto`` would pick the C kernels
    for it: ``bench_engine.py --backends`` compares those)."""
    features = ("close", "high", "low") if network == "cnn" else ("close",)
    return AgentConfig(network=network, features=features, device=device, backend="torch", capture=capture,
                       window=window)


def engine_for(network: str, k: int, device: str, capture: str = "none", window: int = 30,
               panels: list[PricePanel] | None = None) -> BatchedDPGTrainer:
    """``k`` parties of ``network`` (:func:`config_for`) on ``panels`` (default: seeds ``0 … k − 1``)."""
    panels = panels or [synthetic_panel(seed, network == "cnn") for seed in range(k)]
    return BatchedDPGTrainer(config_for(network, device, capture, window), panels, list(range(k)))


def timed_call(engine: BatchedDPGTrainer, steps: int, device: str) -> float:
    """Seconds of one ``steps``-step local call of every party, synchronized."""
    k = engine.n_parties
    synchronize(device)
    start = time.perf_counter()
    engine.train(CohortPlan(round_index=0, parties=np.arange(k), steps=np.full(k, steps), start=None))
    synchronize(device)
    return time.perf_counter() - start


def measured_rate(engine: BatchedDPGTrainer, steps: int, device: str) -> tuple[float, float]:
    """``(party-steps/s, seconds of the warm-up call)``: one warm-up call (compiling and recording a captured
    step), then the best of three ``steps``-step calls."""
    warm_up = timed_call(engine, steps, device)
    return engine.n_parties * steps / min(timed_call(engine, steps, device) for _ in range(3)), warm_up


def kernel_profile(engine: BatchedDPGTrainer, steps: int) -> tuple[float, float, float]:
    """``(launches per step, kernels per step, GPU-busy share of the wall time)`` of one ``steps``-step call
    under ``torch.profiler`` (the profiler's own overhead lengthens the wall time a little)."""
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profile:
        wall = timed_call(engine, steps, "cuda")
    events = profile.events()
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    launches = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU
                and any(name in e.name for name in LAUNCHES)]
    busy = sum(e.time_range.elapsed_us() for e in kernels) * 1e-6
    return len(launches) / steps, len(kernels) / steps, busy / wall


def row(network: str, k: int, capture: str, rate: float, eager: float | None, device: str, warm_up: float) -> str:
    line = (f"batched {network.upper()} engine on {device}, K = {k:>4}: capture {capture:<10} {rate:,.0f} party-steps/s "
            f"({1e3 * k / rate:.2f} ms per step"
            + ("" if eager is None else f", {rate / eager:.2f}× eager") + f"; first call {warm_up:.1f} s); "
            f"the paper's 2M party-steps would take {fmt_duration(PAPER_PARTY_STEPS / rate)}")
    target = TARGETS.get((network, k))
    if device.startswith("cuda") and target is not None:
        line += f"; target ≥ {target:,}: {'met' if rate >= target else 'NOT met'} on this device"
    return line


def measure(network: str, k: int, steps: int, device: str, captures: list[str], window: int) -> None:
    """One row per capture mode, on the same parties' panels."""
    cuda = device.startswith("cuda")
    panels = [synthetic_panel(seed, network == "cnn") for seed in range(k)]
    eager = None
    for capture in captures:
        engine = engine_for(network, k, device, capture, window, panels)
        rate, warm_up = measured_rate(engine, steps, device)
        eager = rate if capture == "none" else eager
        line = row(network, k, capture, rate, eager if capture != "none" else None, device, warm_up)
        if cuda:
            launches, kernels, busy = kernel_profile(engine, min(steps, 10))
            line += f"; {launches:.0f} launches, {kernels:.0f} kernels per step, GPU busy {100 * busy:.0f} % of the step"
        print(line, flush=True)
        del engine
        if cuda:
            torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50, help="local iterations per party per timed call")
    parser.add_argument("--parties", type=int, nargs="+", default=[50, 1000], help="the K to measure")
    parser.add_argument("--networks", nargs="+", default=["cnn", "rnn", "lstm"], choices=["cnn", "rnn", "lstm"])
    parser.add_argument("--captures", nargs="+", choices=["none", "compile", "cuda_graph"],
                        help="agent.capture modes side by side (default: all three on CUDA, none on the CPU)")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu, to check the script itself")
    parser.add_argument("--quick", action="store_true",
                        help="the CPU smoke check: K = 4, 5 steps, window 10, CNN and RNN, eager and compile")
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    window = 30
    if args.quick:
        args.parties, args.steps, args.networks, window = [4], 5, ["cnn", "rnn"], 10
        args.captures = args.captures or ["none", "compile"]
    # cuda_graph before compile: its recording takes a few eager steps, compile's minutes
    captures = args.captures or (["none", "cuda_graph", "compile"] if cuda else ["none"])
    if cuda:
        if not torch.cuda.is_available():
            print("no CUDA device: the GPU section is skipped (agent.device: auto trains on the CPU here)")
            return
        print(f"CUDA device: {torch.cuda.get_device_name(0)}, PyTorch {torch.__version__}")
    elif "cuda_graph" in captures:
        parser.error("capture cuda_graph needs --device cuda")
    else:
        print(f"CPU, {torch.get_num_threads()} threads, PyTorch {torch.__version__}; the eager step (capture none) "
              "runs PyTorch operations (agent.backend: torch)")
    for network in args.networks:
        for k in args.parties:
            measure(network, k, args.steps, args.device, captures, window)


if __name__ == "__main__":
    main()

