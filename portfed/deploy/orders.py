"""Orders in shares that move today's book to a trained party's target portfolio (``portfed orders``).

Nothing is sent anywhere: the result is a table for review (:func:`write_orders`).

**The book.**  ``cash`` (currency) and ``shares`` ``h_i`` of the party's tickers (default none: all cash),
valued at the as-of closes ``p_i``: ``V = cash + Σ h_i p_i``, weights ``w'_0 = cash / V``,
``w'_i = h_i p_i / V`` — the book the decision starts from (the policy's current portfolio, and what a
turnover limit is measured from).

**The target** ``w`` is :func:`~portfed.deploy.allocate`'s, with the agent's risk limits.  Commission at
rate ``c`` (the run's ``agent.commission``) is paid as the backtest's cost model has it (Jiang et al.
2017 §2.3): selling ``q`` shares brings ``(1 − c) q p`` in cash, buying them costs ``q p / (1 − c)``.  After
trading exactly to ``w`` the book is worth ``μ V``, ``μ`` the exact transaction remainder factor
(:func:`~portfed.envs.transaction_remainder`, its eq. 14 is this bookkeeping), so the exact target in
shares is ``t_i = w_i μ V / p_i`` and the cash left is ``w_0 μ V ≥ 0``.

**Rounding to lots** of ``lot`` shares: the order of asset ``i`` is ``q_i = lot · ⌊(t_i − h_i) / lot⌋``
(buy fewer or sell more, never the other way), so the shares after, ``n_i = h_i + q_i``, satisfy
``t_i − lot < n_i ≤ t_i`` — within one lot of the target.  Each rounding step lowers the cash spent
(buying one lot less saves ``lot p / (1 − c)``; selling more brings ``(1 − c) lot p``), so the cash after
all orders is at least the exact trade's ``w_0 μ V`` and never negative: sales pay for purchases, and no
order spends cash the account does not have.  (A rounding residue below float64 precision, when the
target holds no cash at all, is removed by dropping one more lot of the largest purchase.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from portfed._io import atomic_save
from portfed.envs import transaction_remainder
from portfed.experiment.party import CASH


@dataclass(frozen=True)
class OrderBook:
    """Orders of one decision: per ticker (in order) the close ``prices``, the ``held`` shares, the exact
    ``target`` shares, the ``orders`` (signed: + buy, − sell, multiples of ``lot``); ``cash`` before and
    ``cash_after`` the trades and their commissions; ``weights`` the target portfolio (cash first)."""

    tickers: tuple[str, ...]
    prices: np.ndarray
    held: np.ndarray
    target: np.ndarray
    orders: np.ndarray
    cash: float
    cash_after: float
    weights: np.ndarray
    lot: float
    commission: float

    @property
    def shares_after(self) -> np.ndarray:
        return self.held + self.orders

    def frame(self) -> pd.DataFrame:
        """One row per ticker and a last ``cash`` row (its value columns in currency)."""
        after = self.shares_after * self.prices
        value = self.cash_after + after.sum()
        rows = pd.DataFrame({"asset": list(self.tickers), "price": self.prices, "held": self.held,
                             "target_weight": self.weights[1:], "target_shares": self.target, "order": self.orders,
                             "side": np.where(self.orders > 0, "buy", np.where(self.orders < 0, "sell", "")),
                             "shares_after": self.shares_after, "value_after": after, "weight_after": after / value})
        cash = pd.DataFrame({"asset": [CASH], "price": [1.0], "held": [self.cash], "target_weight": [self.weights[0]],
                             "target_shares": [np.nan], "order": [self.cash_after - self.cash], "side": [""],
                             "shares_after": [self.cash_after], "value_after": [self.cash_after],
                             "weight_after": [self.cash_after / value]})
        return pd.concat([rows, cash], ignore_index=True)


def book_weights(cash: float, shares: np.ndarray, prices: np.ndarray) -> np.ndarray:
    """``(cash, h_i p_i) / V``: the book's weights, cash first (module docstring).

    Raises:
        ValueError: negative cash or shares, non-positive prices, or a book worth nothing.
    """
    shares, prices = np.asarray(shares, dtype=np.float64), np.asarray(prices, dtype=np.float64)
    if not np.isfinite(cash) or cash < 0:
        raise ValueError(f"capital (cash) must be a finite amount >= 0, got {cash!r}")
    if not np.isfinite(shares).all() or (shares < 0).any():
        raise ValueError(f"held shares must be finite and >= 0 (no short positions), got {shares.tolist()}")
    if not np.isfinite(prices).all() or (prices <= 0).any():
        raise ValueError(f"prices must be finite and > 0, got {prices.tolist()}")
    values = np.concatenate([[cash], shares * prices])
    if values.sum() <= 0:
        raise ValueError("the book is worth nothing: give --capital > 0 or holdings")
    return values / values.sum()


def share_orders(weights: np.ndarray, cash: float, shares: np.ndarray, prices: np.ndarray, commission: float,
                 lot: float = 1.0, tickers: tuple[str, ...] = ()) -> OrderBook:
    """The lot-rounded orders from the book ``(cash, shares)`` at ``prices`` to ``weights`` (module docstring)."""
    if isinstance(lot, bool) or not isinstance(lot, int | float) or not np.isfinite(lot) or lot <= 0:
        raise ValueError(f"lot must be a number of shares > 0, got {lot!r}")
    shares, prices = np.asarray(shares, dtype=np.float64), np.asarray(prices, dtype=np.float64)
    current = book_weights(cash, shares, prices)
    weights = np.asarray(weights, dtype=np.float64)
    value = cash + float(shares @ prices)
    mu = transaction_remainder(current, weights, commission, exact=True)
    target = weights[1:] * mu * value / prices
    orders = lot * np.floor((target - shares) / lot)
    cash_after = _cash_after(cash, orders, prices, commission)
    while cash_after < 0 and (orders > 0).any():  # float residue only (module docstring)
        largest = int(np.argmax(np.where(orders > 0, orders * prices, -np.inf)))
        orders[largest] -= lot
        cash_after = _cash_after(cash, orders, prices, commission)
    return OrderBook(tuple(tickers), prices, shares, target, orders, float(cash), cash_after, weights, float(lot),
                     float(commission))


def _cash_after(cash: float, orders: np.ndarray, prices: np.ndarray, commission: float) -> float:
    """Cash after selling ``−orders`` (``(1 − c) q p`` in) and buying ``orders`` (``q p / (1 − c)`` out)."""
    bought = np.maximum(orders, 0) @ prices
    sold = np.maximum(-orders, 0) @ prices
    return float(cash + (1 - commission) * sold - bought / (1 - commission))


def read_holdings(path: str | Path, tickers: tuple[str, ...]) -> np.ndarray:
    """Shares held from a CSV with columns ``asset, shares`` (tickers absent from the file: 0 shares).

    Raises:
        ValueError: a missing file or column, a ticker the party does not trade, a repeated ticker or a bad count.
    """
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"holdings file {file} does not exist")
    table = pd.read_csv(file, dtype={"asset": str})
    if not {"asset", "shares"} <= set(table.columns):
        raise ValueError(f"{file} must have the columns asset, shares; it has {list(table.columns)}")
    unknown = sorted(set(table["asset"]) - set(tickers))
    if unknown:
        raise ValueError(f"holdings in {file}: asset(s) {unknown} are not traded by the party ({list(tickers)}); "
                         "give the cash as --capital")
    repeated = sorted({a for a in table["asset"] if (table["asset"] == a).sum() > 1})
    if repeated:
        raise ValueError(f"holdings in {file} list {repeated[0]!r} more than once")
    counts = pd.to_numeric(table["shares"], errors="coerce")
    if counts.isna().any() or (counts < 0).any():
        bad = table.loc[counts.isna() | (counts < 0), "asset"].iloc[0]
        raise ValueError(f"holdings in {file}: the shares of {bad!r} must be a number >= 0")
    given = dict(zip(table["asset"], counts, strict=True))
    return np.array([float(given.get(t, 0.0)) for t in tickers])


def write_orders(book: OrderBook, path: str | Path) -> Path:
    """:meth:`OrderBook.frame` as a CSV at ``path``, atomically."""
    frame = book.frame()
    return atomic_save(path, lambda p: frame.to_csv(p, index=False))
