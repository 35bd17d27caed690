#!/usr/bin/env bash
# Everything portfed measures or checks on a CUDA GPU, in one call of bounded length:
#   1. the tests that need CUDA (they skip elsewhere): the supervised CNN on the GPU is deterministic and
#      equals the CPU run to round-off; agent.device auto picks the GPU;
#   2. paper 004's CNN + Adam table on the GPU
#      (portfed supervised run configs/supervised/fedamp_practical_cnn.yaml --device cuda), its stored runs
#      and table packed into OUT/fedamp_practical_cnn.tgz; with SUPERVISED_FROM=FILE.tgz (such a file from
#      an earlier call) the runs stored in it are unpacked first and reused, so the table can be finished
#      over several calls of the same code (stored runs are keyed by a digest of the code);
#   3. benchmarks/bench_gpu.py: party-steps/s of the CNN, RNN and LSTM engines at K = 50 and 1,000, with
#      kernels per step and the GPU's busy share.
# Usage: bash benchmarks/gpu_checks.sh OUT [JOBS]   (PYTHON: the interpreter, default python3; each part has
# its own time limit, in seconds: TESTS_S, SUPERVISED_S, BENCH_S)
set -u
out=${1:?usage: bash benchmarks/gpu_checks.sh OUT [JOBS]}
jobs=${2:-8}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

part() {  # part NAME SECONDS COMMAND...: run COMMAND under a time limit, log to OUT/NAME.log, say how it ended
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    echo "== $name: exit $rc after $(( $(date +%s) - start )) s (limit $limit s)"
    tail -n 25 "$out/$name.log"
}

"$py" -c "import torch; print('PyTorch', torch.__version__, '| CUDA device:', torch.cuda.get_device_name(0))" \
    || { echo "no CUDA device seen by $py"; exit 1; }
part tests "${TESTS_S:-90}" "$py" -m pytest -q -p no:cacheprovider -k "cuda or auto_resolves" \
    tests/test_supervised_cnn.py tests/test_device.py
if [ -n "${SUPERVISED_FROM:-}" ]; then
    tar -xzf "$SUPERVISED_FROM" -C "$work" || { echo "cannot unpack SUPERVISED_FROM=$SUPERVISED_FROM"; exit 1; }
    echo "resuming from $(find "$work/fedamp_practical_cnn/runs" -name '*.json' | wc -l) stored runs"
fi
part supervised "${SUPERVISED_S:-330}" "$py" -c "import sys; from portfed.cli.main import app; sys.exit(app())" \
    supervised run configs/supervised/fedamp_practical_cnn.yaml --device cuda --out "$work/fedamp_practical_cnn" \
    --jobs "$jobs" --quiet
tar -czf "$out/fedamp_practical_cnn.tgz" -C "$work" fedamp_practical_cnn 2>/dev/null \
    && echo "stored runs: $(find "$work/fedamp_practical_cnn/runs" -name '*.json' | wc -l)"
part bench "${BENCH_S:-150}" "$py" benchmarks/bench_gpu.py --parties 50 1000 --networks cnn rnn lstm
