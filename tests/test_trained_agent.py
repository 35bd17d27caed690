"""A trained agent beyond Table 1, on one tiny trained run: the backtest's ``weights.csv`` and composition
figure, ``portfed allocate``, ``portfed export`` and the TensorBoard scalars."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from portfed.cli.main import app
from portfed.data import save_csv_long
from portfed.deploy import (
    MissingTickersError,
    PriceGapError,
    RunDirectoryError,
    ShortHistoryError,
    StalePricesError,
    allocate,
    export_policy,
    load_trained_party,
)
from portfed.envs.costs import transaction_remainder
from portfed.experiment.config import parse_config
from portfed.experiment.studies import compare

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())


def tiny_config() -> dict:
    raw = copy.deepcopy(TINY)
    raw["data"]["test_days"] = 12
    raw["parties"].update({"count": 2, "generators": [None], "generator_params": {}})
    raw["federation"].update({"algorithms": ["local", "fedavg+"], "rounds": 2, "local_steps": 3,
                              "checkpoint_every": 2})
    raw["diagnostics"]["interpolation_rounds"] = []
    raw["evaluation"]["composition_party"] = 1
    raw["tracking"] = {"tensorboard": True}
    return raw


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("trained")
    compare(parse_config(tiny_config()), out, progress=False)
    return out


def test_weights_csv_reproduces_the_portfolio_values(run: Path) -> None:
    trained = load_trained_party(run, "fedavg+", 0)
    config = trained.config
    weights = pd.read_csv(run / "fedavg+" / "weights.csv", parse_dates=["date"])
    values = pd.read_csv(run / "fedavg+" / "portfolio_values.csv", index_col="date", parse_dates=True)
    assert sorted(set(weights["party"])) == [0, 1]
    for k in (0, 1):
        party = load_trained_party(run, "fedavg+", k)
        rows = weights[weights["party"] == k].set_index("date")
        held = rows[["cash", *party.tickers]].to_numpy()
        np.testing.assert_allclose(held.sum(axis=1), 1.0, atol=1e-12)
        close = party.market.panel.select(list(party.tickers)).close
        relatives = (close / close.shift(1)).loc[rows.index].to_numpy()  # y_t of each decision day t
        nxt = (close.shift(-1) / close).loc[rows.index].to_numpy()  # y_{t+1}
        value = 1.0
        drifted = np.eye(held.shape[1])[0]  # all cash before the first trade
        path = [value]
        for t in range(len(rows)):
            if t > 0:
                y = np.concatenate([[1.0], relatives[t]])
                drifted = y * held[t - 1] / (y @ held[t - 1])
            mu = transaction_remainder(drifted, held[t], config.agent_config().commission)
            assert rows["cost"].iloc[t] == pytest.approx(1.0 - mu, abs=1e-12)
            value *= mu * (np.concatenate([[1.0], nxt[t]]) @ held[t])
            path.append(value)
        np.testing.assert_allclose(path, values[f"fedavg+/party_{k}"].to_numpy(), rtol=1e-10)
        np.testing.assert_allclose(rows["value"].to_numpy(), path[:-1], rtol=1e-10)
    assert (run / "weights_party_1.png").stat().st_size > 0


def test_allocate_equals_the_backtest_on_the_same_day(run: Path) -> None:
    trained = load_trained_party(run, "fedavg+", 1)
    backtest = trained.backtest
    # 12 held-out days, 12 decisions: the first at the last training close
    assert backtest is not None and len(backtest) == 12 and backtest.index[0] == trained.market.train_end
    for day in (backtest.index[0], backtest.index[5], backtest.index[-1]):
        allocation = allocate(trained, as_of=day)
        assert allocation.weights.sum() == pytest.approx(1.0, abs=1e-12)
        assert allocation.assets == ["cash", *trained.tickers]
        np.testing.assert_allclose(allocation.weights, backtest.loc[day, ["cash", *trained.tickers]].to_numpy(),
                                   rtol=0, atol=1e-12)
    first = allocate(trained, as_of=backtest.index[0])
    np.testing.assert_array_equal(first.current, np.eye(len(trained.tickers) + 1)[0])  # starts in cash
    later = allocate(trained)  # the last price date: the day after the backtest's last decision
    assert later.date == trained.market.panel.dates[-1]
    np.testing.assert_array_equal(later.current, backtest[["cash", *trained.tickers]].iloc[-1].to_numpy())


def _prices_csv(trained, path: Path, drop_tickers=(), drop_rows=()) -> Path:
    panel = trained.market.panel
    keep = [t for t in panel.tickers if t not in drop_tickers]
    rows = [i for i in range(len(panel)) if i not in set(drop_rows)]
    close = panel.select(keep).close.iloc[rows]
    close.index.name = "date"
    close.to_csv(path)
    return path


def test_bad_inputs_raise_typed_errors(run: Path, tmp_path: Path) -> None:
    from portfed.data import load_csv

    trained = load_trained_party(run, "local", 0)
    n = len(trained.market.panel)
    missing = load_csv(_prices_csv(trained, tmp_path / "m.csv", drop_tickers=trained.tickers[1:2]))
    with pytest.raises(MissingTickersError, match=trained.tickers[1]) as info:
        allocate(trained, missing)
    assert info.value.missing == (trained.tickers[1],)
    gap = load_csv(_prices_csv(trained, tmp_path / "g.csv", drop_rows=range(n - 5, n - 1)))  # 5 business days apart
    with pytest.raises(PriceGapError, match="gap") as info:
        allocate(trained, gap)
    assert info.value.date == trained.market.panel.dates[-1]
    last = trained.market.panel.dates[-1]
    with pytest.raises(StalePricesError, match="business days") as info:
        allocate(trained, as_of=last + pd.offsets.BDay(4))
    assert info.value.date == last
    assert allocate(trained, as_of=last + pd.offsets.BDay(3)).date == last  # within the default 3 days
    with pytest.raises(ShortHistoryError):
        allocate(trained, as_of=trained.market.panel.dates[2])
    with pytest.raises(RunDirectoryError, match="no trained algorithm 'fedavg'") as err:
        load_trained_party(run, "fedavg", 0)
    assert err.value.algorithm == "fedavg"
    with pytest.raises(RunDirectoryError, match="no party 2") as err:
        load_trained_party(run, "local", 2)
    assert err.value.party == 2
    with pytest.raises(RunDirectoryError, match="no config.yaml"):
        load_trained_party(tmp_path, "local", 0)


def test_cli_allocate_prints_and_writes_the_weights(run: Path, tmp_path: Path) -> None:
    trained = load_trained_party(run, "fedavg+", 0)
    day = trained.backtest.index[3]
    prices = tmp_path / "prices.csv"
    save_csv_long(trained.market.panel.select(list(trained.tickers)), prices)
    current = tmp_path / "current.json"
    current.write_text(json.dumps({"cash": 0.5, **{t: 0.5 / len(trained.tickers) for t in trained.tickers}}))
    runner = CliRunner()
    result = runner.invoke(app, ["allocate", str(run), "--algorithm", "fedavg+", "--party", "0", "--prices",
                                 str(prices), "--as-of", str(day.date()), "--current", str(current),
                                 "--out", str(tmp_path / "alloc")])
    assert result.exit_code == 0, result.output
    assert "target weights" in result.output and trained.tickers[0] in result.output
    written = pd.read_csv(tmp_path / "alloc" / f"fedavg+_party_0_{day.date()}.csv")
    assert list(written["asset"]) == ["cash", *trained.tickers]
    assert written["weight"].sum() == pytest.approx(1.0)
    np.testing.assert_allclose(written["current"], [0.5] + [0.5 / len(trained.tickers)] * len(trained.tickers))
    np.testing.assert_allclose(written["change"], written["weight"] - written["current"])
    spec = json.loads((tmp_path / "alloc" / f"fedavg+_party_0_{day.date()}.json").read_text())
    assert spec["input_scale"] == "centred" and spec["prices_through"] == str(day.date())
    np.testing.assert_allclose(list(spec["weights"].values()), written["weight"])
    bad = runner.invoke(app, ["allocate", str(run), "--algorithm", "nope", "--party", "0"])
    assert bad.exit_code == 1 and "no trained algorithm 'nope'" in bad.output
    stale = runner.invoke(app, ["allocate", str(run), "-a", "local", "-p", "0", "--as-of", "2030-01-02"])
    assert stale.exit_code == 1 and "business days before the as-of date 2030-01-02" in stale.output


DESK = """
import json, sys
import numpy as np, pandas as pd, torch
spec = json.load(open(sys.argv[1] + "/policy.json"))
policy = torch.jit.load(sys.argv[1] + "/" + spec["files"]["torchscript"])
close = pd.read_csv(sys.argv[2], index_col=0, parse_dates=True)[spec["tickers"]]
window = close.iloc[-spec["window"]:].to_numpy()              # (window, assets)
history = (window / window[-1]).T[None, None].astype(np.float32)  # (1, features=1, assets, window)
current = np.array([json.loads(sys.argv[3])], dtype=np.float32)
weights = policy(torch.from_numpy(history), torch.from_numpy(current))[0].double().numpy()
batch = policy(torch.from_numpy(np.repeat(history, 3, 0)), torch.from_numpy(np.repeat(current, 3, 0)))
assert batch.shape == (3, len(spec["assets"])) and np.allclose(batch[2].double().numpy(), weights)
import onnxruntime
session = onnxruntime.InferenceSession(sys.argv[1] + "/" + spec["files"]["onnx"])
(onnx_weights,) = session.run(["weights"], {"history": history, "current": current})
assert np.allclose(onnx_weights[0], weights, atol=1e-6), (onnx_weights, weights)
assert "portfed" not in sys.modules
print(json.dumps(weights.tolist()))
"""


@pytest.mark.extended  # CI's second stage (make test-extended): one of make test's slowest, kept out of its 10 minutes
def test_exported_models_run_without_portfed_and_match_allocate(run: Path, tmp_path: Path) -> None:
    trained = load_trained_party(run, "fedavg+", 1)
    paths = export_policy(trained, tmp_path / "desk", onnx=True)
    spec = json.loads(paths["spec"].read_text())
    assert spec["tickers"] == list(trained.tickers) and spec["window"] == trained.agent.window
    assert spec["input_scale"] == "centred" and spec["features"] == ["close"]
    assert spec["commission"] == trained.agent.commission
    day = trained.backtest.index[4]
    expected = allocate(trained, as_of=day)
    close = trained.market.panel.select(list(trained.tickers)).close.loc[:day]
    close.to_csv(tmp_path / "close.csv")
    # A clean interpreter that never imports portfed: plain torch, numpy and pandas.
    done = subprocess.run([sys.executable, "-I", "-c", DESK, str(tmp_path / "desk"), str(tmp_path / "close.csv"),
                           json.dumps(expected.current.tolist())], capture_output=True, text=True, check=False,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    weights = np.array(json.loads(done.stdout))
    np.testing.assert_allclose(weights, expected.weights, atol=1e-6)  # float32 model, float64 renormalized
    result = CliRunner().invoke(app, ["export", str(run), "-a", "fedavg+", "-p", "1", "--out", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "c" / "policy.pt").is_file() and (tmp_path / "c" / "policy.json").is_file()


def test_tensorboard_holds_every_rounds_scalars(run: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for name in ("local", "fedavg+"):
        rounds = pd.read_csv(run / name / "rounds.csv")
        events = EventAccumulator(str(run / name / "tensorboard")).Reload()
        tags = set(events.Tags()["scalars"])
        assert {"reward/mean", "reward/party_0", "reward/party_1", "aggregation_change/mean",
                "distance_to_global/mean", "distance_to_global/party_1", "quarantined", "server/iterations",
                "server/converged"} <= tags
        for tag, column in (("reward/party_1", "train_reward"), ("distance_to_global/party_0", "distance_to_global")):
            k = int(tag[-1])
            logged = [(e.step, e.value) for e in events.Scalars(tag)]
            expected = rounds.loc[rounds["party"] == k, ["round", column]].to_numpy()
            assert [s for s, _ in logged] == expected[:, 0].astype(int).tolist()
            np.testing.assert_allclose([v for _, v in logged], expected[:, 1], rtol=1e-6)
        means = [e.value for e in events.Scalars("reward/mean")]
        np.testing.assert_allclose(means, rounds.groupby("round")["train_reward"].mean(), rtol=1e-6)


def test_report_writes_a_self_contained_tearsheet_per_algorithm(run: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == ["fedavg+.html", "index.html", "local.html",
                                                                         "plotly.min.js"]
    page = (tmp_path / "report" / "fedavg+.html").read_text()
    for section in ("Held-out metrics, parties side by side", "Cumulative returns", "Drawdowns", "Rolling Sharpe",
                    "Monthly returns", "Composition", "Mean daily turnover", "UCRP (mean over parties)",
                    "Sortino ratio (annualized)", "Calmar ratio", "Annualized volatility (%)",
                    "Tracking error vs UCRP (annualized, %)", "Training collapse:", "First criterion:"):
        assert section in page, section
    # One shared plotly.js beside the pages, loaded by a relative path: nothing fetched, nothing inlined.
    assert "<script src='plotly.min.js'" in page and "http" not in page.split("<body>")[0]
    assert "Plotly.newPlot" in page and len(page) < 1_000_000
    assert (tmp_path / "report" / "plotly.min.js").read_text().startswith("/**")
    for default in ("Observations", "_fedavg+", "annualized_return", "mean_cash"):  # skfolio's and our own names
        assert default not in page, default
    summary = (tmp_path / "report" / "index.html").read_text()
    assert "href='fedavg+.html'" in summary and "Table 1" in summary
    missing = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert missing.exit_code == 1 and "no config.yaml" in missing.output
