"""``agent.device``: ``auto`` picks CUDA when PyTorch sees it and the CPU otherwise; both engines train
the same numbers whichever way the CPU was named.  (The CUDA path itself is measured by
``benchmarks/bench_gpu.py`` on a machine that has one; CI has none.)"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from portfed.agents import AgentConfig, DPGTrainer
from portfed.agents.batched import BatchedDPGTrainer
from portfed.data.panel import PricePanel
from portfed.federation import CohortPlan

CONFIG = AgentConfig(window=10, batch_size=8, learning_rate=1e-3, beta=0.05)


def _panel(seed: int) -> PricePanel:
    rng = np.random.default_rng(seed)
    close = 100 * np.exp(np.cumsum(0.02 * rng.standard_normal((120, 3)), axis=0))
    return PricePanel(close[:, :, None], pd.bdate_range("2020-01-01", periods=120), ("A", "B", "C"), ("close",))


def test_auto_resolves_to_cuda_when_present_else_cpu() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert AgentConfig().device == expected
    assert AgentConfig(device="auto").device == expected
    assert AgentConfig(device="cpu").device == "cpu"


def test_a_bad_device_is_named() -> None:
    with pytest.raises(ValueError, match=r"device 'gpu0' is not a torch device"):
        AgentConfig(device="gpu0")


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto is the CPU only where there is no CUDA")
def test_auto_and_cpu_train_the_same_numbers_on_both_engines() -> None:
    auto, cpu = CONFIG, dataclasses.replace(CONFIG, device="cpu")
    a, b = DPGTrainer(auto, _panel(0), seed=0), DPGTrainer(cpu, _panel(0), seed=0)
    np.testing.assert_array_equal(a.local_train(None, 3).params, b.local_train(None, 3).params)
    panels = [_panel(1), _panel(2)]
    plan = CohortPlan(round_index=0, parties=np.arange(2), steps=3, start=None)
    x = BatchedDPGTrainer(auto, panels, [0, 1]).train(plan)
    y = BatchedDPGTrainer(cpu, panels, [0, 1]).train(plan)
    np.testing.assert_array_equal(x.params, y.params)
