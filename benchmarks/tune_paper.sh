#!/usr/bin/env bash
# The tuning protocol of docs/reports/reproduction.md: every method gets the same budget on the validation year
# (2018, cut from the end of the training period; the test year 2019 is never read) at K = 10 parties ×
# 400 rounds (configs/faithful_paper.yaml, the paper's agent): Fed+'s constant λ_k^t for each variant
# and FedProx's σ, each on the same 10-value multiplicative grid, two seeds per value.  Resumable: run it
# again after an interruption.  Usage: bash benchmarks/tune_paper.sh [OUT] (default runs/tune_paper).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/tune_paper}
PORTFED=${PORTFED:-.venv/bin/portfed}
GRID=3e-5,1e-4,3e-4,1e-3,3e-3,1e-2,3e-2,0.1,0.3,1
mkdir -p "$OUT"
for key in fedavg+.lam_t fedgeomed+.lam_t fedcomed+.lam_t fedprox.sigma; do
    algorithm=${key%%.*}
    if [ -f "$OUT/$algorithm/chosen.json" ]; then  # finished: its choice stands (no second look at the grid)
        echo "$(date -u +%FT%TZ) tune $key: done before" | tee -a "$OUT/progress.log"
        continue
    fi
    resume=()
    [ -d "$OUT/$algorithm/runs" ] && resume=(--resume)
    echo "$(date -u +%FT%TZ) tune $key" | tee -a "$OUT/progress.log"
    "$PORTFED" tune configs/faithful_paper.yaml -k "federation.algorithm_params.$key" --grid "$GRID" \
        --seeds 0,1 --out "$OUT/$algorithm" --jobs 2 "${resume[@]}" 2>&1 | tee -a "$OUT/progress.log"
done
echo "$(date -u +%FT%TZ) done" | tee -a "$OUT/progress.log"
