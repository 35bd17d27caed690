"""The augmentation schedule of one party (paper 001 §9.3; DESIGN.md §4).

An :class:`Augmenter` owns the party's generator and its synthetic data; the only thing it hands out
is the augmented close-price panel for the party's own trainer.  It is a scikit-learn style
estimator: constructed with its settings, ``Augmenter(generator, synthetic_days=252,
regenerate_every=1000, seed=0).fit(train)`` fits a clone of the generator once, on the real training
panel, and at local training iteration ``i`` :meth:`~Augmenter.panel` serves

    real closes  ⊕  one synthetic block of ``synthetic_days`` closes after the last real close,

where the synthetic block is the ``k``-th regeneration, ``k = i // regenerate_every`` (paper: 252 days,
regenerated every 1,000 iterations), drawn with ``numpy.random.default_rng([seed, k])`` — so block
``k`` is the same whatever the order in which iterations are requested, and a resumed run sees the
same data.  The augmented panel is close-only (``features=("close",)``): generators model closes only,
so high/low/open of the real part are dropped to keep the real and synthetic parts alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

import numpy as np

from portfed.data.panel import PricePanel
from portfed.generators.base import (
    Estimator,
    Generator,
    GeneratorError,
    InvalidParameterError,
    clone,
    synthetic_dates,
)
from portfed.validation import check_int, check_seed


class Augmenter(Estimator):
    """Real training closes plus a periodically regenerated synthetic year.

    Args:
        generator: an unfitted generator (``fit`` fits a clone of it), or ``None`` for no augmentation.
        synthetic_days: length of the synthetic block (252 = one trading year).
        regenerate_every: local iterations between regenerations.
        seed: base seed; regeneration ``k`` uses ``default_rng([seed, k])``.

    Fitted attributes: ``real_`` (the close-only training panel), ``generator_`` (the fitted clone,
    or ``None``), ``block_`` (the regeneration served, ``None`` before the first), ``synthetic_``
    (its closes), ``n_regenerations_`` (regenerations drawn so far).
    """

    def __init__(
        self,
        generator: Generator | None,
        synthetic_days: int = 252,
        regenerate_every: int = 1000,
        seed: int = 0,
    ) -> None:
        self.generator = generator
        self.synthetic_days = synthetic_days
        self.regenerate_every = regenerate_every
        self.seed = seed

    def _validate_params(self) -> None:
        if self.generator is not None and not isinstance(self.generator, Generator):
            raise InvalidParameterError(f"generator must be a Generator or None, got {self.generator!r}")
        check_int(self.synthetic_days, "synthetic_days", minimum=1, error=InvalidParameterError)
        check_int(self.regenerate_every, "regenerate_every", minimum=1, error=InvalidParameterError)
        check_seed(self.seed, error=InvalidParameterError)

    def fit(self, train: PricePanel) -> Self:
        """Validate the settings and fit a clone of the generator on ``train``'s closes; returns ``self``."""
        self._start(train)
        self.generator_ = None if self.generator is None else clone(self.generator).fit(self.real_)
        return self

    def load_fitted_state(self, train: PricePanel, generator_state: Mapping[str, np.ndarray]) -> Self:
        """:meth:`fit` without fitting: the generator's clone restores ``generator_state``, the
        :meth:`Generator.fitted_state` of a generator with the same parameters fitted on ``train``'s closes.

        The result serves exactly the panels of a fitted Augmenter.  Raises :class:`GeneratorError`
        without a generator, or when the state's tickers, last close or last date are not ``train``'s.
        """
        self._start(train)
        if self.generator is None:
            raise GeneratorError("an Augmenter without a generator has no fitted generator state to load")
        generator = clone(self.generator).load_fitted_state(generator_state)
        close = self.real_.feature("close")[-1]
        if (generator.tickers_ != self.real_.tickers or generator.last_date_ != self.real_.dates[-1]
                or not np.array_equal(generator.last_close_, close)):
            raise GeneratorError(f"the fitted {generator.name} state was fitted on other data than panel "
                                 f"{train.name!r} (tickers, last date or last close differ)")
        self.generator_ = generator
        return self

    def _start(self, train: PricePanel) -> None:
        """Validate the settings and ``train``; set every fitted attribute but ``generator_``."""
        self._validate_params()
        if not isinstance(train, PricePanel):
            raise GeneratorError(f"fit expects a PricePanel, got {type(train).__name__}")
        self.real_ = train.select_features(["close"])
        self.block_: int | None = None
        self.synthetic_: np.ndarray | None = None
        self._panel = self.real_
        self.n_regenerations_ = 0

    def panel(self, iteration: int) -> PricePanel:
        """The party's training panel at local iteration ``iteration`` (≥ 0)."""
        self._check_fitted("panel()")
        iteration = check_int(iteration, "iteration", minimum=0, error=GeneratorError)
        if self.generator_ is None:
            return self.real_
        block = iteration // int(self.regenerate_every)
        if block != self.block_:
            rng = np.random.default_rng([int(self.seed), block])
            synthetic = self.generator_.sample(int(self.synthetic_days), rng).feature("close").copy()
            self._install(block, synthetic)
            self.n_regenerations_ += 1
        return self._panel

    def _install(self, block: int, synthetic: np.ndarray) -> None:
        real = self.real_
        dates = real.dates.append(synthetic_dates(real.dates[-1], len(synthetic)))
        values = np.concatenate([real.feature("close"), synthetic], axis=0)
        self.block_, self.synthetic_ = block, synthetic
        name = f"{real.name}+{self.generator_.name}"
        self._panel = PricePanel(values, dates, real.tickers, ("close",), name)

    def state_dict(self) -> dict[str, object]:
        """Everything needed to resume: the schedule, the current block and its synthetic closes."""
        self._check_fitted("state_dict()")
        return {
            "seed": int(self.seed),
            "synthetic_days": int(self.synthetic_days),
            "regenerate_every": int(self.regenerate_every),
            "generator": None if self.generator_ is None else self.generator_.name,
            "block": self.block_,
            "synthetic_close": None if self.synthetic_ is None else self.synthetic_.copy(),
            "n_regenerations": self.n_regenerations_,
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore :meth:`state_dict`; the schedule and generator must match this augmenter's."""
        mine = self.state_dict()
        for key in ("seed", "synthetic_days", "regenerate_every", "generator"):
            if state.get(key) != mine[key]:
                raise GeneratorError(
                    f"state_dict {key}={state.get(key)!r} does not match this augmenter's {mine[key]!r}"
                )
        self.n_regenerations_ = int(state["n_regenerations"])
        if state["block"] is None:
            self.block_, self.synthetic_, self._panel = None, None, self.real_
            return
        synthetic = np.asarray(state["synthetic_close"], dtype=np.float64)
        expected = (int(self.synthetic_days), self.real_.n_assets)
        if synthetic.shape != expected:
            raise GeneratorError(
                f"state_dict synthetic_close has shape {synthetic.shape}, expected {expected}"
            )
        self._install(int(state["block"]), synthetic)
