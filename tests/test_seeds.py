"""Seeds as an axis: intervals over seeds (known samples), paired differences, and ``compare --seeds``."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from portfed.cli.main import app
from portfed.evaluation.intervals import paired_interval, t_interval, verdict
from portfed.experiment.config import load_config
from portfed.experiment.reports import TABLE_METRICS
from portfed.experiment.studies.seeds import (
    difference_table,
    differences_figure,
    finished_comparison,
    parse_seeds,
    seed_table,
    seed_table_figure,
)

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
_spec = importlib.util.spec_from_file_location("keep_seeds", CONFIGS.parent / "benchmarks" / "keep_seeds.py")
keep_seeds = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(keep_seeds)
#: Student's t quantiles in closed form (independent of scipy): with 2 degrees of freedom
#: t_p = (2p − 1)/√(2p(1 − p)); with 1 (the Cauchy) t_p = tan(π(p − ½)).
T_975_2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)
T_975_1 = math.tan(math.pi * 0.475)


def test_t_interval_of_known_samples() -> None:
    """[1, 2, 3]: mean 2, s = 1, half-width t_{0.975,2}·1/√3."""
    interval = t_interval([1.0, 2.0, 3.0])
    assert interval.mean == pytest.approx(2.0)
    assert interval.half_width == pytest.approx(T_975_2 / math.sqrt(3), rel=1e-12)
    assert interval.low == pytest.approx(2.0 - T_975_2 / math.sqrt(3), rel=1e-12)
    # A sample of two: t_{0.975,1} = 12.706…, so [0, 1] gives 0.5 ± 12.706·(√0.5/√2) = 0.5 ± 6.353.
    two = t_interval([0.0, 1.0])
    assert two.half_width == pytest.approx(T_975_1 * 0.5, rel=1e-12)


def test_one_seed_has_no_interval_and_bad_values_are_refused() -> None:
    one = t_interval([0.3])
    assert one.mean == 0.3 and math.isnan(one.low) and math.isnan(one.high)
    assert verdict(one) == "one seed: no interval"
    with pytest.raises(ValueError, match="finite"):
        t_interval([1.0, float("nan")])
    with pytest.raises(ValueError, match="at least one"):
        t_interval([])


def test_paired_difference_cancels_the_common_part_of_each_seed() -> None:
    """Seeds with very different levels but a steady difference of about +0.5: the paired interval excludes
    0 ("higher"), while the two unpaired intervals overlap."""
    a = np.array([10.5, -3.4, 40.6])
    b = np.array([10.0, -4.0, 40.0])
    diff = paired_interval(a, b)
    d = a - b
    assert diff.mean == pytest.approx(d.mean())
    assert diff.half_width == pytest.approx(T_975_2 * d.std(ddof=1) / math.sqrt(3), rel=1e-12)
    assert verdict(diff) == "higher"
    assert t_interval(a).low < t_interval(b).high  # unpaired: no separation
    assert verdict(paired_interval(b, a)) == "lower"
    assert verdict(paired_interval([1.0, 2.0, 3.0], [1.5, 1.5, 2.5])) == "no difference"
    with pytest.raises(ValueError, match="same seeds"):
        paired_interval([1.0, 2.0], [1.0])


def test_seed_tables_from_per_seed_values() -> None:
    per_seed = pd.DataFrame([
        {"seed": s, "strategy": name, "hindsight": False, "annualized_return": r, "sharpe": r * 10, "fapv": 1 + r,
         "max_drawdown": 0.1, "collapsed": flag, "noise_collapsed": False}
        for s, rows in enumerate([[("local", 0.10, False), ("fedavg+", 0.20, True)],
                                  [("local", 0.12, False), ("fedavg+", 0.21, False)],
                                  [("local", 0.08, False), ("fedavg+", 0.19, False)]])
        for name, r, flag in rows])
    table = seed_table(per_seed)
    assert table.loc["fedavg+", "annualized_return"] == pytest.approx(0.2)
    assert table.loc["fedavg+", "collapsed_seeds"] == 1 and table.loc["local", "noise_collapsed_seeds"] == 0
    diffs = difference_table(per_seed, ["local", "fedavg+"])
    assert list(diffs["other"]) == ["local"]
    row = diffs.iloc[0]
    assert row["annualized_return"] == pytest.approx(0.1)
    assert row["annualized_return_verdict"] == "Fed+ higher"
    assert difference_table(per_seed, ["local"]).empty
    # drawn: each seed a grey dot (the per-seed values, the per-seed differences), hindsight strategies left out
    hindsight = per_seed[per_seed["strategy"] == "local"].assign(strategy="BCRP", hindsight=True)
    with_bcrp = pd.concat([per_seed, hindsight], ignore_index=True)
    figure = seed_table_figure(seed_table(with_bcrp), with_bcrp)
    assert [t.get_text() for t in figure.axes[0].get_yticklabels()] == ["local", "fedavg+"]
    dots = sorted(x for line in figure.axes[0].lines if line.get_color() == "0.65" for x in line.get_xdata())
    assert dots == pytest.approx(sorted(100 * per_seed["annualized_return"]))
    figure = differences_figure(diffs, per_seed)
    dots = sorted(x for line in figure.axes[0].lines if line.get_color() == "0.65" for x in line.get_xdata())
    assert dots == pytest.approx([100 * d for d in (0.21 - 0.12, 0.20 - 0.10, 0.19 - 0.08)])


def test_parse_seeds() -> None:
    assert parse_seeds("0, 1,2") == [0, 1, 2]
    for bad, message in (("", "no seed"), ("0,x", "integers"), ("0,0", "repeats"), ("-1", "not in"),
                         (str(2**63), "not in")):
        with pytest.raises(ValueError, match=message):
            parse_seeds(bad)


@pytest.mark.extended  # CI's second stage (make test-extended): one of make test's slowest, kept out of its 10 minutes
def test_compare_tiny_over_two_seeds_writes_table1_with_intervals(tmp_path: Path) -> None:
    """``portfed compare configs/tiny.yaml --seeds 0,1``: one comparison per seed, Table 1 over seeds with
    intervals and the paired Fed+ differences; each seed's row is its own comparison's Table 1."""
    out = tmp_path / "tiny_seeds"
    command = ["compare", str(CONFIGS / "tiny.yaml"), "--seeds", "0,1", "-q", "--set", "diagnostics.interpolation_rounds=[]"]
    result = CliRunner().invoke(app, [*command, "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "table1_seeds.csv", index_col=0)
    per_seed = pd.read_csv(out / "seed_metrics.csv")
    for seed in (0, 1):
        own = pd.read_csv(out / f"seed_{seed}" / "table1.csv", index_col=0)
        mine = per_seed[(per_seed["seed"] == seed) & (per_seed["strategy"] == "fedavg+")].iloc[0]
        assert mine["annualized_return"] == pytest.approx(own.loc["fedavg+", TABLE_METRICS["annualized_return"]])
    assert per_seed[per_seed["strategy"] == "fedavg"]["annualized_return"].nunique() == 2  # the seeds differ
    row = table.loc["fedavg"]
    assert row["annualized_return_low"] < row["annualized_return"] < row["annualized_return_high"]
    markdown = (out / "table1_seeds.md").read_text()
    assert "95 % interval" in markdown and "[" in markdown
    assert (out / "table1_seeds.png").stat().st_size > 0 and (out / "differences.png").stat().st_size > 0
    diffs = pd.read_csv(out / "differences.csv")
    assert set(diffs["other"]) == {"local", "fedavg"} and set(diffs["fed_plus"]) == {"fedavg+"}
    assert "Paired over seeds" in result.output

    # --resume reads a finished seed back, not re-run: a copy with only the files read back (benchmarks/
    # keep_seeds.py, no training state) is enough, and the numbers are the ones the seeds wrote
    kept = tmp_path / "kept"
    assert set(keep_seeds.keep(out, kept)) == {"seed_0", "seed_1"}
    assert not list(kept.rglob("checkpoint.pt")) and not list(kept.rglob("rounds.csv"))
    again = CliRunner().invoke(app, [*command, "--out", str(kept), "--resume"])
    assert again.exit_code == 0, again.output
    assert (kept / "seed_metrics.csv").read_bytes() == (out / "seed_metrics.csv").read_bytes()
    assert not list(kept.rglob("checkpoint.pt"))  # a sub-run resumed without one would train anew
    config = load_config(kept / "seed_0" / "config.yaml")
    names = config.federation.algorithms
    assert finished_comparison(config, kept / "seed_0", names) is not None
    longer = config.model_copy(update={"federation": config.federation.model_copy(update={"rounds": 99})})
    assert finished_comparison(longer, kept / "seed_0", names) is None  # resumed for more rounds: trained on
    assert finished_comparison(config, kept / "seed_0", names[:1]) is None  # other algorithms: compared anew
    assert finished_comparison(config.model_copy(update={"seed": 5}), kept / "seed_0", names) is None


def test_seeds_option_refuses_bad_seeds_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["compare", str(CONFIGS / "tiny.yaml"), "--seeds", "0,0", "--out",
                                      str(tmp_path / "x")])
    assert result.exit_code == 1
    assert "repeats a seed" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x").exists()
