"""Time rounds resumed from a finished comparison's checkpoint (not run by ``make bench``: it needs a run).

Usage: ``.venv/bin/python benchmarks/time_resumed_rounds.py RUN_DIR ALGORITHM [--rounds 3] [--save PATH]``.

Rebuilds the parties of the comparison in ``RUN_DIR`` (its ``config.yaml``; the generator fits come from its
fit cache, or ``PORTFED_FIT_CACHE``), loads ``RUN_DIR/ALGORITHM/checkpoint.pt`` (refused unless it belongs
to that config and algorithm) and runs ``--rounds`` more rounds in this process, on one thread, writing
nothing into ``RUN_DIR``; prints the wall time of each round.  ``--save`` writes the parties' parameters after
the last round (``.npy``), so two checkouts can be compared bit for bit on the same state: run this script
from each with ``PYTHONPATH`` set to it, as ``benchmarks/ab_engine.py`` says.

This is how ``docs/reports/performance.md`` step 11 found why local training's rounds ran at half the speed of a
federated arm's in the paper-scale comparison: a round resumed from its 800-round checkpoint, with the
profile of ``python -m cProfile -s tottime`` around this script.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

import portfed
from portfed.agents.learner import network_parts
from portfed.experiment.config import FederatedConfig, load_config
from portfed.experiment.party import FitCache, build_federation
from portfed.experiment.runs import (
    CHECKPOINT_NAME,
    InProcessParties,
    load_checkpoint,
    make_spec,
    run_fingerprint,
)
from portfed.federation import run_rounds
from portfed.federation.state import FederationState


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("algorithm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--save", type=Path, default=None, help="write the parties' parameters here (.npy)")
    args = parser.parse_args()
    config = load_config(args.run_dir / "config.yaml")
    if not isinstance(config, FederatedConfig):
        raise SystemExit(f"{args.run_dir} holds no federated comparison")
    torch.set_num_threads(1)
    members = InProcessParties(build_federation(config, False, FitCache.for_run(args.run_dir)).parties)
    saved = load_checkpoint(args.run_dir / args.algorithm / CHECKPOINT_NAME, run_fingerprint(config, args.algorithm))
    state = FederationState.from_state_dict(saved["federation"])
    members.load_party_states(saved["parties"])
    first = state.round_index  # run_rounds advances `state`
    ends: list[float] = []
    fed = config.federation
    start = time.perf_counter()
    final = run_rounds(members.cohort, make_spec(config, args.algorithm), first + args.rounds,
                       fed.local_steps, seed=config.seed, init_params=state.party_models, state=state,
                       callback=lambda *_: ends.append(time.perf_counter()), optimizer_state=fed.optimizer_state,
                       proximal_update=fed.proximal_update, parts=network_parts(config.agent_config()))
    seconds = np.diff([start, *ends])
    print(f"portfed from {portfed.__file__}; {args.algorithm} from round {first}, one thread: "
          f"seconds per round {' '.join(f'{s:.2f}' for s in seconds)}")
    if args.save is not None:
        np.save(args.save, final.state.party_models)


if __name__ == "__main__":
    main()
