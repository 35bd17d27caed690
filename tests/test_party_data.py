"""Each party its own data: a CSV per party, explicit universes, paths read from the config's directory,
``max_ffill`` for CSVs, and ``parties.csv`` naming every party's tickers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from portfed.cli.main import app
from portfed.data import DataError, load_csv
from portfed.experiment.config import ConfigError, load_config
from portfed.experiment.party import party_table

DAYS = 90
BOOKS = {"alpha": ["AAA", "ABB", "ACC"], "beta": ["BAA", "BBB", "BCC"], "gamma": ["CAA", "CBB", "CCC"]}


def _write_book(path: Path, tickers: list[str], seed: int, hole: bool = False) -> None:
    """A wide CSV of ``DAYS`` business days of positive closes; ``hole``: one empty cell mid-file."""
    rng = np.random.default_rng(seed)
    closes = 100 * np.exp(np.cumsum(rng.normal(0.0, 0.01, (DAYS, len(tickers))), axis=0))
    frame = pd.DataFrame(closes, index=pd.bdate_range("2020-01-01", periods=DAYS), columns=tickers).round(4)
    text = frame.to_csv(index_label="date")
    if hole:  # ABB has no price on the 30th day
        lines = text.splitlines()
        cells = lines[30].split(",")
        cells[2] = ""
        lines[30] = ",".join(cells)
        text = "\n".join(lines) + "\n"
    path.write_text(text)


def _config(tmp_path: Path, **parties) -> Path:
    """``tmp_path/data/<book>.csv`` and a config in ``tmp_path/configs`` naming them by relative path."""
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for seed, (book, tickers) in enumerate(BOOKS.items()):
        _write_book(data / f"{book}.csv", tickers, seed, hole=book == "alpha")
    raw = {
        "experiment": "federated", "seed": 0, "torch_threads": 1,
        "parties": {"count": 3, "generators": [None],
                    "markets": [{"source": "../data/alpha.csv", "test_days": 20, "options": {"max_ffill": 1}},
                                {"source": "../data/beta.csv", "test_days": 20},
                                {"source": "../data/gamma.csv", "test_days": 20}],
                    "universes": [BOOKS["alpha"], BOOKS["beta"][::-1], BOOKS["gamma"]], **parties},
        "agent": {"network": "cnn", "window": 5, "batch_size": 8},
        "federation": {"algorithms": ["fedavg+"], "rounds": 2, "local_steps": 2},
        "evaluation": {"baselines": ["ucrp", "ubah"]},
    }
    folder = tmp_path / "configs"
    folder.mkdir(exist_ok=True)
    path = folder / "books.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_csv_per_party_federation_runs_from_a_config_in_another_directory(tmp_path, monkeypatch):
    config = _config(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # neither the config's nor the data's directory
    result = CliRunner().invoke(app, ["run", str(config), "--out", "run", "--quiet"])
    assert result.exit_code == 0, result.output
    parties = pd.read_csv(elsewhere / "run" / "parties.csv")
    assert parties["tickers"].tolist() == ["AAA ABB ACC", "BCC BBB BAA", "CAA CBB CCC"]
    assert [Path(s).name for s in parties["source"]] == ["alpha.csv", "beta.csv", "gamma.csv"]
    metrics = pd.read_csv(elsewhere / "run" / "party_metrics.csv")
    assert sorted(metrics.loc[metrics["strategy"] == "fedavg+", "party"]) == [0, 1, 2]
    # The resolved config names the files absolutely: the run directory reads the same data from anywhere.
    assert all(Path(m["source"]).is_absolute() for m in yaml.safe_load((elsewhere / "run" / "config.yaml")
                                                                        .read_text())["parties"]["markets"])


def test_relative_csv_sources_are_read_from_the_config_directory(tmp_path):
    config = load_config(_config(tmp_path))
    assert [m.source for m in config.parties.markets] == [str(tmp_path / "data" / f"{b}.csv") for b in BOOKS]


def test_a_missing_price_is_refused_by_name_without_max_ffill_and_filled_with_it(tmp_path):
    _config(tmp_path)
    book = tmp_path / "data" / "alpha.csv"
    with pytest.raises(DataError, match="ABB") as info:
        load_csv(book)
    assert info.value.ticker == "ABB"
    filled = load_csv(book, max_ffill=1)
    close = filled.values[:, :, 0]
    day = 29  # line 30 of the file (the header is line 0) is data row 29
    assert close[day, 1] == close[day - 1, 1] and close[day, 0] != close[day - 1, 0]
    with pytest.raises(DataError, match=r"'ABB' misses 1 consecutive days .* more than max_ffill=0"):
        load_csv(book, max_ffill=0)


def test_mixed_sources_and_explicit_universes_are_recorded(tmp_path):
    path = _config(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["parties"]["markets"][2] = {"source": "djia", "test_days": 20}
    raw["parties"]["universes"][2] = ["L", "O", "X"]
    path.write_text(yaml.safe_dump(raw))
    table = party_table(load_config(path))
    assert table["source"].tolist()[2] == "djia"
    assert table["tickers"].tolist()[2] == "L O X"
    assert table["n_assets"].tolist() == [3, 3, 3]


@pytest.mark.parametrize(("change", "message"), [
    ({"universes": [["AAA"], ["BAA"]]}, "2 lists for parties.count=3"),
    ({"universes": [["AAA", "AAA"], ["BAA"], ["CAA"]]}, r"universes\[0\] lists ticker 'AAA' twice"),
    ({"universes": [["AAA"], [], ["CAA"]]}, r"universes\[1\] is empty"),
    ({"n_assets": 3}, "parties.n_assets and parties.universes are both given"),
])
def test_bad_universes_are_named(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message):
        load_config(_config(tmp_path, **change))


def test_a_ticker_outside_its_partys_market_is_named(tmp_path):
    config = load_config(_config(tmp_path, universes=[["AAA"], ["AAA"], ["CAA"]]))
    with pytest.raises(DataError, match=r"parties.universes\[1\]: ticker 'AAA' is not in party 1's market"):
        party_table(config)
