"""Fit once (issue 15): every generator's fitted state round-trips bit for bit, a second comparison into the
same directory fits nothing and gives the same results, a changed seed, universe or generator parameter
fits again (never a stale entry), and a damaged entry is warned about and refitted."""

from __future__ import annotations

import copy
import io
import json
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from portfed.data.panel import PricePanel
from portfed.experiment.config import parse_config
from portfed.experiment.party import build_federation
from portfed.experiment.party.fit_cache import (
    CACHE_DIR,
    ENV,
    FitCache,
    FitCacheError,
    FitCacheWarning,
    entry_bytes,
    fit_fingerprint,
    read_entry,
)
from portfed.experiment.studies import compare
from portfed.generators import GENERATORS, Augmenter, GBMGenerator, GeneratorError, make_generator

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())
ALGORITHMS = ["fedavg", "fedavg+"]
FAST = {
    "gbm": {},
    "vom": {"max_order": 2, "min_support": 10},
    "gan": {"window": 16, "context_days": 8, "steps": 20, "batch_size": 16, "seed": 3},
    "bootstrap": {"mean_block_length": 5.0},
    "garch": {"gjr": True},
}


@pytest.fixture(scope="module")
def train() -> PricePanel:
    rng = np.random.default_rng(1)
    r = rng.multivariate_normal([3e-4, -1e-4, 2e-4], np.diag([1e-4, 4e-4, 2e-4]) + 5e-5, size=299)
    close = 100.0 * np.exp(np.vstack([np.zeros(3), np.cumsum(r, axis=0)]))
    frame = pd.DataFrame(close, index=pd.bdate_range("2001-01-01", periods=300), columns=["A", "B", "C"])
    return PricePanel.from_close(frame, name="toy")


def _raw(**parties) -> dict:
    raw = copy.deepcopy(TINY)
    raw["federation"].update({"algorithms": ALGORITHMS, "rounds": 2})
    raw["diagnostics"]["interpolation_rounds"] = [1]
    raw["parties"].update(parties)
    return raw


