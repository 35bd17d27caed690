"""The augmentation schedule: regeneration on schedule, determinism, resume from a state dict."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from portfed.data.panel import PricePanel
from portfed.generators import Augmenter, GBMGenerator, GeneratorError


@pytest.fixture(scope="module")
def train() -> PricePanel:
    rng = np.random.default_rng(0)
    close = 10.0 * np.exp(np.cumsum(0.01 * rng.standard_normal((300, 2)), axis=0))
    high, low = close * 1.01, close * 0.99
    idx, cols = pd.bdate_range("2012-01-02", periods=300), ["P", "Q"]
    return PricePanel.from_frames(
        {
            "close": pd.DataFrame(close, idx, cols),
            "high": pd.DataFrame(high, idx, cols),
            "low": pd.DataFrame(low, idx, cols),
        }
    )


def synthetic(aug: Augmenter, iteration: int) -> np.ndarray:
    return aug.panel(iteration).close.to_numpy()[-aug.synthetic_days :]


def test_panel_is_real_close_plus_one_synthetic_block(train: PricePanel) -> None:
    aug = Augmenter(GBMGenerator(), synthetic_days=50, regenerate_every=10, seed=1).fit(train)
    panel = aug.panel(0)
    assert panel.features == ("close",) and len(panel) == 350 and panel.tickers == train.tickers
    np.testing.assert_array_equal(panel.close.to_numpy()[:300], train.close.to_numpy())
    assert panel.dates[300] == train.dates[-1] + pd.offsets.BDay(1)
    # block k is GBM's sample with default_rng([seed, k])
    expected = GBMGenerator().fit(train).sample(50, np.random.default_rng([1, 0])).close.to_numpy()
    np.testing.assert_array_equal(panel.close.to_numpy()[300:], expected)


def test_regenerates_exactly_when_iteration_crosses_a_multiple(train: PricePanel) -> None:
    aug = Augmenter(GBMGenerator(), synthetic_days=20, regenerate_every=10, seed=3).fit(train)
    previous, changes = None, []
    for it in range(35):
        current = synthetic(aug, it)
        if previous is not None and not np.array_equal(current, previous):
            changes.append(it)
        previous = current
    assert changes == [10, 20, 30]
    assert aug.n_regenerations_ == 4


def test_deterministic_and_order_independent(train: PricePanel) -> None:
    a = Augmenter(GBMGenerator(), synthetic_days=20, regenerate_every=10, seed=3).fit(train)
    b = Augmenter(GBMGenerator(), synthetic_days=20, regenerate_every=10, seed=3).fit(train)
    c = Augmenter(GBMGenerator(), synthetic_days=20, regenerate_every=10, seed=4).fit(train)
    np.testing.assert_array_equal(synthetic(a, 25), synthetic(b, 25))
    assert not np.allclose(synthetic(a, 25), synthetic(c, 25))
    block2 = synthetic(a, 25)
    synthetic(b, 3)
    np.testing.assert_array_equal(synthetic(b, 27), block2)  # block 2 again, after visiting block 0


def test_state_dict_round_trip_resumes_identically(train: PricePanel) -> None:
    a = Augmenter(GBMGenerator(), synthetic_days=20, regenerate_every=1000, seed=9).fit(train)
    a.panel(1500)
    state = a.state_dict()
    b = Augmenter(GBMGenerator(), synthetic_days=20, regenerate_every=1000, seed=9).fit(train)
    b.load_state_dict(state)
    assert b.n_regenerations_ == 1
    np.testing.assert_array_equal(b.panel(1999).close.to_numpy(), a.panel(1999).close.to_numpy())
    assert b.n_regenerations_ == 1  # resumed block is served without regenerating
    np.testing.assert_array_equal(b.panel(2000).close.to_numpy(), a.panel(2000).close.to_numpy())
    assert a.n_regenerations_ == b.n_regenerations_ == 2
    wrong = Augmenter(GBMGenerator(), synthetic_days=20, regenerate_every=1000, seed=8).fit(train)
    with pytest.raises(GeneratorError, match="seed"):
        wrong.load_state_dict(state)


def test_no_generator_means_no_augmentation(train: PricePanel) -> None:
    aug = Augmenter(None, seed=0).fit(train)
    panel = aug.panel(5000)
    assert panel.features == ("close",) and len(panel) == len(train)
    np.testing.assert_array_equal(panel.close.to_numpy(), train.close.to_numpy())
    assert aug.n_regenerations_ == 0 and aug.state_dict()["block"] is None
    with pytest.raises(GeneratorError, match="iteration"):
        aug.panel(-1)
