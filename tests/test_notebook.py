"""notebooks/collapse_analysis.ipynb executes top to bottom on a tiny run made here, in the venv's kernel."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import nbformat
import pytest
import yaml
from nbclient import NotebookClient

from portfed.experiment.config import parse_config
from portfed.experiment.studies import compare

ROOT = Path(__file__).parents[1]
NOTEBOOK = ROOT / "notebooks" / "collapse_analysis.ipynb"


@pytest.fixture()
def tiny_run(tmp_path: Path) -> Path:
    raw = copy.deepcopy(yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text()))
    out = tmp_path / "run"
    compare(parse_config(raw), out, progress=False)
    return out


@pytest.mark.extended  # CI's second stage (make test-extended): one of make test's slowest, kept out of its 10 minutes
def test_notebook_runs_on_a_tiny_run(tiny_run: Path) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(notebook, kernel_name="python3", timeout=300,
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute(env={**os.environ, "PORTFED_RUN_DIR": str(tiny_run)})
    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    # The kernel is this venv's interpreter (jupyter_client maps the kernelspec's "python" to it).
    assert f"kernel python: {sys.executable}" in text
    assert f"run directory: {tiny_run.resolve()}" in text
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 3  # Fig. 1a, 1b, 1c
