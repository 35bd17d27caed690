"""Differential privacy on the Flower engine: the same noisy runs as in-process (the mechanism sits in the round
loop both engines share), on the loopback grid of tests/flower_loopback.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

pytest.importorskip("flwr")

from flower_loopback import LoopbackGrid  # noqa: E402

from portfed.experiment.config import load_config  # noqa: E402
from portfed.experiment.studies import compare  # noqa: E402
from portfed.flower.cohort import FlowerSettings  # noqa: E402
from portfed.flower.node import PartyNode  # noqa: E402
from portfed.flower.server import serve  # noqa: E402

ROOT = Path(__file__).parents[1]
FAST = FlowerSettings(poll_interval=0.001, reply_timeout=1.0, query_timeout=1.0, join_timeout=1.0)
#: One-party engines on the nodes, one K-party engine in process: float32 round-off apart (test_flower_engine).
ROUND_OFF = {"atol": 1e-6, "rtol": 0}


@pytest.mark.parametrize(("mode", "algorithm"), [("central", "fedavg"), ("local", "fedcomed+")])
def test_a_private_flower_run_equals_the_private_in_process_run(tmp_path: Path, mode: str, algorithm: str) -> None:
    raw = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    raw["federation"].update({"rounds": 2, "local_steps": 3, "algorithms": [algorithm], "checkpoint_every": 2})
    raw["diagnostics"]["interpolation_rounds"] = []
    raw["privacy"] = {"clip": 0.5, "noise_multiplier": 1.0, "mode": mode}
    path = tmp_path / "private.yaml"
    path.write_text(yaml.safe_dump(raw))
    config = load_config(path)
    compare(config, tmp_path / "in_process", progress=False, n_jobs=1)
    grid = LoopbackGrid({1000 + k: PartyNode(config, k, tmp_path / f"node_{k}") for k in range(config.parties.count)})
    serve(grid, str(path), str(tmp_path / "flower"), settings=FAST)
    a = np.load(tmp_path / "in_process" / algorithm / "models.npz")
    b = np.load(tmp_path / "flower" / algorithm / "models.npz")
    for key in ("party_models", "global_model", "deployed"):
        np.testing.assert_allclose(a[key], b[key], err_msg=key, **ROUND_OFF)
    rounds = pd.read_csv(tmp_path / "flower" / algorithm / "rounds.csv")
    assert rounds["epsilon"].tolist() == pd.read_csv(tmp_path / "in_process" / algorithm / "rounds.csv")["epsilon"].tolist()
    assert (rounds["epsilon"] > 0).all()
    # the noise reached the model: a run without privacy ends elsewhere
    del raw["privacy"]
    path.write_text(yaml.safe_dump(raw))
    compare(load_config(path), tmp_path / "plain", progress=False, n_jobs=1)
    plain = np.load(tmp_path / "plain" / algorithm / "models.npz")["global_model"]
    assert not np.allclose(plain, a["global_model"], atol=1e-3)
