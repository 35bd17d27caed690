"""The one API every private augmenter implements (paper 001 §9.3; DESIGN.md §4).

A generator is a scikit-learn estimator (:class:`Estimator`): parameters stored unchanged by
``__init__`` and validated by ``fit(train) -> self``, ``get_params`` / ``set_params``, fitted
attributes ending with ``_``, then ``sample(n_days, rng) -> PricePanel``.  Every generator models
the *close* prices only, through the daily log returns ``r_{t,i} = ln(v_{t,i} / v_{t-1,i})`` of the
training panel.

Continuity convention of :meth:`Generator.sample`: with ``v_T`` the last real close and
``r_1, …, r_n`` the synthetic log returns,

    v_{T+k} = v_T · exp(r_1 + … + r_k),   k = 1, …, n,

so the first synthetic day's price relative ``exp(r_1)`` is applied to the last real close, and the
synthetic dates are the ``n`` business days (Mon–Fri) following the last real date.  The returned
panel holds the ``n`` synthetic closes only (not ``v_T`` itself), for the same tickers.

Fitted state.  :meth:`Generator.fitted_state` exports every fitted attribute as named numpy arrays
(numbers and unicode strings only: storable with ``np.savez`` and read back with
``allow_pickle=False``, no code runs on load) and :meth:`Generator.load_fitted_state` restores them
on an unfitted generator with the same parameters, which then samples exactly what the fitted one
does (:mod:`portfed.experiment.party.fit_cache` stores fits this way).  A subclass lists its fitted
attributes in ``fitted_attributes``; array-valued ones need nothing more, others (the VOM's dicts,
the GAN's torch modules) override :meth:`Generator._export_state` / :meth:`Generator._import_state`.
An attribute set by ``fit`` and not listed makes the export fail rather than miss it.
"""

from __future__ import annotations

import abc
import copy
import inspect
from collections.abc import Mapping
from typing import ClassVar, Self, TypeVar

import numpy as np
import pandas as pd

from portfed.data.errors import DataError
from portfed.data.panel import PricePanel
from portfed.validation import check_int, check_seed

E = TypeVar("E", bound="Estimator")


class GeneratorError(ValueError):
    """A generator was misused or produced/was given data it cannot handle."""


class InvalidParameterError(GeneratorError):
    """A constructor parameter has an invalid value; raised by ``fit``, naming the parameter and value
    (scikit-learn's ``InvalidParameterError``)."""


class NotFittedError(GeneratorError):
    """A method that needs a fitted estimator was called before ``fit`` (scikit-learn's
    ``NotFittedError``)."""


def as_rng(rng: np.random.Generator | int) -> np.random.Generator:
    """A :class:`numpy.random.Generator` from a generator or a non-negative integer seed (never unseeded)."""
    if isinstance(rng, np.random.Generator):
        return rng
    seed = check_seed(rng, "rng (a numpy.random.Generator or a seed)", error=GeneratorError)
    return np.random.default_rng(seed)


class Estimator:
    """scikit-learn's estimator conventions, implemented once for the generators and the Augmenter.

    ``__init__`` only stores its arguments, unchanged, as attributes of the same names (no validation,
    no derived state); :meth:`get_params` / :meth:`set_params` are derived from the ``__init__``
    signature (as ``sklearn.base.BaseEstimator`` does); ``fit`` first calls :meth:`_validate_params`
    (an :class:`InvalidParameterError` names the bad parameter and value) and sets the fitted
    attributes, whose names end with ``_``.  A method that needs them raises :class:`NotFittedError`
    before ``fit``.
    """

    @classmethod
    def _param_names(cls) -> list[str]:
        """The ``__init__`` parameters, in declaration order (``*args`` / ``**kwargs`` are not allowed)."""
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        for p in params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"{cls.__name__}.__init__ must list its parameters explicitly, not {p}")
        return [p.name for p in params]

    def get_params(self, deep: bool = True) -> dict[str, object]:
        """The constructor parameters; with ``deep`` also those of nested estimators as ``name__param``."""
        out: dict[str, object] = {}
        for name in self._param_names():
            value = getattr(self, name)
            if deep and isinstance(value, Estimator):
                out.update({f"{name}__{k}": v for k, v in value.get_params(deep=True).items()})
            out[name] = value
        return out

    def set_params(self, **params: object) -> Self:
        """Set constructor parameters (``name__param`` reaches a nested estimator); returns ``self``.

        Values are validated by the next ``fit``, as in scikit-learn; fitted attributes are kept.
        """
        names = self._param_names()
        nested: dict[str, dict[str, object]] = {}
        for key, value in params.items():
            name, sep, sub = key.partition("__")
            if name not in names:
                raise InvalidParameterError(
                    f"invalid parameter {name!r} for {type(self).__name__}; valid parameters are {names}"
                )
            if sep:
                nested.setdefault(name, {})[sub] = value
            else:
                setattr(self, name, value)
        for name, sub_params in nested.items():
            inner = getattr(self, name)
            if not isinstance(inner, Estimator):
                raise InvalidParameterError(
                    f"parameter {name!r} of {type(self).__name__} is {inner!r}, not an estimator"
                )
            inner.set_params(**sub_params)
        return self

    def _validate_params(self) -> None:
        """Check the constructor parameters (first thing ``fit`` does); :class:`InvalidParameterError`."""

    def _check_fitted(self, method: str) -> None:
        """:class:`NotFittedError` unless ``fit`` has set a fitted attribute (a name ending with ``_``)."""
        if not any(k.endswith("_") and not k.startswith("__") for k in vars(self)):
            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit() before {method}")

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params(deep=False).items())
        return f"{type(self).__name__}({params})"


