"""EIIE policy networks (Jiang, Xu & Liang 2017, §5; DESIGN.md §3) and flat-parameter exchange.

An Ensemble of Identical Independent Evaluators scores every asset with the *same* weights from
that asset's own normalized window and its previous weight, then a softmax over the scores and a
learnable cash bias gives the portfolio ``w_t`` (m + 1 entries, cash first).  Because nothing in
the network depends on the number or identity of assets, a model transfers across universes of
equal size — which is what makes federating it meaningful.

Inputs: ``history`` of shape ``(B, F, m, l)`` (features × assets × window, divided by the latest
close; :func:`portfed.envs.windows.price_windows`) and ``previous`` of shape ``(B, m)``, the
non-cash part of ``w_{t−1}``.  Output: ``(B, m + 1)`` weights on the simplex.

The evaluators read ``history − input_offset``: ``input_offset = 1`` (``input_scale: centred``, the
default; a flat window is 0) or 0 (``raw``, the price ratios of paper 000 §8.2 and Jiang et al.'s
code).  Centring is an affine reparametrization of the first layer — a network reading raw ratios
with first-layer bias ``b`` computes what the centred one computes with bias ``b + Σ W`` (the sum of
the kernel: for the CNN over features and taps, for the recurrent nets over the input features of
``W_ih``) — so the function class is exactly the paper's, but the units start in their active range.
On raw inputs ≈ 1 a first-layer unit's sign is set by its weights and bias alone, nearly the same
for every window, so both ReLU maps of the CNN can be dead from the start (it happened for seed 0
under PyTorch's default initialization) and learning never starts.

The federation layer sees a model only as one flat float64 vector.  Its order is
``net.named_parameters()`` order — the layers from input to output, each layer's ``weight`` before
its ``bias`` (for the recurrent nets: PyTorch's ``weight_ih_l0, weight_hh_l0, bias_ih_l0,
bias_hh_l0``), the cash bias last — with each tensor flattened in C order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import torch
from torch import nn

from portfed.agents.config import AgentConfig


class CashBias(nn.Module):
    """The learnable cash score prepended before the softmax (initialized at 0, as in PGPortfolio)."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1))


