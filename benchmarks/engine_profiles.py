"""Where the batched engine's time goes, under cProfile (``bench_engine.py --profile`` and the end of a
full ``bench_engine.py`` run): whole federated rounds (:func:`profile_rounds`) and one local call by
part of the step (:func:`profile_step`, :data:`STEP_PARTS`), on :mod:`engine_workload`'s synthetic
parties.  Each part is the cumulative time of the functions that compute it, found by name and file.
"""

from __future__ import annotations

import cProfile
import dataclasses
import pstats
import time

import numpy as np
import torch
from engine_workload import rate, synthetic_panel

from portfed.agents import AgentConfig, build_network, flat_parameters
from portfed.agents.batched import BatchedDPGTrainer
from portfed.federation import CohortPlan, make_algorithm, run_rounds


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
        "batched local steps (forward, backward, Adam, PVM)": cumulative("run", "agents/batched_step.py"),
        "batch sampling (K generators, geometric inversion)": cumulative("sample_starts", "agents/sampler.py"),
        "step statistics (the round's per-party means)": cumulative("sums", "agents/records.py"),
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
                                                      ("with_penalties", "agents/objective.py", "run"),
                                                      ("penalty_gradient", "agents/objective.py", "run")],
    "backward pass (autograd)": [("grad", "torch/autograd/__init__.py")],
    "Adam step": [("adam_step", "agents/adam.py")],
    "Fed+ mix": [("fedplus_mix", "agents/")],
    "PVM writes": [("write_pvm", "agents/stacks.py")],
    "step statistics (per-party sums)": [("sums", "agents/records.py")],
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