def clone(estimator: E) -> E:
    """A new, unfitted estimator with the same parameters (scikit-learn's ``clone``; nested ones cloned)."""
    params = {
        k: clone(v) if isinstance(v, Estimator) else copy.deepcopy(v)
        for k, v in estimator.get_params(deep=False).items()
    }
    return type(estimator)(**params)


def log_returns(panel: PricePanel) -> np.ndarray:
    """Daily close log returns ``ln(v_t / v_{t-1})``, shape ``(dates − 1, assets)``."""
    return np.log(panel.price_relatives())


def synthetic_dates(last_date: pd.Timestamp, n_days: int) -> pd.DatetimeIndex:
    """The ``n_days`` business days strictly after ``last_date``."""
    return pd.bdate_range(start=pd.Timestamp(last_date) + pd.offsets.BDay(1), periods=n_days)


class Generator(Estimator, abc.ABC):
    """Base class: parameter handling, input checks, the continuity convention and seeding live here once.

    Subclasses take their parameters in ``__init__`` (stored as given), check them in
    :meth:`~Estimator._validate_params`, implement :meth:`_fit` on the training log returns
    ``(T − 1, m)`` (setting their fitted attributes, names ending with ``_``) and
    :meth:`_sample_log_returns` returning ``(n_days, m)`` synthetic log returns.
    """

    #: Registry name (``"gbm"``, ``"vom"``, …).
    name: ClassVar[str]
    #: Fewest training days (prices) :meth:`fit` accepts.
    min_train_days: ClassVar[int] = 3
    #: The fitted attributes :meth:`_fit` sets (the base class's own are handled here); by default
    #: numpy arrays, exported under their names (:meth:`fitted_state`).
    fitted_attributes: ClassVar[tuple[str, ...]] = ()

    def fit(self, train: PricePanel) -> Self:
        """Validate the parameters, then fit on the training panel's close prices; returns ``self``."""
        self._validate_params()
        if not isinstance(train, PricePanel):
            raise GeneratorError(f"fit expects a PricePanel, got {type(train).__name__}")
        if len(train) < self.min_train_days:
            raise DataError(
                f"{self.name} needs at least {self.min_train_days} training days, "
                f"panel {train.name!r} has {len(train)}"
            )
        returns = log_returns(train)
        flat = np.flatnonzero(returns.std(axis=0) == 0.0)
        if flat.size:
            raise DataError(
                f"ticker {train.tickers[flat[0]]!r} has a constant price in panel {train.name!r}: "
                "a generator cannot fit a return distribution without variation",
                ticker=train.tickers[flat[0]],
            )
        self._fit(returns)
        self.tickers_: tuple[str, ...] = train.tickers
        self.last_close_: np.ndarray = train.feature("close")[-1].copy()
        self.last_date_: pd.Timestamp = train.dates[-1]
        self.train_name_: str = train.name
        return self

    def sample(self, n_days: int, rng: np.random.Generator | int) -> PricePanel:
        """``n_days`` synthetic closes continuing the last real close (see the module docstring)."""
        self._check_fitted("sample()")
        n_days = check_int(n_days, "n_days", minimum=1, error=GeneratorError)
        r = np.asarray(self._sample_log_returns(n_days, as_rng(rng)), dtype=np.float64)
        expected = (n_days, len(self.tickers_))
        if r.shape != expected:
            raise GeneratorError(f"{self.name} produced log returns of shape {r.shape}, expected {expected}")
        close = self.last_close_ * np.exp(np.cumsum(r, axis=0))
        if not np.all(np.isfinite(close)) or np.any(close <= 0):
            bad = np.argwhere(~np.isfinite(close) | (close <= 0))[0]
            raise GeneratorError(
                f"{self.name} produced a non-finite or non-positive price {close[tuple(bad)]!r} "
                f"for ticker {self.tickers_[bad[1]]!r} on synthetic day {int(bad[0]) + 1}"
            )
        return PricePanel(
            close[:, :, None],
            synthetic_dates(self.last_date_, n_days),
            self.tickers_,
            ("close",),
            f"{self.train_name_}~{self.name}",
        )

    @abc.abstractmethod
    def _fit(self, returns: np.ndarray) -> None:
        """Estimate the model from training log returns of shape ``(T − 1, m)``."""

    @abc.abstractmethod
    def _sample_log_returns(self, n_days: int, rng: np.random.Generator) -> np.ndarray:
        """Draw ``(n_days, m)`` synthetic log returns."""

    # ------------------------------------------------------------------ fitted state
    def fitted_state(self) -> dict[str, np.ndarray]:
        """The fitted model as named arrays of numbers or unicode strings (no Python objects).

        Raises:
            NotFittedError: before ``fit``.
            GeneratorError: ``fit`` set an attribute that ``fitted_attributes`` does not list.
        """
        self._check_fitted("fitted_state()")
        known = {*self._param_names(), *_BASE_FITTED, *self.fitted_attributes}
        unknown = sorted(k for k in vars(self) if k not in known)
        if unknown:
            raise GeneratorError(f"{type(self).__name__} has fitted attributes {unknown} that its fitted_attributes "
                                 "do not list: its fitted state cannot be exported")
        date = pd.Timestamp(self.last_date_)
        state = {
            "tickers_": np.array(self.tickers_, dtype=np.str_),
            "last_close_": np.asarray(self.last_close_, dtype=np.float64),
            "last_date_": np.array((date.tz_localize(None) if date.tz else date).to_datetime64(), dtype="datetime64[ns]"),
            "last_date_tz_": np.array("" if date.tz is None else str(date.tz)),
            "train_name_": np.array(self.train_name_, dtype=np.str_),
        }
        model = self._export_state()
        clash = sorted(set(model) & set(state))
        if clash:
            raise GeneratorError(f"{type(self).__name__} exports {clash}, names the base class uses")
        return {**state, **{k: np.asarray(v) for k, v in model.items()}}

    def load_fitted_state(self, state: Mapping[str, np.ndarray]) -> Self:
        """Restore :meth:`fitted_state` on this generator (its parameters must be those of the fitted one).

        The parameters are validated first, as by ``fit``.  Raises :class:`GeneratorError` when
        ``state`` lacks an entry or has one too many (another generator's state).
        """
        self._validate_params()
        state = dict(state)
        try:
            tz = str(state.pop("last_date_tz_"))
            date = pd.Timestamp(state.pop("last_date_")[()])
            base = {
                "tickers_": tuple(str(t) for t in state.pop("tickers_")),
                "last_close_": np.asarray(state.pop("last_close_"), dtype=np.float64).copy(),
                "last_date_": date.tz_localize(tz) if tz else date,
                "train_name_": str(state.pop("train_name_")),
            }
            self._import_state(state)
        except KeyError as exc:
            raise GeneratorError(f"{type(self).__name__}: fitted state lacks the entry {exc.args[0]!r}") from None
        if state:
            raise GeneratorError(f"{type(self).__name__}: fitted state has unexpected entries {sorted(state)}")
        vars(self).update(base)
        return self

    def _export_state(self) -> dict[str, np.ndarray]:
        """The :attr:`fitted_attributes` as arrays (override for attributes that are not arrays)."""
        return {name: np.asarray(getattr(self, name)) for name in self.fitted_attributes}

    def _import_state(self, state: dict[str, np.ndarray]) -> None:
        """Set the fitted attributes from :meth:`_export_state`'s arrays, *popping* every entry used."""
        for name in self.fitted_attributes:
            setattr(self, name, state.pop(name))


#: The fitted attributes :meth:`Generator.fit` sets itself.
_BASE_FITTED = ("tickers_", "last_close_", "last_date_", "train_name_")
