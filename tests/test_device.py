"""``agent.device``: ``auto`` picks CUDA when PyTorch sees it and the CPU otherwise.  (The CUDA path
itself is exercised only by ``benchmarks/bench_gpu.py`` on a machine that has one; CI has none, so no
test here claims it: the tests below check, on the CPU, that the batched engine does not sync with the
host step by step and that the GPU bench's code runs.)"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from portfed.agents import AgentConfig


def test_auto_resolves_to_cuda_when_present_else_cpu() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert AgentConfig().device == expected
    assert AgentConfig(device="auto").device == expected
    assert AgentConfig(device="cpu").device == "cpu"


def test_a_bad_device_is_named() -> None:
    with pytest.raises(ValueError, match=r"device 'gpu0' is not a torch device"):
        AgentConfig(device="gpu0")


def count_host_transfers(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count every way a tensor's data reaches the host (``cpu``, ``numpy``, ``item``, ``tolist``, Python
    scalars and truth values, ``to("cpu")``): on a GPU each is a synchronisation.  (Moves *to* the
    engine's device name a ``torch.device``, which on this CPU machine is also the host: they are
    uploads, not counted.)"""
    calls: dict[str, int] = {}

    def counted(name: str):
        original = getattr(torch.Tensor, name)

        def wrapper(self, *args, **kwargs):
            if name != "to" or "cpu" in [a for a in args if isinstance(a, str)] or kwargs.get("device") == "cpu":
                calls[name] = calls.get(name, 0) + 1
            return original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, wrapper)

    for name in ("cpu", "numpy", "item", "tolist", "__float__", "__int__", "__bool__", "to"):
        counted(name)
    return calls


@pytest.mark.parametrize("plan", ["plain", "fed_plus"])
def test_the_batched_engine_moves_data_to_the_host_once_per_call_not_per_step(monkeypatch, plan: str) -> None:
    """Nothing in a local-training call assumes CPU tensors step by step: parameters and step records
    stay on the engine's device during the E steps and come back to NumPy once, at the cohort's
    boundary (where the server step needs them), so the count of host transfers does not grow with E."""
    from engines import engines, train_plan

    counts = []
    for steps in (1, 12):
        _, engine = engines()
        start = engine.parameters()
        extra = {} if plan == "plain" else {"targets": start * 0.5, "sigmas": [100.0] * engine.n_parties}
        calls = count_host_transfers(monkeypatch)
        train_plan(engine, start, steps, **extra)
        monkeypatch.undo()
        counts.append(dict(calls))
    assert counts[0] == counts[1], f"host transfers grow with the local steps: E=1 {counts[0]}, E=12 {counts[1]}"
    assert counts[0].get("numpy", 0) >= 1  # the check sees the transfers that do happen


def count_uploads(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count every tensor made from host data (``torch.from_numpy``, ``torch.as_tensor``, ``torch.tensor``):
    on a GPU each such upload from pageable memory makes the host wait for the GPU's queue."""
    calls: dict[str, int] = {}

    def counted(name: str):
        original = getattr(torch, name)

        def wrapper(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            return original(*args, **kwargs)

        monkeypatch.setattr(torch, name, wrapper)

    for name in ("from_numpy", "as_tensor", "tensor"):
        counted(name)
    return calls


@pytest.mark.parametrize(("learner", "parties"), [("direct", None), ("direct", [2, 0]), ("actor_critic", None)])
def test_a_local_step_uploads_nothing_from_the_host(monkeypatch, learner: str, parties: list[int] | None) -> None:
    """A local-training call uploads its per-step inputs once — the batch starts' stack rows, the padding
    mask, Adam's bias corrections (``portfed.agents.batched_step.CallTables``) — so the count of uploads does not grow with E (every
    party running the same number of steps; a straggler's call indexes the live parties each step)."""
    from engines import CONFIG, engines, train_plan

    config = dataclasses.replace(CONFIG, learner=learner)
    counts = []
    for steps in (1, 12):
        _, engine = engines(config)
        start = engine.parameters() if parties is None else engine.parameters()[parties]
        calls = count_uploads(monkeypatch)
        train_plan(engine, start, steps, parties=parties, targets=start * 0.5,
                   sigmas=[100.0] * (engine.n_parties if parties is None else len(parties)))
        monkeypatch.undo()
        counts.append(dict(calls))
    assert counts[0] == counts[1], f"uploads grow with the local steps: E=1 {counts[0]}, E=12 {counts[1]}"
    assert sum(counts[0].values()) >= 3  # the check sees the uploads that do happen


@pytest.mark.extended  # CI's second stage (make test-extended): the GPU benchmark's code on the CPU (~12 s), kept out of make test's 10 minutes
def test_the_gpu_benchmark_runs_its_code_on_the_cpu() -> None:
    """``make bench``'s GPU section skips without CUDA; ``--device cpu`` runs the same measuring code, so
    the script is known to work before a GPU ever runs it."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu.py"
    result = subprocess.run([sys.executable, str(script), "--device", "cpu", "--parties", "2", "--steps", "1"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    for network in ("CNN", "RNN", "LSTM"):
        assert f"batched {network} engine on cpu, K =    2:" in result.stdout
    assert "party-steps/s" in result.stdout
