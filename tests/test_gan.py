"""The GAN augmenter learns: trained samples are closer to the real returns than untrained ones."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import wasserstein_distance

from portfed.data.panel import PricePanel
from portfed.generators import GANGenerator, InvalidParameterError
from portfed.generators.base import log_returns

torch.set_num_threads(1)

SMALL = {
    "window": 16,
    "context_days": 8,
    "knot_days": 4,
    "latent_dim": 8,
    "hidden": 32,
    "channels": 8,
    "batch_size": 32,
    "lr": 1e-3,
}


@pytest.fixture(scope="module")
def panel() -> PricePanel:
    """Three assets, 600 days, volatility switching between 0.3 % and 3 % in 5-day spells (kurtosis ≈ 7):
    far from the Gaussian an untrained generator (standardized output ≈ N(0, 1)) produces."""
    rng = np.random.default_rng(0)
    high = np.repeat(rng.random(600 // 5) < 0.3, 5)[:599]
    r = np.where(high, 0.03, 0.003)[:, None] * rng.standard_normal((599, 3))
    close = 20.0 * np.exp(np.vstack([np.zeros(3), np.cumsum(r, axis=0)]))
    return PricePanel.from_close(
        pd.DataFrame(close, index=pd.bdate_range("2015-01-01", periods=600), columns=list("ABC"))
    )


def pooled_w1(gen: GANGenerator, real: np.ndarray) -> float:
    r = np.concatenate([log_returns(gen.sample(250, rng=k)) for k in range(10)])
    return float(np.mean([wasserstein_distance(r[:, i], real[:, i]) for i in range(real.shape[1])]))


def test_trained_gan_is_closer_to_the_real_returns_than_an_untrained_one(panel: PricePanel) -> None:
    real = log_returns(panel)
    untrained = GANGenerator(steps=0, seed=3, **SMALL).fit(panel)
    trained = GANGenerator(steps=600, seed=3, **SMALL).fit(panel)
    w_untrained, w_trained = pooled_w1(untrained, real), pooled_w1(trained, real)
    assert w_trained < 0.8 * w_untrained, (w_trained, w_untrained)
    assert trained.losses_.shape == (600, 2) and np.all(np.isfinite(trained.losses_))


def test_gan_fit_is_seeded_and_leaves_the_global_torch_rng_alone(panel: PricePanel) -> None:
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = GANGenerator(steps=30, seed=5, **SMALL).fit(panel)
    assert torch.equal(torch.rand(1), before)  # fit used a forked RNG
    b = GANGenerator(steps=30, seed=5, **SMALL).fit(panel)
    c = GANGenerator(steps=30, seed=6, **SMALL).fit(panel)
    np.testing.assert_array_equal(a.losses_, b.losses_)
    np.testing.assert_array_equal(a.sample(40, rng=1).close.to_numpy(), b.sample(40, rng=1).close.to_numpy())
    assert not np.allclose(a.sample(40, rng=1).close.to_numpy(), c.sample(40, rng=1).close.to_numpy())


def test_gan_stitches_windows_into_the_requested_length(panel: PricePanel) -> None:
    gen = GANGenerator(steps=5, **SMALL).fit(panel)
    out = gen.sample(37, rng=0)  # 3 windows of 16, cut to 37
    assert len(out) == 37 and np.all(np.isfinite(out.close.to_numpy()))


def test_gan_rejects_bad_parameters_and_short_data(panel: PricePanel) -> None:
    with pytest.raises(InvalidParameterError, match="window must be >= 1, got 0"):
        GANGenerator(window=0).fit(panel)  # checked by fit (scikit-learn convention), not __init__
    with pytest.raises(InvalidParameterError, match="lr must be > 0.0, got 0.0"):
        GANGenerator(lr=0.0).fit(panel)
    with pytest.raises(ValueError, match="at least 85"):
        GANGenerator(window=64, context_days=20).fit(panel.iloc(slice(0, 50)))
