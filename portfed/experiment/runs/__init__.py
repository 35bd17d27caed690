"""Run machinery: one algorithm's run, sweeps of runs, the single-party run, and what every run leaves on disk.

* :mod:`.federated` — :func:`run_algorithm`: the parties of a federation trained by one algorithm
  (:func:`train_parties`, the caller of :func:`portfed.federation.run_rounds`), resumed from its
  checkpoint, evaluated and written into its sub-run directory; the Flower engine reuses
  :func:`train_parties` and :func:`finish_run` with parties on their own machines;
* :mod:`.parallel` — a sweep as a list of :class:`RunJob`, run in parallel processes with identical numbers;
* :mod:`.single_party` — :func:`run_single_party`: one EIIE agent trained and backtested;
* :mod:`.run_dir` — one run per directory: its lock, ``run.json`` and the checks of writers and readers;
* :mod:`.checkpoint` — atomic checkpoints refused when they belong to another run;
* :mod:`.tracking` — TensorBoard scalars of every round.
"""

from portfed.experiment.runs.checkpoint import (
    CHECKPOINT_NAME,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from portfed.experiment.runs.federated import (
    AlgorithmRun,
    InProcessParties,
    TrainedRun,
    TrainingParties,
    check_resumable,
    finish_run,
    make_spec,
    run_algorithm,
    run_fingerprint,
    train_parties,
)
from portfed.experiment.runs.parallel import RunJob, default_jobs, run_jobs
from portfed.experiment.runs.run_dir import (
    RUN_FILE,
    LegacyRunWarning,
    RunDirError,
    check_run,
    check_sub_run,
    claim,
    config_fingerprint,
    directory_config_fingerprint,
    read_record,
    request_fingerprint,
    without_new_defaults,
)
from portfed.experiment.runs.single_party import SinglePartyResult, run_single_party, single_party_market
from portfed.experiment.runs.tracking import RoundBoard

__all__ = [
    "CHECKPOINT_NAME",
    "RUN_FILE",
    "AlgorithmRun",
    "CheckpointError",
    "InProcessParties",
    "LegacyRunWarning",
    "RoundBoard",
    "RunDirError",
    "RunJob",
    "SinglePartyResult",
    "TrainedRun",
    "TrainingParties",
    "check_resumable",
    "check_run",
    "check_sub_run",
    "claim",
    "config_fingerprint",
    "default_jobs",
    "directory_config_fingerprint",
    "finish_run",
    "load_checkpoint",
    "make_spec",
    "read_record",
    "request_fingerprint",
    "without_new_defaults",
    "run_algorithm",
    "run_fingerprint",
    "run_jobs",
    "run_single_party",
    "save_checkpoint",
    "single_party_market",
    "train_parties",
]
