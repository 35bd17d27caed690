"""Test-session settings shared by every test module."""

import sys
from pathlib import Path

import matplotlib
import torch

# The plain per-party DPG trainer (examples/dpg_trainer.py) is the engine tests' reference.
sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))

# Tiny networks: intra-op threads only add overhead (and contention on CI's 2 cores).
torch.set_num_threads(1)
matplotlib.use("Agg")
