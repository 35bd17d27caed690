"""A variable-order Markov chain over a finite alphabet (Begleiter, El-Yaniv & Yona 2004).

Estimation (PPM-style counts): for every position ``t`` of the training sequence ``s_0 … s_{T−1}`` and
every context length ``k = 0 … min(D, t)`` the count ``N(c, s_t)`` of context ``c = s_{t−k} … s_{t−1}``
followed by ``s_t`` is incremented.  The support of a context is ``N(c) = Σ_s N(c, s)``.

Prediction (escape to shorter contexts): given a history ``h``, the context used is the longest
suffix ``c`` of ``h`` with ``|c| ≤ D`` and support ``N(c) ≥ min_count`` (the empty context is always
admissible), and

    P(s | h) = N(c, s) / N(c).

The order therefore varies with the realized history: long contexts where the data support them,
shorter ones elsewhere.  Symbols never observed get probability zero (there is no order −1 uniform
escape), so a generated sequence only contains symbols seen in training.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

import numpy as np

from portfed.generators.base import Estimator, GeneratorError, InvalidParameterError
from portfed.validation import check_int

Context = tuple[int, ...]


class VariableOrderMarkov(Estimator):
    """Variable-order Markov chain with maximum order ``max_order`` (D), a scikit-learn style estimator.

    Args:
        n_symbols: alphabet size; symbols are the integers ``0 … n_symbols − 1``.
        max_order: the longest context D (0 gives an i.i.d. model).
        min_count: the support a context needs to be used for prediction.

    Fitted attribute: ``counts_`` (``{context: counts of the next symbol}``).
    """

    def __init__(self, n_symbols: int, max_order: int = 3, min_count: int = 20) -> None:
        self.n_symbols = n_symbols
        self.max_order = max_order
        self.min_count = min_count

    def fit(self, symbols: Sequence[int] | np.ndarray) -> Self:
        """Validate the parameters, count every context of length ``0 … D`` and its next symbol."""
        self._validate_params()
        seq = _as_symbols(symbols, self.n_symbols)
        if seq.size < 1:
            raise GeneratorError("cannot fit a Markov chain on an empty symbol sequence")
        counts: dict[Context, np.ndarray] = {}
        for t in range(seq.size):
            for k in range(min(self.max_order, t) + 1):
                ctx = tuple(int(s) for s in seq[t - k : t])
                row = counts.get(ctx)
                if row is None:
                    row = counts[ctx] = np.zeros(self.n_symbols, dtype=np.int64)
                row[seq[t]] += 1
        self.counts_ = counts
        return self

    def _validate_params(self) -> None:
        check_int(self.n_symbols, "n_symbols", minimum=1, error=InvalidParameterError)
        check_int(self.max_order, "max_order", minimum=0, error=InvalidParameterError)
        check_int(self.min_count, "min_count", minimum=1, error=InvalidParameterError)

    def context_for(self, history: Sequence[int]) -> Context:
        """The longest suffix of ``history`` (length ≤ D) with support ≥ ``min_count``."""
        counts = self._counts()
        hist = tuple(int(s) for s in history[len(history) - min(self.max_order, len(history)) :])
        for k in range(len(hist), 0, -1):
            row = counts.get(hist[-k:])
            if row is not None and row.sum() >= self.min_count:
                return hist[-k:]
        return ()

    def predict_proba(self, history: Sequence[int]) -> np.ndarray:
        """``P(next | history)`` over the alphabet, from :meth:`context_for`'s context."""
        row = self._counts()[self.context_for(history)]
        return row / row.sum()

    def transition_probabilities(self, order: int | None = None) -> dict[Context, np.ndarray]:
        """``{context: P(next | context)}`` for every context with support ≥ ``min_count``.

        ``order`` restricts to contexts of that length.  The empty context (order 0, the symbol
        frequencies) is always included when ``order`` is ``None`` or 0.
        """
        out: dict[Context, np.ndarray] = {}
        for ctx, row in self._counts().items():
            if order is not None and len(ctx) != order:
                continue
            if ctx == () or row.sum() >= self.min_count:
                out[ctx] = row / row.sum()
        return out

    def sample(self, n: int, rng: np.random.Generator, history: Sequence[int] = ()) -> np.ndarray:
        """Draw ``n`` symbols continuing ``history`` (e.g. the end of the training sequence)."""
        hist = list(_as_symbols(history, self.n_symbols))
        out = np.empty(n, dtype=np.int64)
        for t in range(n):
            s = int(rng.choice(self.n_symbols, p=self.predict_proba(hist)))
            out[t] = s
            hist.append(s)
        return out

    def _counts(self) -> dict[Context, np.ndarray]:
        self._check_fitted("using the chain")
        return self.counts_


def pack_contexts(contexts: Sequence[Context]) -> tuple[np.ndarray, np.ndarray]:
    """Contexts as two arrays (for array-only storage): their lengths and their symbols concatenated."""
    lengths = np.array([len(c) for c in contexts], dtype=np.int64)
    return lengths, np.array([s for c in contexts for s in c], dtype=np.int64)


def unpack_contexts(lengths: np.ndarray, symbols: np.ndarray) -> list[Context]:
    """The contexts :func:`pack_contexts` packed, in the same order."""
    lengths, symbols = np.asarray(lengths, dtype=np.int64), np.asarray(symbols, dtype=np.int64)
    if lengths.ndim != 1 or symbols.ndim != 1 or np.any(lengths < 0) or int(lengths.sum()) != symbols.size:
        raise GeneratorError(f"packed contexts: lengths summing to {int(lengths.sum())} for {symbols.size} symbols")
    ends = np.cumsum(lengths)
    return [tuple(int(s) for s in symbols[end - n : end]) for n, end in zip(lengths, ends, strict=True)]


def _as_symbols(symbols: Sequence[int] | np.ndarray, n_symbols: int) -> np.ndarray:
    seq = np.asarray(symbols)
    if seq.size == 0:
        return seq.astype(np.int64).reshape(0)
    if seq.ndim != 1 or not np.issubdtype(seq.dtype, np.integer):
        raise GeneratorError(f"symbols must be a 1-D integer sequence, got dtype {seq.dtype} ndim {seq.ndim}")
    bad = np.flatnonzero((seq < 0) | (seq >= n_symbols))
    if bad.size:
        raise GeneratorError(
            f"symbol {int(seq[bad[0]])} at position {int(bad[0])} is outside 0..{n_symbols - 1}"
        )
    return seq.astype(np.int64)
