"""`portfed supervised list|run` on a tiny config, config errors, resume."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from portfed.cli.main import app

TINY = {
    "name": "tiny",
    "title": "tiny benchmark",
    "source": "test",
    "seeds": [0, 1],
    "training": {"rounds": 3, "local_steps": 2, "batch_size": 5, "learning_rate": 0.05, "k_per_round": 3,
                 "stragglers": 0.5, "track_improvement": True},
    "algorithms": [{"label": "FedAvg", "name": "fedavg"},
                   {"label": "FedAvg+", "name": "fedavg+", "grid": {"sigma": [0.01, 1.0]}},
                   {"label": "FedAMP", "name": "fedamp"},
                   {"label": "SCAFFOLD", "name": "scaffold"},
                   {"label": "qFedAvg", "name": "qfedavg"}],
    "rows": [{"label": "syn", "data": {"kind": "synthetic", "n_parties": 4, "max_samples": 80},
              "paper": {"FedAvg": 81.5}},
             {"label": "digits", "data": {"kind": "images", "source": "digits", "n_parties": 3, "partition": "iid",
                                          "negated_fraction": 0.34},
              "faults": [{"kind": "scale", "parties": [0], "factor": 5.0}]}],
}


def _write(tmp_path, config: dict) -> str:
    path = tmp_path / f"{config['name']}.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    return str(path)


def test_run_writes_table_curves_and_resumes(tmp_path) -> None:
    runner = CliRunner()
    config, out = _write(tmp_path, TINY), tmp_path / "out"
    result = runner.invoke(app, ["supervised", "run", config, "--out", str(out), "-q", "--jobs", "1"])
    assert result.exit_code == 0, result.output
    table = (out / "table.md").read_text()
    assert "| syn | FedAvg | " in table and "81.5" in table
    assert "is not implemented in portfed" in table and "negated parties" in table
    assert (out / "curves_syn.png").exists() and (out / "curves_digits.png").exists()
    lines = list(csv.DictReader((out / "table.csv").open()))
    assert len(lines) == 10
    assert (out / "attention_syn_FedAMP.png").exists()
    for path in (out / "runs").rglob("*.json"):  # FedAMP stores its final ξ (rows of weights), not the models
        trace = json.loads(path.read_text())["trace"]
        assert "party_models" not in trace
        if "FedAMP" in path.parts:
            xi = np.array(trace["message_weights"])
            assert xi.shape in ((4, 4), (3, 3)) and np.allclose(xi.sum(axis=1), 1.0) and np.all(xi > 0)
        else:
            assert trace["message_weights"] is None
    chosen = [line["chosen"] for line in lines if line["algorithm"] == "FedAvg+"]
    assert all("sigma" in c for c in chosen)
    stored = sorted(p.name for p in (out / "runs").rglob("*.json"))
    # rows × (FedAvg, FedAvg+ 2 grid + 2 seeds − 1 shared, FedAMP, SCAFFOLD); qFedAvg is paper-only
    assert len(stored) == 2 * (2 + 2 + 1 + 2 + 2)
    again = runner.invoke(app, ["supervised", "run", config, "--out", str(out), "-q", "--jobs", "1"])
    assert again.exit_code == 0
    assert sorted(p.name for p in (out / "runs").rglob("*.json")) == stored
    assert list(csv.DictReader((out / "table.csv").open())) == lines


def test_config_errors_name_the_bad_key(tmp_path) -> None:
    runner = CliRunner()
    bad = TINY | {"name": "bad", "training": TINY["training"] | {"learning_rate": -1}}
    result = runner.invoke(app, ["supervised", "run", _write(tmp_path, bad), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and "training.learning_rate" in result.output
    unknown = TINY | {"name": "unknown", "rows": [TINY["rows"][0] | {"paper": {"Nope": 1.0}}]}
    result = runner.invoke(app, ["supervised", "run", _write(tmp_path, unknown), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and "Nope" in result.output
    knob = TINY | {"name": "knob", "algorithms": [{"label": "A", "name": "fedavg", "params": {"rho": 2.0}}]}
    result = runner.invoke(app, ["supervised", "run", _write(tmp_path, knob), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and "'A'" in result.output and "rho" in result.output
    outside = TINY | {"name": "outside", "rows": [TINY["rows"][1] | {"faults": [{"kind": "sign_flip", "parties": [7]}]}]}
    result = runner.invoke(app, ["supervised", "run", _write(tmp_path, outside), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and "names parties [7], outside the 3 parties" in result.output
    kind = TINY | {"name": "kind", "rows": [TINY["rows"][1] | {"faults": [{"kind": "explode", "parties": [0]}]}]}
    result = runner.invoke(app, ["supervised", "run", _write(tmp_path, kind), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and "unknown fault kind 'explode'" in result.output
    typo = TINY | {"name": "typo", "algorithms": [{"label": "A", "name": "fedavgg"}], "rows": [TINY["rows"][1]]}
    result = runner.invoke(app, ["supervised", "run", _write(tmp_path, typo), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and "unknown name 'fedavgg'" in result.output
    for key, value in (("fractions", [0.9, 0.9, -0.8]), ("fractions", [0.5, 0.2, 0.2]), ("group_sizes", [])):
        data = {"kind": "images", "n_parties": 4, "partition": "group_dominant", "group_sizes": [40, 30], key: value}
        bad_data = TINY | {"name": "data", "rows": [{"label": "r", "data": data}]}
        result = runner.invoke(app, ["supervised", "run", _write(tmp_path, bad_data), "--out", str(tmp_path / "o")])
        assert result.exit_code == 1 and key in result.output, result.output
    crowd = TINY | {"name": "crowd", "training": TINY["training"] | {"k_per_round": 9}}
    result = runner.invoke(app, ["supervised", "run", _write(tmp_path, crowd), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and "k_per_round=9 exceeds" in result.output
    assert not (tmp_path / "o").exists()  # a bad config writes nothing


def test_list_shows_configs(tmp_path) -> None:
    _write(tmp_path, TINY)
    result = CliRunner().invoke(app, ["supervised", "list", "--dir", str(tmp_path)])
    assert result.exit_code == 0 and "tiny" in result.output and "FedAvg+" in result.output
    words = " ".join(result.output.split())  # lines are wrapped at 80 columns
    assert "digits: scikit-learn's 1,797 8×8 digits (a small stand-in, not MNIST)" in words
    assert "synthetic: Synthetic(ζ, β)" in words
    shipped = CliRunner().invoke(app, ["supervised", "list"])
    assert shipped.exit_code == 0 and "mnist_5k: MNIST, 5,000 real 28×28 images" in " ".join(shipped.output.split())
    assert "configs/supervised/fedplus_synthetic.yaml" in shipped.output  # the path, not cut off
    assert max(len(line) for line in shipped.output.splitlines()) <= 80


@pytest.mark.extended  # CI's second stage (make test-extended): two processes of supervised runs (~20 s), kept out of make test's 10 minutes
def test_two_jobs_store_the_same_runs_and_table_as_one(tmp_path) -> None:
    """Grid candidates and seeds made in 2 processes: the same stored runs, byte for byte, and the same
    table as in this process."""
    config = TINY | {"rows": [TINY["rows"][0]]}
    path, outs = _write(tmp_path, config), {jobs: tmp_path / f"jobs{jobs}" for jobs in (1, 2)}
    for jobs, out in outs.items():
        result = CliRunner().invoke(app, ["supervised", "run", path, "--out", str(out), "-q", "--jobs", str(jobs)])
        assert result.exit_code == 0, result.output
    stored = {jobs: {p.relative_to(out): p.read_bytes() for p in (out / "runs").rglob("*.json")}
              for jobs, out in outs.items()}
    assert len(stored[1]) == 2 + 2 + 1 + 2 + 2 and stored[2] == stored[1]
    assert (outs[2] / "table.csv").read_text() == (outs[1] / "table.csv").read_text()


def test_row_params_override_knobs_and_adam_is_for_the_cnn() -> None:
    import pytest
    from pydantic import ValidationError

    from portfed.supervised.config import TrainingSection, load_supervised_config

    preset = load_supervised_config("configs/supervised/fedplus_personal_paper.yaml")
    entry = next(a for a in preset.algorithms if a.label == "FedGeoMed+")
    knobs = {row.label: row.knobs(entry)["sigma"] for row in preset.rows}
    assert knobs["MNIST-robust-N10"] == 15.0 and knobs["Synthetic-regression (MSE)"] == 1.0
    assert preset.seeds == [0, 1, 2, 3, 4]
    with pytest.raises(ValidationError, match="unknown algorithm labels"):
        type(preset)(**(preset.model_dump() | {"rows": [preset.rows[0].model_dump() | {"params": {"Nope": {}}}]}))
    with pytest.raises(ValidationError, match="adam"):
        TrainingSection(rounds=1, local_steps=1, batch_size=1, learning_rate=0.1, optimizer="adam")