@pytest.fixture
def fits(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The generator fits made in this process (every one goes through ``Augmenter.fit``)."""
    made: list[str] = []
    fit = Augmenter.fit

    def counting(self: Augmenter, panel: PricePanel) -> Augmenter:
        made.append(self.generator.name)
        return fit(self, panel)

    monkeypatch.setattr(Augmenter, "fit", counting)
    return made


def _panels(federation) -> list[np.ndarray]:
    return [party.training_panel().values for party in federation.parties]


def _entries(directory: Path) -> list[Path]:
    return sorted((directory / CACHE_DIR).glob("*.npz"))


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_every_generator_round_trips_its_fitted_state_bit_for_bit(name: str, train: PricePanel, tmp_path: Path) -> None:
    fitted = make_generator(name, **FAST[name]).fit(train)
    key = fit_fingerprint(train, make_generator(name, **FAST[name]))
    path = tmp_path / f"{key}.npz"
    path.write_bytes(entry_bytes(key, fitted))
    torch_rng = torch.random.get_rng_state()
    loaded = make_generator(name, **FAST[name]).load_fitted_state(read_entry(path, key))
    assert torch.equal(torch.random.get_rng_state(), torch_rng)  # building the GAN's networks draws nothing
    for seed, other in ((0, loaded), (7, pickle.loads(pickle.dumps(loaded)))):  # as sent to a parallel job
        a, b = fitted.sample(70, seed), other.sample(70, seed)
        np.testing.assert_array_equal(a.values, b.values)
        assert a.dates.equals(b.dates) and a.tickers == b.tickers and a.name == b.name
    settings = {"synthetic_days": 40, "regenerate_every": 3, "seed": 5}
    fresh = Augmenter(make_generator(name, **FAST[name]), **settings).fit(train)
    restored = Augmenter(make_generator(name, **FAST[name]), **settings).load_fitted_state(train, read_entry(path, key))
    for iteration in (0, 4, 9):
        np.testing.assert_array_equal(fresh.panel(iteration).values, restored.panel(iteration).values)
    with pytest.raises(GeneratorError, match="other data"):
        Augmenter(make_generator(name, **FAST[name])).load_fitted_state(train.iloc(slice(0, 299)), read_entry(path, key))


def test_a_fitted_attribute_not_listed_refuses_export_and_a_foreign_state_refuses_import(train: PricePanel) -> None:
    class Extra(GBMGenerator):
        def _fit(self, returns: np.ndarray) -> None:
            super()._fit(returns)
            self.extra_ = {"not": "an array"}

    with pytest.raises(GeneratorError, match=r"\['extra_'\]"):
        Extra().fit(train).fitted_state()
    with pytest.raises(GeneratorError, match="lacks the entry"):
        make_generator("vom").load_fitted_state(GBMGenerator().fit(train).fitted_state())
    state = make_generator("bootstrap").fit(train).fitted_state()
    with pytest.raises(GeneratorError, match="unexpected entries"):
        GBMGenerator().load_fitted_state({**GBMGenerator().fit(train).fitted_state(), "returns_": state["returns_"]})


def test_the_fingerprint_covers_data_universe_generator_and_parameters(train: PricePanel) -> None:
    base = fit_fingerprint(train, GBMGenerator())
    assert base == fit_fingerprint(train, GBMGenerator(independent=False))  # defaults filled in
    bumped = train.values.copy()
    bumped[10, 1, 0] *= 1 + 1e-12
    variants = [
        fit_fingerprint(PricePanel(bumped, train.dates, train.tickers, name=train.name), GBMGenerator()),
        fit_fingerprint(PricePanel(train.values, train.dates + pd.Timedelta(days=1), train.tickers, name="toy"),
                        GBMGenerator()),
        fit_fingerprint(PricePanel(train.values, train.dates, ("A", "B", "D"), name="toy"), GBMGenerator()),
        fit_fingerprint(train.select(["A", "C", "B"]), GBMGenerator()),
        fit_fingerprint(train.iloc(slice(1, None)), GBMGenerator()),
        fit_fingerprint(train.with_name("other"), GBMGenerator()),
        fit_fingerprint(train, GBMGenerator(independent=True)),
        fit_fingerprint(train, make_generator("bootstrap")),
        fit_fingerprint(train, make_generator("gan", seed=1)),
        fit_fingerprint(train, make_generator("gan", seed=2)),
    ]
    assert len({base, *variants}) == len(variants) + 1


@pytest.mark.extended  # CI's second stage (make test-extended): one of make test's slowest, kept out of its 10 minutes
def test_a_second_compare_fits_nothing_and_gives_identical_results(tmp_path: Path, fits: list[str]) -> None:
    config = parse_config(_raw())
    first = compare(config, tmp_path / "run", progress=False)
    assert sorted(fits) == ["gbm", "vom"] and len(_entries(tmp_path / "run")) == 2
    with np.load(tmp_path / "run" / "fedavg+" / "models.npz") as models:
        first_models = {k: models[k] for k in models.files}
    fits.clear()
    second = compare(config, tmp_path / "run", progress=False, n_jobs=2)  # parallel jobs share the loaded fits
    assert fits == []
    fresh = compare(config, tmp_path / "fresh", progress=False, fit_cache=False)
    assert sorted(fits) == ["gbm", "vom"] and not (tmp_path / "fresh" / CACHE_DIR).exists()
    for other in (second, fresh):
        pd.testing.assert_frame_equal(first.table, other.table)
        pd.testing.assert_frame_equal(first.party_metrics, other.party_metrics)
    for directory in ("run", "fresh"):
        with np.load(tmp_path / directory / "fedavg+" / "models.npz") as models:
            for key, value in first_models.items():
                np.testing.assert_array_equal(models[key], value)


@pytest.mark.parametrize("change, refits", [
    ({"seed": 1}, ["gbm", "vom"]),                                   # new universes
    ({"parties": {"n_assets": 2}}, ["gbm", "vom"]),                  # smaller universes
    ({"data": {"pool": ["A", "C", "E", "G", "K"]}}, ["gbm", "vom"]),
    ({"parties": {"generator_params": {"vom": {"max_order": 2, "min_support": 10, "min_count": 5}}}}, ["vom"]),
    ({"parties": {"synthetic_days": 20, "regenerate_every": 3}}, []),  # not an input of the fit
])
def test_a_changed_seed_universe_or_parameter_fits_again_and_never_hits_a_stale_entry(
        tmp_path: Path, fits: list[str], change: dict, refits: list[str]) -> None:
    cache = FitCache.for_run(tmp_path)
    build_federation(parse_config(_raw()), progress=False, cache=cache)
    raw = _raw()
    for section, values in change.items():
        raw[section] = {**raw[section], **values} if isinstance(values, dict) else values
    config = parse_config(raw)
    fits.clear()
    cached = build_federation(config, progress=False, cache=cache)
    assert sorted(fits) == refits
    assert cached.fits.fitted == len(refits) and cached.fits.loaded == 2 - len(refits)
    assert len(_entries(tmp_path)) == 2 + len(refits)
    for a, b in zip(_panels(cached), _panels(build_federation(config, progress=False)), strict=True):
        np.testing.assert_array_equal(a, b)


def test_parties_with_one_fingerprint_share_one_fit(tmp_path: Path, fits: list[str]) -> None:
    raw = _raw(count=4, n_assets=3, generators=["gbm"], generator_params={})
    raw["data"]["pool"] = ["B", "D", "F"]  # every party draws the same universe
    config = parse_config(raw)
    federation = build_federation(config, progress=False, cache=FitCache.for_run(tmp_path))
    assert fits == ["gbm"] and federation.fits.loaded == 3 and len(_entries(tmp_path)) == 1
    for a, b in zip(_panels(federation), _panels(build_federation(config, progress=False)), strict=True):
        np.testing.assert_array_equal(a, b)  # each party still draws its own synthetic blocks


def test_a_state_that_cannot_be_exported_never_fails_the_build(tmp_path: Path, fits: list[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache is an optimisation: parties sharing a fingerprint whose state cannot be exported are fitted."""
    raw = _raw(count=3, n_assets=3, generators=["gbm"], generator_params={})
    raw["data"]["pool"] = ["B", "D", "F"]
    config = parse_config(raw)
    clean = build_federation(config, progress=False)
    fits.clear()

    def refuse(self: GBMGenerator) -> dict:
        raise GeneratorError("no export")

    monkeypatch.setattr(GBMGenerator, "fitted_state", refuse)
    with pytest.warns(Warning):
        federation = build_federation(config, progress=False, cache=FitCache.for_run(tmp_path))
    assert fits == ["gbm"] * 3 and _entries(tmp_path) == []
    for a, b in zip(_panels(federation), _panels(clean), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_damaged_entry_is_a_typed_error_warned_about_and_refitted(tmp_path: Path, fits: list[str]) -> None:
    config = parse_config(_raw())
    fresh = _panels(build_federation(config, progress=False, cache=FitCache.for_run(tmp_path)))
    truncated, tampered = _entries(tmp_path)
    key = truncated.stem
    truncated.write_bytes(truncated.read_bytes()[:300])
    with pytest.raises(FitCacheError, match="unreadable"):
        read_entry(truncated, key)
    with pytest.raises(FitCacheError, match="holds fingerprint"):
        read_entry(tampered, key)
    with zipfile.ZipFile(tampered) as archive:  # a well-formed file whose state was changed
        arrays = {Path(n).stem: np.load(io.BytesIO(archive.read(n)), allow_pickle=False) for n in archive.namelist()}
    name = next(k for k, v in arrays.items() if k.startswith("state.") and v.dtype == np.float64 and v.size)
    arrays[name] = arrays[name] + 1e-9
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    tampered.write_bytes(buffer.getvalue())
    with pytest.raises(FitCacheError, match="digest"):
        read_entry(tampered, tampered.stem)
    assert json.loads(str(arrays["__meta__"]))["fingerprint"] == tampered.stem
    fits.clear()
    with pytest.warns(FitCacheWarning, match="fitting the generator again") as caught:
        rebuilt = build_federation(config, progress=False, cache=FitCache.for_run(tmp_path))
    assert len(caught) == 2 and sorted(fits) == ["gbm", "vom"]
    for a, b in zip(_panels(rebuilt), fresh, strict=True):
        np.testing.assert_array_equal(a, b)
    for path in (truncated, tampered):
        read_entry(path, path.stem)  # rewritten
    fits.clear()
    assert build_federation(config, progress=False, cache=FitCache.for_run(tmp_path)).fits.loaded == 2 and not fits


def test_a_shared_cache_directory_serves_other_run_directories(tmp_path: Path, fits: list[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, str(tmp_path / "shared"))
    config = parse_config(_raw())
    build_federation(config, progress=False, cache=FitCache.for_run(tmp_path / "a"))
    assert len(fits) == 2 and len(list((tmp_path / "shared").glob("*.npz"))) == 2
    fits.clear()
    build_federation(config, progress=False, cache=FitCache.for_run(tmp_path / "b"))
    assert fits == [] and len(_entries(tmp_path / "b")) == 2  # copied into the run directory
