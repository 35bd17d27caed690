"""scikit-learn estimator conventions of the generators and the Augmenter (issue 10).

``__init__`` stores its arguments unchanged; ``get_params`` / ``set_params`` come from the ``__init__``
signature; ``fit`` validates (a typed :class:`InvalidParameterError` naming parameter and value) and
sets the fitted attributes (trailing ``_``); using a fitted-only method first is a :class:`NotFittedError`.
"""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
import pytest

from portfed.data.panel import PricePanel
from portfed.generators import (
    GENERATORS,
    Augmenter,
    GBMGenerator,
    InvalidParameterError,
    NotFittedError,
    VariableOrderMarkov,
    VOMGenerator,
    clone,
)


@pytest.fixture(scope="module")
def train() -> PricePanel:
    rng = np.random.default_rng(1)
    close = 50.0 * np.exp(np.cumsum(0.01 * rng.standard_normal((200, 3)), axis=0))
    dates = pd.bdate_range("2015-01-01", periods=200)
    return PricePanel.from_close(pd.DataFrame(close, dates, ["X", "Y", "Z"]))


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_get_params_follows_the_init_signature_and_round_trips(name: str) -> None:
    cls = GENERATORS[name]
    gen = cls()
    defaults = {k: p.default for k, p in inspect.signature(cls).parameters.items()}
    assert gen.get_params() == defaults
    assert not [k for k in vars(gen) if k.endswith("_")]  # nothing fitted by __init__
    copy = clone(gen)
    assert type(copy) is cls and copy is not gen and copy.get_params() == gen.get_params()
    assert repr(gen).startswith(f"{cls.__name__}(")


def test_init_stores_bad_values_and_fit_rejects_them_by_name(train: PricePanel) -> None:
    gen = VOMGenerator(n_regimes=0, ewma_lambda=1.5)  # no error: stored as given
    assert gen.n_regimes == 0 and gen.ewma_lambda == 1.5
    with pytest.raises(InvalidParameterError, match="n_regimes must be >= 1, got 0"):
        gen.fit(train)
    with pytest.raises(InvalidParameterError, match="ewma_lambda must be <= 1.0, got 1.5"):
        gen.set_params(n_regimes=2).fit(train)
    with pytest.raises(InvalidParameterError, match="ewma_lambda must be < 1"):
        VOMGenerator(ewma_lambda=1.0).fit(train)
    with pytest.raises(InvalidParameterError, match="independent must be True or False, got 'yes'"):
        GBMGenerator(independent="yes").fit(train)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="max_order must be >= 0, got -1"):
        VariableOrderMarkov(3, max_order=-1).fit([0, 1, 2])
    assert issubclass(InvalidParameterError, ValueError)


def test_set_params_sets_returns_self_and_refuses_unknown_names() -> None:
    gen = GBMGenerator()
    assert gen.set_params(independent=True) is gen and gen.independent is True
    with pytest.raises(InvalidParameterError, match="invalid parameter 'sigma'.*valid parameters are"):
        gen.set_params(sigma=0.1)


def test_augmenter_is_constructed_with_its_settings_then_fitted(train: PricePanel) -> None:
    generator = GBMGenerator()
    aug = Augmenter(generator, synthetic_days=30, regenerate_every=5, seed=2)
    assert aug.get_params(deep=False) == {
        "generator": generator, "synthetic_days": 30, "regenerate_every": 5, "seed": 2
    }
    assert aug.get_params()["generator__independent"] is False
    aug.set_params(generator__independent=True)
    assert generator.independent is True
    for use in (lambda: aug.panel(0), aug.state_dict, lambda: aug.load_state_dict({})):
        with pytest.raises(NotFittedError, match="call fit"):
            use()
    assert aug.fit(train) is aug
    assert aug.generator_ is not generator and not hasattr(generator, "mu_")  # a fitted clone
    assert aug.generator_.independent is True and len(aug.panel(0)) == 230
    assert aug.n_regenerations_ == 1 and aug.block_ == 0 and aug.synthetic_.shape == (30, 3)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"synthetic_days": 0}, "synthetic_days must be >= 1, got 0"),
        ({"regenerate_every": 2.5}, "regenerate_every must be an integer, got 2.5"),
        ({"seed": -1}, "seed must be a non-negative integer, got -1"),
        ({"generator": "gbm"}, "generator must be a Generator or None, got 'gbm'"),
    ],
)
def test_augmenter_rejects_bad_settings_at_fit(train: PricePanel, params: dict, message: str) -> None:
    aug = Augmenter(**{"generator": GBMGenerator(), **params})
    with pytest.raises(InvalidParameterError, match=message):
        aug.fit(train)
