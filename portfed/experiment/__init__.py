"""The federated portfolio experiment of paper 000 §8.2, in five packages, each built on those before it:

* :mod:`portfed.experiment.config` — the YAML configs (single-party, federated, the collapse study),
  validated into typed objects; unknown keys are errors;
* :mod:`portfed.experiment.party` — the portfolio party and its evaluation: markets, universes,
  parties and their fitted generators, the batched cohort, backtests, learning curves and Fig. 1c;
* :mod:`portfed.experiment.runs` — run machinery: one algorithm's run (the round loop's caller),
  sweeps of runs in parallel, the single-party run, run directories, checkpoints, tracking;
* :mod:`portfed.experiment.reports` — what a comparison reports: Table 1 and its collapse verdicts, the
  figures, the comparison directory written and read back, HTML tearsheets;
* :mod:`portfed.experiment.studies` — the experiments a command runs: the comparison of algorithms
  (``portfed compare``), over seeds, over walk-forward years, tuning, the collapse study.

Import from a package (``from portfed.experiment.runs import run_algorithm``); this module imports none.
"""

__all__ = ["config", "party", "reports", "runs", "studies"]