class EIIENetwork(nn.Module, ABC):
    """Shared head of every EIIE: per-asset maps → weights.

    For asset ``i`` with maps ``h_i ∈ R^K`` (computed from its window ``X_i − input_offset``) and
    previous weight ``w_{t−1,i}``, the score is the ``1 × 1`` convolution
    ``s_i = a · [h_i, w_{t−1,i}] + b`` (one linear unit shared by all assets), and ``w_t = softmax([s_0, s_1, …, s_m])`` with ``s_0`` the cash bias.  Subclasses register
    their feature layers first (so the flat order runs from input to output), then call
    :meth:`_build_head`, and implement :meth:`asset_maps`.
    """

    n_features: int
    #: subtracted from every window entry: 1 (centred) or 0 (raw ratios); module docstring.
    input_offset: float = 1.0

    def _build_head(self, n_maps: int) -> None:
        self.score = nn.Linear(n_maps + 1, 1)
        self.cash = CashBias()
        _uniform_scaling_(self.score)

    @abstractmethod
    def asset_maps(self, history: torch.Tensor) -> torch.Tensor:
        """``(B, F, m, l)`` windows less ``input_offset`` → ``(B, m, K)`` per-asset maps."""

    def forward(self, history: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        if history.ndim != 4 or history.shape[1] != self.n_features:
            raise ValueError(
                f"history must have shape (batch, {self.n_features} features, assets, window), "
                f"got {tuple(history.shape)}"
            )
        batch, _, m, _ = history.shape
        if previous.shape != (batch, m):
            raise ValueError(
                f"previous weights must have shape (batch={batch}, assets={m}) without cash, "
                f"got {tuple(previous.shape)}"
            )
        maps = self.asset_maps(history - self.input_offset if self.input_offset else history)
        scores = self.score(torch.cat([maps, previous.unsqueeze(-1)], dim=-1)).squeeze(-1)  # (B, m)
        cash = self.cash.bias.expand(batch, 1)
        return torch.softmax(torch.cat([cash, scores], dim=-1), dim=-1)


class EIIECNN(EIIENetwork):
    """CNN EIIE (Jiang et al. 2017, Fig. 2): conv ``1×3`` → ReLU → conv ``1×(l−2)`` → ReLU → head.

    Both convolutions have kernel height 1, so each asset row is processed by the same filters
    independently.  With ``F = 3``, ``l = 30`` and the paper's 2 and 20 maps the network has
    ``3·2·3 + 2 + 2·20·28 + 20 + 21 + 1 + 1 = 1183`` parameters, whatever ``m``.
    """

    def __init__(self, n_features: int, window: int, conv_maps: int = 2, dense_maps: int = 20) -> None:
        super().__init__()
        if window < 3:
            raise ValueError(f"the CNN EIIE needs window >= 3 (second kernel is 1 × (window − 2)), got {window}")
        self.n_features = n_features
        self.window = window
        self.conv1 = nn.Conv2d(n_features, conv_maps, kernel_size=(1, 3))
        self.conv2 = nn.Conv2d(conv_maps, dense_maps, kernel_size=(1, window - 2))
        _uniform_scaling_(self.conv1)
        _uniform_scaling_(self.conv2)
        self._build_head(dense_maps)

    def asset_maps(self, history: torch.Tensor) -> torch.Tensor:
        if history.shape[-1] != self.window:
            raise ValueError(f"history window must be {self.window} days, got {history.shape[-1]}")
        hidden = torch.relu(self.conv1(history))  # (B, conv_maps, m, l − 2)
        # A 1 × (l − 2) kernel over an (l − 2)-wide row is one dot product per asset: apply conv2
        # as that matrix product (same parameters, same result, a ~35 % faster training step on CPU).
        batch, maps, m, width = hidden.shape
        rows = hidden.transpose(1, 2).reshape(batch, m, maps * width)
        kernel = self.conv2.weight.reshape(self.conv2.out_channels, maps * width)
        return torch.relu(nn.functional.linear(rows, kernel, self.conv2.bias))  # (B, m, dense_maps)


class EIIERecurrent(EIIENetwork):
    """RNN / LSTM EIIE: one recurrent net, shared by all assets, reads each asset's window.

    The assets are folded into the batch — ``(B, F, m, l) → (B·m, l, F)`` — so a single call runs
    the shared evaluator over every asset; the last hidden state ``h_l ∈ R^H`` is the asset's map.
    Elman RNN: ``h_j = tanh(W_ih x_j + b_ih + W_hh h_{j−1} + b_hh)``; LSTM: PyTorch's gates.
    """

    def __init__(self, n_features: int, hidden_size: int = 20, cell: str = "lstm") -> None:
        super().__init__()
        cells = {"rnn": nn.RNN, "lstm": nn.LSTM}
        if cell not in cells:
            raise ValueError(f"cell must be one of {sorted(cells)}, got {cell!r}")
        self.n_features = n_features
        self.cell = cell
        self.recurrent = cells[cell](input_size=n_features, hidden_size=hidden_size, batch_first=True)
        for name, p in self.recurrent.named_parameters():
            if name.startswith("weight"):
                nn.init.xavier_uniform_(p)
            else:
                nn.init.zeros_(p)
        if cell == "lstm":
            with torch.no_grad():  # PyTorch gate order (i, f, g, o): the forget gate starts open
                self.recurrent.bias_ih_l0[hidden_size : 2 * hidden_size] = 1.0
        self._build_head(hidden_size)

    def asset_maps(self, history: torch.Tensor) -> torch.Tensor:
        batch, n_features, m, window = history.shape
        sequences = history.permute(0, 2, 3, 1).reshape(batch * m, window, n_features)
        outputs, _ = self.recurrent(sequences)
        return outputs[:, -1, :].reshape(batch, m, -1)


def _uniform_scaling_(layer: nn.Conv2d | nn.Linear) -> None:
    """tflearn's ``uniform_scaling`` weights ``U(±√(3 / fan_in))`` and zero bias (PGPortfolio's layers)."""
    fan_in = layer.weight[0].numel()
    bound = float(np.sqrt(3.0 / fan_in))
    nn.init.uniform_(layer.weight, -bound, bound)
    nn.init.zeros_(layer.bias)


def build_network(config: AgentConfig, seed: int) -> EIIENetwork:
    """The network named by ``config.network``, initialized reproducibly from ``seed``.

    Initialization follows PGPortfolio (tflearn / TensorFlow 1 defaults): convolution and score
    weights ``U(±√(3 / fan_in))``, recurrent weights Glorot-uniform, every bias 0 except the LSTM
    forget gate (1, tflearn's ``forget_bias``), cash bias 0.  Zero biases on the centred input
    keep every ReLU alive for half of the windows; PyTorch's random biases, which dwarf the
    ~1 % variations of a window, can switch both first-layer maps off for good.  The initial
    parameters do not depend on ``config.input_scale`` (only what the network subtracts does), so
    the two scales start from the same weights.

    The initializers draw from the global generator inside :func:`torch.random.fork_rng`, so the
    global state the caller sees is left untouched.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if config.network == "cnn":
            net: EIIENetwork = EIIECNN(config.n_features, config.window, config.conv_maps, config.dense_maps)
        else:
            net = EIIERecurrent(config.n_features, config.hidden_size, cell=config.network)
    net.input_offset = config.input_offset
    return net.to(config.device)


# ---------------------------------------------------------------------- parameter exchange
def parameter_count(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


def flat_parameters(net: nn.Module) -> np.ndarray:
    """All parameters as one float64 vector (a copy), in ``named_parameters()`` order."""
    return torch.cat([p.detach().reshape(-1).to("cpu", torch.float64) for p in net.parameters()]).numpy()


def set_flat_parameters(net: nn.Module, vector: np.ndarray) -> None:
    """Load a vector produced by :func:`flat_parameters` (cast to the parameters' dtype) in place."""
    vector = np.asarray(vector)
    expected = parameter_count(net)
    if vector.ndim != 1 or vector.size != expected:
        raise ValueError(f"parameter vector has shape {vector.shape}; this network needs ({expected},)")
    if not np.all(np.isfinite(vector)):
        raise ValueError(f"parameter vector has non-finite entries at {np.flatnonzero(~np.isfinite(vector))[:5]}")
    source = torch.from_numpy(np.ascontiguousarray(vector))
    offset = 0
    with torch.no_grad():
        for p in net.parameters():
            n = p.numel()
            p.copy_(source[offset : offset + n].view_as(p))
            offset += n


def layer_slices(net: nn.Module) -> dict[str, slice]:
    """Named layers → their slice of the flat vector, for layer-wise federation (paper 000 eq. 14).

    A layer is the module that owns the parameters: ``conv1``, ``conv2``, ``score``, ``cash`` for
    the CNN; ``recurrent``, ``score``, ``cash`` for the RNN / LSTM.
    """
    slices: dict[str, slice] = {}
    offset = 0
    for name, p in net.named_parameters():
        layer = name.rsplit(".", 1)[0]
        start = slices[layer].start if layer in slices else offset
        if layer in slices and slices[layer].stop != offset:
            raise ValueError(f"parameters of layer {layer!r} are not contiguous in the flat order")
        offset += p.numel()
        slices[layer] = slice(start, offset)
    return slices


def layer_arrays(net: nn.Module) -> dict[str, np.ndarray]:
    """The flat vector split by :func:`layer_slices` (float64 copies)."""
    flat = flat_parameters(net)
    return {layer: flat[s].copy() for layer, s in layer_slices(net).items()}


def set_layer_arrays(net: nn.Module, arrays: dict[str, np.ndarray]) -> None:
    """Load the dict form of :func:`layer_arrays`; every layer must be present with its exact size."""
    slices = layer_slices(net)
    if set(arrays) != set(slices):
        raise ValueError(f"layers {sorted(arrays)} do not match the network's layers {sorted(slices)}")
    flat = np.empty(parameter_count(net), dtype=np.float64)
    for layer, s in slices.items():
        values = np.asarray(arrays[layer], dtype=np.float64)
        if values.shape != (s.stop - s.start,):
            raise ValueError(f"layer {layer!r} has shape {values.shape}; expected ({s.stop - s.start},)")
        flat[s] = values
    set_flat_parameters(net, flat)
