"""benchmarks/paper_verdicts.py: paper 000's claims decided from a ``compare --seeds`` directory of known values."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("paper_verdicts", ROOT / "benchmarks" / "paper_verdicts.py")
verdicts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(verdicts)

ALGORITHMS = ("local", "fedavg", "fedprox", "rfa", "comed", "fedavg+", "fedgeomed+", "fedcomed+")


def _write(out: Path, returns: dict[str, list[float]], collapsed: dict[str, list[bool]], kind: str = "all_cash") -> None:
    """A comparison over seeds 0–2: ``returns[a][s]`` (fractions; Sharpe = 5 × return), the noise-aware
    criterion's flags ``collapsed[a][s]`` (first criterion: the same), each flagged run of ``kind``."""
    rows = []
    for seed in range(3):
        seed_dir = out / f"seed_{seed}"
        collapse = []
        for algorithm in ALGORITHMS:
            flag = collapsed.get(algorithm, [False] * 3)[seed]
            rows.append({"seed": seed, "strategy": algorithm, "hindsight": False,
                         "annualized_return": returns[algorithm][seed], "sharpe": 5 * returns[algorithm][seed],
                         "fapv": 1.0, "max_drawdown": 0.1, "collapsed": flag, "noise_collapsed": flag})
            collapse.append({"algorithm": algorithm, "collapsed": flag, "noise_collapsed": flag,
                             "noise_kind": kind if flag else ""})
            (seed_dir / algorithm).mkdir(parents=True)
            (seed_dir / algorithm / "run.json").write_text(json.dumps({"elapsed_seconds": 1800.0 * (seed + 1)}))
        pd.DataFrame(collapse).to_csv(seed_dir / "collapse.csv", index=False)
    pd.DataFrame(rows).to_csv(out / "seed_metrics.csv", index=False)


def _returns(base: list[float], plus: list[float]) -> dict[str, list[float]]:
    return {a: plus if a in verdicts.FED_PLUS else base for a in ALGORITHMS}


def test_the_papers_outcome_is_reproduced_where_it_holds(tmp_path: Path) -> None:
    """Baselines collapsed by spikes in every seed, Fed+ not, 26 points ahead: every claim reproduced; the
    gap is the paper's statistic (Fed+ rows' mean minus the four baselines' mean) with its paired interval."""
    _write(tmp_path, _returns([0.05, 0.06, 0.07], [0.30, 0.33, 0.33]),
           {a: [True] * 3 for a in verdicts.BASELINES}, kind="spike")
    assert verdicts.main([str(tmp_path)]) == 0
    text = (tmp_path / "verdicts.md").read_text()
    claims = [line for line in text.splitlines() if line.startswith("| 1") or line.startswith("| 2")
              or line.startswith("| 3") or line.startswith("| 4")]
    assert all("**reproduced**" in line for line in claims), claims
    gap = verdicts._gap(pd.read_csv(tmp_path / "seed_metrics.csv"), "annualized_return")
    assert gap.mean == pytest.approx(0.26) and gap.n == 3
    assert "26.00 [" in text
    # Hours: 0.5 + 1 + 1.5 over the three seeds.
    assert "| fedavg | 0.99 | 0.11 |" in text and text.splitlines()[-1].endswith("| 3.0 |")


def test_a_reversed_gap_no_collapse_and_an_interval_holding_zero(tmp_path: Path) -> None:
    _write(tmp_path, _returns([0.30, 0.31, 0.32], [0.28, 0.29, 0.30]), {"fedcomed+": [True, False, False]})
    verdicts.main([str(tmp_path)])
    text = (tmp_path / "verdicts.md").read_text()
    assert "not reproduced (reversed)" in text
    lines = text.splitlines()
    assert "**not reproduced**" in next(line for line in lines if line.startswith("| 1 "))
    assert "fedcomed+ flagged" in next(line for line in lines if line.startswith("| 3 "))
    (tmp_path / "seed_metrics.csv").unlink()
    _write(tmp_path / "b", _returns([0.30, 0.31, 0.32], [0.31, 0.29, 0.33]), {"fedavg": [True, False, False]})
    verdicts.main([str(tmp_path / "b")])
    text = (tmp_path / "b" / "verdicts.md").read_text()
    assert "not reproduced** (no difference)" in text and "**partly**: fedavg" in text


def test_an_unfinished_or_incomplete_directory_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert verdicts.main([str(tmp_path)]) == 1
    assert "no seed_metrics.csv" in capsys.readouterr().err
    pd.DataFrame([{"seed": 0, "strategy": "fedavg"}]).to_csv(tmp_path / "seed_metrics.csv", index=False)
    assert verdicts.main([str(tmp_path)]) == 1
    assert "lacks fedprox" in capsys.readouterr().err
    assert not (tmp_path / "verdicts.md").exists()
