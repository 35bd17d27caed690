"""Wall time per round with Flower's deployment runtime and in-process, and the bytes a round sends.

For K = 3 and K = 10 parties (configs/tiny.yaml's DJIA parties, E = 50 local iterations, FedAvg
and FedAvg+, ``--rounds`` rounds each): ``portfed flower launch`` on 127.0.0.1 (TLS and SuperNode
authentication, one SuperNode per party, each training its party in a one-party engine) against the
same rounds in this process: the parties one by one, each in its own one-party engine (what the nodes
compute), and all of them in one shared engine.  Flower's figure is the mean of
``flower_traffic.csv``'s per-round seconds (from pushing the round's messages to the last reply);
the bytes are the parameter arrays of the round's messages (Flower's ``count_bytes``: data and
array headers), printed beside ``2 × K × d × 8`` — a float64 model each way per party.  FedAvg
sends each party its start (one vector); FedAvg+ its start and its Fed+ target ``z_k`` (two).

    .venv/bin/python benchmarks/bench_flower.py [--rounds 2] [--parties 3 10]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml

from portfed.experiment.config import load_config
from portfed.experiment.party import PartyGroup, build_federation, initial_parameters
from portfed.experiment.runs import make_spec
from portfed.federation import run_rounds
from portfed.flower.launch import Launch, launch

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ["fedavg", "fedavg+"]


def write_config(directory: Path, parties: int, rounds: int) -> Path:
    raw = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    raw["parties"]["count"] = parties
    raw["federation"].update({"rounds": rounds, "local_steps": 50, "algorithms": ALGORITHMS})
    raw["diagnostics"]["interpolation_rounds"] = []
    path = directory / f"k{parties}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def in_process_round(path: Path, algorithm: str, shared: bool) -> float:
    """Mean seconds per round of ``algorithm`` on ``path``'s parties in this process (built beforehand), in
    one shared engine or each party in its own."""
    config = load_config(path)
    federation = build_federation(config, progress=False)
    cohort = PartyGroup(federation.parties) if shared else federation.parties
    fed = config.federation
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads())  # as a run of the config trains; the Flower launches keep theirs
    try:
        start = time.perf_counter()
        run_rounds(cohort, make_spec(config, algorithm), fed.rounds, fed.local_steps, seed=config.seed,
                   init_params=initial_parameters(config))
        return (time.perf_counter() - start) / fed.rounds
    finally:
        torch.set_num_threads(threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--parties", type=int, nargs="+", default=[3, 10])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in args.parties:
            remote = write_config(Path(tmp), k, args.rounds)
            started = time.perf_counter()
            launch(Launch(remote, Path(tmp) / f"flower_{k}"), progress=False)
            total = time.perf_counter() - started
            for algorithm in ALGORITHMS:
                sub = Path(tmp) / f"flower_{k}" / algorithm
                traffic = pd.read_csv(sub / "flower_traffic.csv")
                d = np.load(sub / "models.npz")["global_model"].size
                rows.append({
                    "K": k, "algorithm": algorithm, "E": 50, "d": d,
                    "Flower s/round": traffic["seconds"].mean(),
                    "in-process one by one s/round": in_process_round(remote, algorithm, shared=False),
                    "in-process shared engine s/round": in_process_round(remote, algorithm, shared=True),
                    "Flower launch total s": total,
                    "bytes sent/round": int(traffic["bytes_sent"].mean()),
                    "bytes received/round": int(traffic["bytes_received"].mean()),
                    "2·K·d·8": 2 * k * d * 8,
                })
    table = pd.DataFrame(rows).set_index(["K", "algorithm"])
    print(f"{args.rounds} rounds per algorithm, loopback, TLS + SuperNode authentication")
    print(table.to_string(float_format="{:.2f}".format))


if __name__ == "__main__":
    main()
