"""The CNN EIIE's input-row layout and the fixed gather indices its trunk's two backends read it with.

:class:`~portfed.agents.batched_networks.BatchedEIIECNN` stores each asset's window of ``F`` features ×
``l`` days as ``n`` blocks of ``P + 2`` days (its module doc): block j holds days ``s_j … s_j + P + 1``
of every feature, ``s_j = min(j P, W − P)``, ``W = l − 2``.  Both backends
(:mod:`portfed.agents.backend`) read these rows: the PyTorch operations as one banded product per layer
(the band of ``K1`` and the block order of ``K2``, gathered by the indices here), the C kernels of
``convolution.c`` through :attr:`ConvolutionLayout.window_columns`, the column of each (feature, day).
The captured step (:mod:`portfed.agents.captured`) forms the same two matrices as products with fixed 0/1
matrices, :attr:`ConvolutionLayout.band_matrix` and :attr:`ConvolutionLayout.kernel2_matrix`, rather than
gathers: the same numbers (one term per entry), and a backward pass that is a product too, where a
gather's is a scatter-add (atomic, in no fixed order, on a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ConvolutionLayout:
    """The CNN's shape, its block layout and the gathers from it (module doc).

    Attributes:
        n_features, window, conv_maps, dense_maps: ``F``, ``l``, ``C``, ``D``.
        block: ``P``, conv outputs per block; ``n_blocks``: ``n = ⌈W / P⌉``.
        columns: ``(n·F·(P + 2),)`` the (feature·l + day) column of the window each layout column holds.
        band: ``(F(P+2), C·P)`` the index into ``[K1, 0]`` of each entry of the banded matrix ``A``.
        band_grad: ``(C·F·3, P)`` the entries of ``∂A`` that sum to each ``∂K1[c, f, s]``.
        kernel2: ``(n·C·P,)`` the index into ``[K2, 0]`` of each column of ``h1`` in block order (0 for a
            repeated output, so that each counts once).
        kernel2_grad: ``(C·W,)`` the block-order column of each ``(c, w)`` (its first).
        window_columns: ``(F·l,)`` int32, the layout column of each (feature, day) (its first), for the kernels.
        band_matrix: ``(C·F·3 + 1, F(P+2)·C·P)`` float32, the gather ``band`` as a 0/1 matrix:
            ``[K1, 0] @ band_matrix`` is ``A``, flattened.
        kernel2_matrix: ``(C·W + 1, n·C·P)`` float32, the gather ``kernel2`` as a 0/1 matrix:
            ``[K2, 0] @ kernel2_matrix`` is ``K2`` in block order.
    """

    n_features: int
    window: int
    conv_maps: int
    dense_maps: int
    block: int
    n_blocks: int
    columns: torch.Tensor
    band: torch.Tensor
    band_grad: torch.Tensor
    kernel2: torch.Tensor
    kernel2_grad: torch.Tensor
    window_columns: torch.Tensor
    band_matrix: torch.Tensor
    kernel2_matrix: torch.Tensor

    @property
    def input_width(self) -> int:
        """``n · F · (P + 2)``, the width of one asset's layout row."""
        return self.n_blocks * self.n_features * (self.block + 2)

    @property
    def width(self) -> int:
        """``W = l − 2``, the first convolution's outputs per feature map."""
        return self.window - 2

    @classmethod
    def build(cls, n_features: int, window: int, conv_maps: int, dense_maps: int, block: int,
              device: torch.device) -> ConvolutionLayout:
        """The layout of blocks of ``block`` outputs, its indices on ``device`` (``window_columns`` on the CPU)."""
        width = window - 2
        n_blocks = -(-width // block)
        starts = [min(j * block, width - block) for j in range(n_blocks)]
        f_n, c_maps, p_n, q_n = n_features, conv_maps, block, block + 2
        columns = torch.tensor([f * window + start + q for start in starts for f in range(f_n) for q in range(q_n)])
        band = torch.full((f_n * q_n, c_maps * p_n), c_maps * f_n * 3, dtype=torch.long)  # last: the zero slot
        band_grad = torch.empty(c_maps * f_n * 3, p_n, dtype=torch.long)
        for c in range(c_maps):
            for f in range(f_n):
                for s in range(3):
                    for p in range(p_n):
                        band[f * q_n + p + s, c * p_n + p] = (c * f_n + f) * 3 + s
                        band_grad[(c * f_n + f) * 3 + s, p] = (f * q_n + p + s) * c_maps * p_n + c * p_n + p
        kernel2 = torch.full((n_blocks * c_maps * p_n,), c_maps * width, dtype=torch.long)
        first: dict[tuple[int, int], int] = {}
        for j, start in enumerate(starts):
            for c in range(c_maps):
                for p in range(p_n):
                    position = (j * c_maps + c) * p_n + p
                    if (c, start + p) not in first:
                        first[(c, start + p)] = position
                        kernel2[position] = c * width + start + p
        kernel2_grad = torch.tensor([first[(c, w)] for c in range(c_maps) for w in range(width)])
        first_column = {int(q): p for p, q in reversed(list(enumerate(columns.tolist())))}
        window_columns = torch.tensor([first_column[q] for q in range(f_n * window)], dtype=torch.int32)
        band_matrix, kernel2_matrix = (torch.nn.functional.one_hot(index.flatten(), classes).T.to(torch.float32)
                                       for index, classes in ((band, c_maps * f_n * 3 + 1), (kernel2, c_maps * width + 1)))
        return cls(n_features, window, conv_maps, dense_maps, block, n_blocks, *(
            index.to(device) for index in (columns, band, band_grad, kernel2, kernel2_grad)), window_columns,
            band_matrix.to(device), kernel2_matrix.to(device))
