#!/usr/bin/env bash
# Everything portfed measures or checks on a CUDA GPU, in one call of under ten minutes (one short loan):
#   1. the tests that need CUDA (they skip elsewhere): the supervised CNN on the GPU is deterministic and
#      equals the CPU run to round-off; agent.device auto picks the GPU; agent.capture compile and cuda_graph
#      train as the eager step to float32 round-off and reproduce themselves bit for bit (tests/test_captured.py);
#   2. benchmarks/bench_gpu.py: the eager and the captured engine side by side (party-steps/s, launches and
#      kernels per step, the GPU's busy share) for the CNN at K = 50 and 1,000 and the RNN at K = 50, against
#      issue 50's targets (docs/reports/performance.md, "The GPU path, captured");
#   3. paper 004's CNN + Adam table on the GPU
#      (portfed supervised run configs/supervised/fedamp_practical_cnn.yaml --device cuda), its stored runs
#      and table packed into OUT/fedamp_practical_cnn.tgz; with SUPERVISED_FROM=FILE.tgz (such a file from
#      an earlier call) the runs stored in it are unpacked first and reused, so the table can be finished
#      over several calls of the same code (stored runs are keyed by a digest of the code).
# Usage: bash benchmarks/gpu_checks.sh [OUT] [JOBS]   (OUT: default $OUT; PYTHON: the interpreter, default
# python3; each part has its own time limit, in seconds: TESTS_S, BENCH_CNN_S, BENCH_RNN_S, SUPERVISED_S —
# 180 + 200 + 120 + 70 by default, 570 s in all; the supervised table resumes over calls)
set -u
out=${1:-${OUT:?usage: bash benchmarks/gpu_checks.sh OUT [JOBS] (or set OUT)}}
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
    2>/dev/null || { echo "no CUDA device seen by $py"; exit 1; }
part tests "${TESTS_S:-180}" "$py" -m pytest -q -p no:cacheprovider -k "cuda or auto_resolves" \
    tests/test_supervised_cnn.py tests/test_device.py tests/test_captured.py
part bench_cnn "${BENCH_CNN_S:-200}" "$py" benchmarks/bench_gpu.py --networks cnn --parties 50 1000
part bench_rnn "${BENCH_RNN_S:-120}" "$py" benchmarks/bench_gpu.py --networks rnn --parties 50
if [ -n "${SUPERVISED_FROM:-}" ]; then
    tar -xzf "$SUPERVISED_FROM" -C "$work" || { echo "cannot unpack SUPERVISED_FROM=$SUPERVISED_FROM"; exit 1; }
    echo "resuming from $(find "$work/fedamp_practical_cnn/runs" -name '*.json' | wc -l) stored runs"
fi
part supervised "${SUPERVISED_S:-70}" "$py" -c "import sys; from portfed.cli.main import app; sys.exit(app())" \
    supervised run configs/supervised/fedamp_practical_cnn.yaml --device cuda --out "$work/fedamp_practical_cnn" \
    --jobs "$jobs" --quiet
tar -czf "$out/fedamp_practical_cnn.tgz" -C "$work" fedamp_practical_cnn 2>/dev/null \
    && echo "stored runs: $(find "$work/fedamp_practical_cnn/runs" -name '*.json' | wc -l)"
