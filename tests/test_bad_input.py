"""Bad input never hurts: each kind is a typed error naming the culprit, and nothing is half-written.

One table of ≥ 20 kinds (prices, CSV, configs, checkpoints, Yahoo), then Hypothesis throwing random
malformed panels, CSV files and config sections at the loaders: a typed error or a valid object,
never anything else.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from portfed.data import load_csv
from portfed.data.errors import DataError, DataSourceError
from portfed.data.panel import PricePanel
from portfed.data.yahoo import fetch_yahoo
from portfed.experiment.config import ConfigError, parse_config
from portfed.experiment.party import build_federation
from portfed.experiment.runs import CheckpointError, load_checkpoint, save_checkpoint

ROOT = Path(__file__).resolve().parents[1]
DATES = pd.bdate_range("2020-01-01", periods=6)
BASE = yaml.safe_load((ROOT / "configs" / "default.yaml").read_text())


def _panel(values: np.ndarray | None = None, dates: pd.DatetimeIndex = DATES,
           tickers: tuple[str, ...] = ("A", "B")) -> PricePanel:
    values = np.ones((len(dates), len(tickers), 1)) if values is None else values
    return PricePanel(values, dates, tickers, ("close",))


def _price(value: float) -> Callable[[], object]:
    values = np.ones((6, 2, 1))
    values[3, 1, 0] = value
    return lambda: _panel(values)


def _config(edit: Callable[[dict], None], build: bool = False) -> Callable[[], object]:
    def make() -> object:
        raw = copy.deepcopy(BASE)
        raw["parties"].update(count=2, generators=[None], generator_params={})
        edit(raw)
        config = parse_config(raw)
        return build_federation(config, progress=False) if build else config
    return make


def _write(tmp: Path, name: str, content: bytes) -> Path:
    path = tmp / name
    path.write_bytes(content)
    return path


class _Evil:
    """An arbitrary object: a checkpoint holding one must be refused, never executed."""

    def __reduce__(self) -> tuple:
        return (print, ("executed!",))


def _checkpoint_cases(tmp: Path) -> dict[str, Callable[[], object]]:
    good = save_checkpoint(tmp / "good.pt", "fp-1", {"round": 3, "w": np.arange(4.0)})
    truncated = _write(tmp, "truncated.pt", good.read_bytes()[:40])
    tampered = tmp / "tampered.pt"
    torch.save({"format": 2, "fingerprint": "fp-1", "payload": _Evil()}, tampered)
    foreign = _write(tmp, "foreign.pt", pickle.dumps({"format": 2}, protocol=2))
    return {
        "checkpoint truncated": lambda: load_checkpoint(truncated, "fp-1"),
        "checkpoint of another config": lambda: load_checkpoint(good, "fp-2"),
        "checkpoint tampered (arbitrary object)": lambda: load_checkpoint(tampered, "fp-1"),
        "checkpoint not a torch file": lambda: load_checkpoint(foreign, "fp-1"),
    }


def _yahoo(response: pd.DataFrame | None = None, error: Exception | None = None,
           tickers: tuple[str, ...] = ("AAPL",), cache: Path | None = None) -> Callable[[], object]:
    def download(*args: object, **kwargs: object) -> pd.DataFrame | None:
        if error is not None:
            raise error
        return response
    return lambda: fetch_yahoo(list(tickers), "2020-01-01", "2020-02-01", cache_dir=cache, download=download)


def _cases(tmp: Path) -> dict[str, tuple[Callable[[], object], type[Exception], str]]:
    dup_dates = pd.DatetimeIndex([*DATES[:3], DATES[2], *DATES[4:]])
    yahoo_cache = tmp / "yahoo"
    tmp.mkdir(parents=True, exist_ok=True)
    malformed = _write(tmp, "m.csv", b'date,A\n2020-01-01,1\n"2020-01-02,2\n')
    layout = _write(tmp, "w.csv", b"foo;bar\n1;2\n")
    non_numeric = _write(tmp, "n.csv", b"date,A\n2020-01-01,1\n2020-01-02,x\n")
    unknown = pd.DataFrame({("Close", "AAPL"): [1.0, 2.0], ("Close", "NOSUCH"): [np.nan, np.nan]},
                           index=pd.to_datetime(["2020-01-02", "2020-01-03"]))
    cases: dict[str, tuple[Callable[[], object], type[Exception], str]] = {
        "price NaN": (_price(np.nan), DataError, "nan.*'B'"),
        "price zero": (_price(0.0), DataError, "0.0.*'B'"),
        "price negative": (_price(-1.0), DataError, "-1.0.*'B'"),
        "price infinite": (_price(np.inf), DataError, "inf.*'B'"),
        "duplicate tickers": (lambda: _panel(tickers=("A", "A")), DataError, "duplicate ticker 'A'"),
        "duplicate dates": (lambda: _panel(dates=dup_dates), DataError, "duplicate date 2020-01-03"),
        "unsorted dates": (lambda: _panel(dates=DATES[::-1]), DataError, "unsorted date"),
        "too short for the window": (lambda: _panel().require_length(10), DataError, "shorter than window"),
        "empty universe": (lambda: _panel(np.ones((6, 0, 1)), tickers=()), DataError, "empty universe"),
        "CSV malformed": (lambda: load_csv(malformed), DataError, "m.csv"),
        "CSV wrong layout": (lambda: load_csv(layout), DataError, "w.csv"),
        "CSV non-numeric": (lambda: load_csv(non_numeric), DataError, "'x'.*'A'"),
        "config unknown key": (_config(lambda c: c["federation"].update(roundz=3)), ConfigError, "roundz"),
        "config wrong type": (_config(lambda c: c["federation"].update(rounds="many")), ConfigError, "rounds"),
        "config impossible combination": (
            _config(lambda c: c["federation"].update(parties_per_round=99)), ConfigError, "exceeds parties.count"),
        "config unknown algorithm": (_config(lambda c: c["federation"].update(algorithms=["fedfoo"])),
                                     ConfigError, "fedfoo"),
        "config pool smaller than n_assets": (_config(lambda c: c["data"].update(pool=["A", "B"]), build=True),
                                              DataError, "n_assets=9 exceeds the pool of 2"),
        "config test period longer than the data": (_config(lambda c: c["data"].update(test_days=100000), build=True),
                                                    DataError, "test_days=100000"),
        "Yahoo unknown ticker": (_yahoo(unknown, tickers=("AAPL", "NOSUCH"), cache=yahoo_cache), DataSourceError,
                                 "NOSUCH"),
        "Yahoo empty response": (_yahoo(pd.DataFrame(), cache=yahoo_cache), DataSourceError, "AAPL"),
        "Yahoo network down": (_yahoo(error=ConnectionError("no route to host"), cache=yahoo_cache),
                               DataSourceError, "no route to host"),
    }
    for name, call in _checkpoint_cases(tmp).items():
        cases[name] = (call, CheckpointError, "checkpoint")
    return cases


CASE_NAMES = ["price NaN", "price zero", "price negative", "price infinite", "duplicate tickers", "duplicate dates",
              "unsorted dates", "too short for the window", "empty universe", "CSV malformed", "CSV wrong layout",
              "CSV non-numeric", "config unknown key", "config wrong type", "config impossible combination",
              "config unknown algorithm", "config pool smaller than n_assets",
              "config test period longer than the data", "Yahoo unknown ticker", "Yahoo empty response",
              "Yahoo network down", "checkpoint truncated", "checkpoint of another config",
              "checkpoint tampered (arbitrary object)", "checkpoint not a torch file"]


def test_there_are_at_least_twenty_kinds(tmp_path: Path) -> None:
    assert sorted(_cases(tmp_path)) == sorted(CASE_NAMES) and len(CASE_NAMES) >= 20


@pytest.mark.parametrize("name", CASE_NAMES)
def test_bad_input_is_a_typed_error_naming_the_culprit(name: str, tmp_path: Path, capsys) -> None:
    call, error, culprit = _cases(tmp_path)[name]
    before = {p: p.stat().st_size for p in tmp_path.rglob("*")}
    with pytest.raises(error, match=culprit):
        call()
    after = {p: p.stat().st_size for p in tmp_path.rglob("*")}
    assert after == before, f"{name}: files written or changed on failure: {set(after) ^ set(before)}"
    assert "executed!" not in capsys.readouterr().out


# ---------------------------------------------------------------------- properties
TYPED = (DataError, ConfigError, CheckpointError)
FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64) | st.sampled_from([0.0, -1.0, 1.0, 1e300])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(st.lists(FLOATS, min_size=0, max_size=3), min_size=0, max_size=6),
    day_offsets=st.lists(st.integers(min_value=-3, max_value=10), min_size=0, max_size=6),
    tickers=st.lists(st.sampled_from(["A", "B", "C", "", " "]), min_size=0, max_size=3),
)
def test_random_panels_are_valid_or_a_typed_error(values: list, day_offsets: list, tickers: list) -> None:
    n_assets = len(tickers)
    rows = [row[:n_assets] + [1.0] * (n_assets - len(row)) for row in values]
    dates = pd.Timestamp("2020-01-01") + pd.to_timedelta(day_offsets[: len(rows)], unit="D")
    try:
        panel = PricePanel(np.array(rows, dtype=np.float64).reshape(len(rows), n_assets, 1), dates[: len(rows)]
                           if len(dates) >= len(rows) else pd.bdate_range("2020-01-01", periods=len(rows)),
                           tuple(tickers), ("close",))
    except TYPED:
        return
    assert np.all(np.isfinite(panel.values)) and np.all(panel.values > 0)
    assert panel.dates.is_monotonic_increasing and panel.dates.is_unique
    assert len(set(panel.tickers)) == len(panel.tickers) >= 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=200) | st.text(alphabet="date,AB0123456789.-\n\"x ", max_size=120).map(str.encode))
def test_random_csv_files_are_valid_or_a_typed_error(content: bytes, tmp_path: Path) -> None:
    path = tmp_path / "random.csv"
    path.write_bytes(content)
    try:
        panel = load_csv(path)
    except TYPED:
        return
    assert np.all(np.isfinite(panel.values)) and np.all(panel.values > 0)


SECTION_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True),
                           st.text(max_size=6), st.lists(st.integers(-2, 30), max_size=3))


@settings(max_examples=120, deadline=None)
@given(section=st.sampled_from(["data", "parties", "agent", "federation", "evaluation", "diagnostics"]),
       key=st.sampled_from(["rounds", "count", "n_assets", "window", "learning_rate", "test_days", "pool",
                            "local_steps", "algorithms", "generators", "batch_size", "beta", "k_per_round",
                            "engine", "source", "unknown_key"]),
       value=SECTION_VALUES)
def test_random_config_edits_are_valid_or_a_typed_error(section: str, key: str, value: object) -> None:
    raw = copy.deepcopy(BASE)
    raw.setdefault(section, {})
    if raw[section] is None:
        raw[section] = {}
    raw[section][key] = value
    try:
        parse_config(raw)
    except ConfigError:
        return
