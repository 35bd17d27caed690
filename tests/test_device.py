"""``agent.device``: ``auto`` picks CUDA when PyTorch sees it and the CPU otherwise.  (The CUDA path
itself is exercised only by ``benchmarks/bench_gpu.py`` on a machine that has one; CI has none, so no
test here claims it.)"""

from __future__ import annotations

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
        extra = {} if plan == "plain" else {"mix_targets": start * 0.5, "kappas": [0.9] * engine.n_parties}
        calls = count_host_transfers(monkeypatch)
        train_plan(engine, start, steps, **extra)
        monkeypatch.undo()
        counts.append(dict(calls))
    assert counts[0] == counts[1], f"host transfers grow with the local steps: E=1 {counts[0]}, E=12 {counts[1]}"
    assert counts[0].get("numpy", 0) >= 1  # the check sees the transfers that do happen
