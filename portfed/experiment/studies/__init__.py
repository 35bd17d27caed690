"""The experiments a command runs, each into one directory under its lock (:func:`portfed.experiment.runs.claim`).

* :mod:`.compare` — ``portfed compare`` / ``portfed run``: the same parties federated by several
  algorithms (paper 000 §8.2), Table 1 and the figures;
* :mod:`.seeds` — ``compare --seeds``: the comparison once per seed, Table 1 over seeds with 95 % intervals;
* :mod:`.walk_forward` — ``portfed walk-forward``: the comparison on consecutive held-out years;
* :mod:`.tuning` — ``portfed tune``: one knob chosen on a validation year;
* :mod:`.collapse_study` — ``portfed study collapse``: when does federated training collapse? (its arms over
  seeds: :mod:`.collapse_seeds`)
"""

from portfed.experiment.studies.collapse_study import run_collapse_study
from portfed.experiment.studies.compare import CLEAN_DIR, compare
from portfed.experiment.studies.seeds import (
    SeedComparison,
    compare_seeds,
    differences_markdown,
    parse_seeds,
    seed_table_markdown,
)
from portfed.experiment.studies.tuning import (
    TuneError,
    Tuning,
    geometric_grid,
    parse_grid,
    sampled_grid,
    tune,
)
from portfed.experiment.studies.walk_forward import (
    fold_table,
    fold_title,
    mean_over_folds,
    mean_title,
    walk_forward,
)

__all__ = [
    "CLEAN_DIR",
    "SeedComparison",
    "TuneError",
    "Tuning",
    "compare",
    "compare_seeds",
    "differences_markdown",
    "fold_table",
    "fold_title",
    "geometric_grid",
    "mean_over_folds",
    "mean_title",
    "parse_grid",
    "parse_seeds",
    "run_collapse_study",
    "sampled_grid",
    "seed_table_markdown",
    "tune",
    "walk_forward",
]
