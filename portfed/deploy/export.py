"""A party's deployed policy as a file a desk runs with plain torch (and, optionally, ONNX Runtime).

``policy.pt`` is a TorchScript module (traced from the EIIE network, the party's deployed
parameters inside) with the signature ``policy(history, current) → weights``:

* ``history``: float32 ``(batch, features, assets, window)``, the normalized price window of
  :func:`portfed.envs.windows.price_windows` — ``history[b, f, i, j] = price_f[t − window + 1 + j, i] /
  close[t, i]`` for the day ``t`` of the decision, assets in the order of ``tickers``;
* ``current``: float32 ``(batch, assets + 1)``, the portfolio held (cash first);
* ``weights``: float32 ``(batch, assets + 1)``, the target portfolio for the next trading day
  (cash first, summing to 1 up to float32 round-off).

``policy.json`` says everything needed to feed it: the tickers in order, window, features,
``input_scale`` (``centred``: the model subtracts 1 from ``history`` itself; ``raw``: it reads the
ratios as they are — either way a desk feeds the normalized window as above), commission and cost model of the backtest, the agent's
risk limits (``agent.max_weight`` / ``max_turnover``: portfed projects the network's output onto them,
:mod:`portfed.agents.limits`; the exported files hold the network alone), the algorithm, party and run.
``policy.onnx`` (with ``onnx=True``; needs the ``onnx`` extra) has the same inputs and output, its weights
inside the one file (it runs when copied alone).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from portfed._io import atomic_path, atomic_write_bytes, atomic_write_text
from portfed.agents.networks import EIIENetwork
from portfed.deploy.errors import TargetWeightsError
from portfed.deploy.trained import TrainedParty
from portfed.envs.windows import price_windows
from portfed.experiment.party import CASH

#: Version of the layout of ``policy.json``.
FORMAT = "portfed-policy/1"


class DeskPolicy(nn.Module):
    """``(history, current) → weights``: the EIIE network with the cash-first portfolio as its input."""

    def __init__(self, net: EIIENetwork) -> None:
        super().__init__()
        self.net = net

    def forward(self, history: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
        return self.net(history, current[:, 1:])


def _example(trained: TrainedParty) -> tuple[torch.Tensor, torch.Tensor]:
    """A window of the party's own training prices and an all-cash portfolio, to trace with."""
    agent = trained.agent
    panel = trained.market.panel.select(list(trained.tickers)).select_features(agent.features)
    history = price_windows(panel.values, agent.window - 1, agent.window)
    current = np.zeros(len(trained.tickers) + 1, dtype=np.float32)
    current[0] = 1.0
    return torch.from_numpy(history).unsqueeze(0), torch.from_numpy(current).unsqueeze(0)


def policy_spec(trained: TrainedParty, files: dict[str, str]) -> dict[str, object]:
    """The content of ``policy.json`` (module docstring)."""
    agent = trained.agent
    return {
        "format": FORMAT,
        "files": files,
        "algorithm": trained.algorithm,
        "party": trained.party,
        "run_dir": str(trained.run_dir),
        "network": agent.network,
        "tickers": list(trained.tickers),
        "assets": [CASH, *trained.tickers],
        "window": agent.window,
        "features": list(agent.features),
        "input_scale": trained.input_scale,
        "commission": agent.commission,
        "risk_limits": {"max_weight": agent.max_weight, "max_turnover": agent.max_turnover,
                        "note": "applied to the model's output by portfed (portfed.agents.limits); not inside "
                                "policy.pt / policy.onnx"},
        "cost_model": trained.config.evaluation.cost_model,
        "trained_through": str(trained.market.train_end.date()),
        "inputs": {
            "history": "float32 (batch, features, assets, window): history[b, f, i, j] = "
                       "price[feature f][t - window + 1 + j, asset i] / close[t, asset i], t the decision day",
            "current": "float32 (batch, assets + 1): the portfolio held, cash first, summing to 1",
        },
        "output": "float32 (batch, assets + 1): the target portfolio for the next trading day, cash first",
    }


def export_policy(trained: TrainedParty, out_dir: str | Path, onnx: bool = False) -> dict[str, Path]:
    """Write ``policy.pt``, ``policy.json`` and (``onnx``) ``policy.onnx`` into ``out_dir``; returns their paths.

    Raises:
        ImportError: ``onnx=True`` without the ``onnx`` extra (``pip install 'portfed[onnx]'``).
        TargetWeightsError: the deployed parameters are not finite (nothing is written).
    """
    params = trained.params
    if not (np.isfinite(params).all() and np.abs(params).max(initial=0.0) <= np.finfo(np.float32).max):
        raise TargetWeightsError(f"party {trained.party}'s deployed {trained.algorithm} model has parameters that "
                                 "are not finite as the network's float32 (they blew up): nothing exported")
    out = Path(out_dir)
    module = DeskPolicy(trained.network()).eval().requires_grad_(False)  # a desk needs no autograd
    example = _example(trained)
    paths: dict[str, Path] = {}
    with torch.no_grad(), warnings.catch_warnings():
        # The tracer warns that the network's input-shape checks become constants: they are checks of
        # the party's fixed (features, assets, window); the batch size stays free (tested).
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(module, example)
    with atomic_path(out / "policy.pt") as tmp:
        torch.jit.save(traced, str(tmp))
    paths["torchscript"] = out / "policy.pt"
    if onnx:
        paths["onnx"] = _export_onnx(module, example, out / "policy.onnx")
    spec = policy_spec(trained, {kind: path.name for kind, path in paths.items()})
    paths["spec"] = atomic_write_text(out / "policy.json", json.dumps(spec, indent=2, allow_nan=False) + "\n")
    return paths


def _export_onnx(module: nn.Module, example: tuple[torch.Tensor, torch.Tensor], path: Path) -> Path:
    """``policy.onnx``, one self-contained file: the weights are stored inside the model (the EIIE is a few
    thousand parameters, far below protobuf's 2 GB limit), never in an external ``.data`` file beside it."""
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as exc:
        raise ImportError("ONNX export needs the onnx extra: pip install 'portfed[onnx]'") from exc
    batch = torch.export.Dim("batch")
    program = torch.onnx.export(module, example, None, input_names=["history", "current"], output_names=["weights"],
                                dynamic_shapes=({0: batch}, {0: batch}), dynamo=True, verbose=False)
    return atomic_write_bytes(path, program.model_proto.SerializeToString())
