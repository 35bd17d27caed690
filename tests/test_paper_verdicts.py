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


def _write_fig1c(out: Path, own_minus_aggregate: list[float], aggregate_minus_dashed: list[float]) -> None:
    """Every baseline's Fig. 1c rows: two parties, two rounds, λ ∈ {0, 0.5, 1}; per seed s the given differences
    (fractions a day) between λ = 0 and λ = 1 and between λ = 1 and the dashed line, on top of party noise that
    the means over parties and rounds cancel."""
    for seed in range(3):
        for algorithm in verdicts.BASELINES:
            rows = []
            for round_index in (9, 19):
                for party, noise in ((0, 1e-3), (1, -1e-3)):
                    aggregate = 2e-4 + noise
                    for lam, value in ((0.0, aggregate + own_minus_aggregate[seed]), (0.5, aggregate), (1.0, aggregate)):
                        rows.append({"round": round_index, "party": party, "lam": lam, "log_return": value,
                                     "previous_global_log_return": aggregate - aggregate_minus_dashed[seed]})
            pd.DataFrame(rows).to_csv(out / f"seed_{seed}" / algorithm / "interpolation.csv", index=False)


def test_fig_1c_decides_claim_5_from_every_seeds_interpolation_rows(tmp_path: Path) -> None:
    """5a: own model minus aggregate (λ = 0 minus λ = 1), 5b: aggregate minus the previous aggregate, party and
    round means per seed in basis points a day, t intervals over seeds; a missing Fig. 1c says so."""
    _write(tmp_path, _returns([0.05, 0.06, 0.07], [0.30, 0.33, 0.33]), {})
    _write_fig1c(tmp_path, [2.0e-4, 2.1e-4, 2.2e-4], [-1.0e-4, -1.1e-4, -0.9e-4])
    assert verdicts.main([str(tmp_path)]) == 0
    lines = (tmp_path / "verdicts.md").read_text().splitlines()
    five_a = next(line for line in lines if line.startswith("| 5a "))
    five_b = next(line for line in lines if line.startswith("| 5b "))
    assert "fedavg 2.10 [1.85, 2.35]" in five_a and five_a.endswith("**reproduced** |")
    assert "fedavg -1.00 [-1.25, -0.75]" in five_b and "comed" not in five_b and five_b.endswith("**reproduced** |")

    _write(tmp_path / "b", _returns([0.05, 0.06, 0.07], [0.30, 0.33, 0.33]), {})
    _write_fig1c(tmp_path / "b", [-2.0e-4, -2.1e-4, -2.2e-4], [1.0e-4, -1.0e-4, 0.5e-4])
    verdicts.main([str(tmp_path / "b")])
    lines = (tmp_path / "b" / "verdicts.md").read_text().splitlines()
    assert "reversed: comed, fedavg, fedprox, rfa" in next(line for line in lines if line.startswith("| 5a "))
    assert "(no difference)" in next(line for line in lines if line.startswith("| 5b "))

    _write(tmp_path / "c", _returns([0.05, 0.06, 0.07], [0.30, 0.33, 0.33]), {})  # no Fig. 1c rows at all
    verdicts.main([str(tmp_path / "c")])
    assert "not measured: no Fig. 1c rows" in (tmp_path / "c" / "verdicts.md").read_text()


def test_one_seed_gives_the_numbers_and_no_verdict(tmp_path: Path) -> None:
    """Every claim's verdict rests on an interval over seeds: a directory of one finished seed gets none."""
    _write(tmp_path, _returns([0.05, 0.06, 0.07], [0.30, 0.33, 0.33]),
           {a: [True] * 3 for a in verdicts.BASELINES}, kind="spike")
    per_seed = pd.read_csv(tmp_path / "seed_metrics.csv")
    per_seed[per_seed["seed"] == 0].to_csv(tmp_path / "seed_metrics.csv", index=False)
    assert verdicts.main([str(tmp_path)]) == 0
    text = (tmp_path / "verdicts.md").read_text()
    claims = [line for line in text.splitlines() if line[:3] in {"| 1", "| 2", "| 3", "| 4", "| 5"}]
    assert len(claims) == 6 and all(  # 1, 2, 3, 4 twice, 5 (no Fig. 1c rows here)
        line.endswith(f"| {verdicts.NO_VERDICT} |") for line in claims), claims
    assert "ours (one seed)" in text
