"""Wall time of a round with SecAgg+ beside the plain Flower deployment (docs/privacy.md, "Secure aggregation
on the deployment").

For K parties (configs/tiny.yaml's DJIA parties, E local iterations, FedAvg, ``--rounds`` rounds):
``portfed flower launch`` on 127.0.0.1 (TLS and SuperNode authentication) once plain and once with
``--secure-aggregation``.  A round's seconds are ``flower_traffic.csv``'s (from pushing the round's
messages to its last reply: one exchange plain, SecAgg+'s four stages secure); bytes are the plan's
arrays sent and what comes back (plain: the float64 models; secure: the masked integer vectors).
The last column is the largest difference of the final global models of the two runs (SecAgg+'s
quantisation, step 2c/2^24 a round, carried through the rounds' training).

    .venv/bin/python benchmarks/bench_secagg.py [--rounds 3] [--parties 3] [--local-steps 10]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from portfed.flower.launch import Launch, launch
from portfed.flower.secure import SecAggSettings

ROOT = Path(__file__).resolve().parents[1]


def write_config(directory: Path, parties: int, rounds: int, local_steps: int) -> Path:
    raw = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    raw["parties"]["count"] = parties
    raw["federation"].update({"rounds": rounds, "local_steps": local_steps, "algorithms": ["fedavg"]})
    raw["diagnostics"]["interpolation_rounds"] = []
    path = directory / f"k{parties}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parties", type=int, default=3)
    parser.add_argument("--local-steps", type=int, default=10)
    parser.add_argument("--keep", type=Path, default=None, help="Keep the runs (and their logs) in this directory.")
    args = parser.parse_args()
    rows, models = [], {}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = scratch if args.keep is None else str(args.keep)
        Path(tmp).mkdir(parents=True, exist_ok=True)
        path = write_config(Path(tmp), args.parties, args.rounds, args.local_steps)
        for mode, secure in (("plain", None), ("SecAgg+", SecAggSettings())):
            out = Path(tmp) / mode
            started = time.perf_counter()
            launch(Launch(path, out, secure=secure, run_timeout=1800.0), progress=False)
            total = time.perf_counter() - started
            traffic = pd.read_csv(out / "fedavg" / "flower_traffic.csv")
            models[mode] = np.load(out / "fedavg" / "models.npz")["global_model"]
            rows.append({"mode": mode, "K": args.parties, "E": args.local_steps, "d": models[mode].size,
                         "s/round mean": traffic["seconds"].mean(), "s/round min": traffic["seconds"].min(),
                         "s/round max": traffic["seconds"].max(), "launch total s": total,
                         "bytes sent/round": int(traffic["bytes_sent"].mean()),
                         "bytes received/round": int(traffic["bytes_received"].mean())})
    table = pd.DataFrame(rows).set_index("mode")
    print(f"FedAvg, {args.rounds} rounds, loopback, TLS + SuperNode authentication")
    print(table.to_string(float_format="{:.2f}".format))
    print(f"max |global model, SecAgg+ − plain| after {args.rounds} rounds: "
          f"{np.abs(models['SecAgg+'] - models['plain']).max():.2e} (quantisation step 2c/Q = {SecAggSettings().step:.2e})")


if __name__ == "__main__":
    main()
