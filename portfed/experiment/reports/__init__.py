"""What a comparison reports, and the comparison directory written and read back.

* :mod:`.tables` — Table 1 (paper 000 Table 1), the robustness table and the collapse verdicts;
* :mod:`.collapse` / :mod:`.collapse_noise` — the two collapse criteria on a learning curve (paper 000
  §1, Fig. 1a/1b): a drop caused by a parameter jump, and a drop large against the curve's own noise
  that local training does not share;
* :mod:`.figures` — Fig. 1a, 1b, 1c and 3a, the weight composition, the collapse map, the validation curve;
* :mod:`.comparison` — :class:`Comparison`: :func:`write_comparison` (whichever engine trained the
  runs) and :func:`load_comparison`;
* :mod:`.tearsheets` — ``portfed report``: HTML tearsheets of a comparison directory.
"""

from portfed.experiment.reports.collapse import CollapseReport, CollapseRule, detect_collapse
from portfed.experiment.reports.collapse_noise import NoiseCollapseReport, NoiseRule, detect_noise_collapse
from portfed.experiment.reports.comparison import (
    BASELINE_REFERENCE,
    Comparison,
    load_comparison,
    run_name,
    write_comparison,
    write_figures,
)
from portfed.experiment.reports.figures import (
    average_value_path,
    figure_collapse_map,
    figure_interpolation,
    figure_learning_curves,
    figure_over_seeds,
    figure_parameter_change,
    figure_portfolio_values,
    figure_validation_curve,
    figure_weight_composition,
    save_figure,
    spike_alignment,
)
from portfed.experiment.reports.tables import (
    COLLAPSE_COLUMN,
    FIRST_CRITERION_COLUMN,
    TABLE_METRICS,
    assess_collapse,
    assess_noise_collapse,
    collapse_frame,
    collapse_rule,
    collapse_verdict,
    comparison_table,
    noise_rule,
    robustness_table,
)
from portfed.experiment.reports.tearsheets import write_report

__all__ = [
    "BASELINE_REFERENCE",
    "COLLAPSE_COLUMN",
    "FIRST_CRITERION_COLUMN",
    "TABLE_METRICS",
    "CollapseReport",
    "CollapseRule",
    "Comparison",
    "NoiseCollapseReport",
    "NoiseRule",
    "assess_collapse",
    "assess_noise_collapse",
    "average_value_path",
    "collapse_frame",
    "collapse_rule",
    "collapse_verdict",
    "comparison_table",
    "detect_collapse",
    "detect_noise_collapse",
    "figure_collapse_map",
    "figure_interpolation",
    "figure_learning_curves",
    "figure_parameter_change",
    "figure_portfolio_values",
    "figure_over_seeds",
    "figure_validation_curve",
    "figure_weight_composition",
    "load_comparison",
    "noise_rule",
    "robustness_table",
    "run_name",
    "save_figure",
    "spike_alignment",
    "write_comparison",
    "write_figures",
    "write_report",
]
