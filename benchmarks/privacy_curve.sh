#!/usr/bin/env bash
# The privacy–utility curve (docs/privacy.md): held-out return against the party-level ε for
#   central DP: fedavg, fedavg+        local DP: fedavg, fedcomed+        no DP (ε = ∞): local, fedavg, fedavg+, fedcomed+
# at ε ∈ {1, 2, 4, 8, 16} (the noise multiplier calibrated to each by the accountant) and ε = ∞, on
# configs/privacy_curve.yaml, seeds 0,1,2 (each cell one `portfed compare --seeds`).  Resumable: run it again
# after an interruption (a finished cell is skipped, an unfinished one resumed).  Writes OUT/curve.csv and
# OUT/curve.png (benchmarks/privacy_curve.py).
#
#   bash benchmarks/privacy_curve.sh [OUT]                          (default runs/privacy_curve)
#   PARTIES=50 bash benchmarks/privacy_curve.sh runs/privacy_curve_50   (K = 50 parties)
#   EPSILONS=4 SEEDS=0 ROUNDS=2 PARTIES=3 bash benchmarks/privacy_curve.sh /tmp/curve_smoke   (one tiny cell)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/privacy_curve}
PORTFED=${PORTFED:-.venv/bin/portfed}
PYTHON=${PYTHON:-.venv/bin/python}
CONFIG=${CONFIG:-configs/privacy_curve.yaml}
SEEDS=${SEEDS:-0,1,2}
EPSILONS=${EPSILONS:-1 2 4 8 16}
JOBS=${JOBS:-2}
CLIP=${CLIP:-0.02}   # S (configs/privacy_curve.yaml's header)
extra=()
[ -n "${PARTIES:-}" ] && extra+=(--set "parties.count=$PARTIES")
[ -n "${ROUNDS:-}" ] && extra+=(--set "federation.rounds=$ROUNDS" --set "federation.checkpoint_every=$ROUNDS")
mkdir -p "$OUT"

cell() {  # cell NAME ALGORITHMS [--set …]: one `portfed compare --seeds` into OUT/NAME, skipped when finished
    local name=$1 algorithms=$2
    shift 2
    if [ -f "$OUT/$name/table1_seeds.csv" ]; then
        echo "$(date -u +%FT%TZ) $name: done before" | tee -a "$OUT/progress.log"
        return
    fi
    local resume=()
    [ -d "$OUT/$name" ] && resume=(--resume)
    echo "$(date -u +%FT%TZ) $name" | tee -a "$OUT/progress.log"
    "$PORTFED" compare "$CONFIG" --seeds "$SEEDS" --set "federation.algorithms=[$algorithms]" --out "$OUT/$name" --jobs "$JOBS" --quiet \
        "${extra[@]}" "$@" "${resume[@]}" 2>&1 | tail -n 3 | tee -a "$OUT/progress.log"
}

cell none local,fedavg,fedavg+,fedcomed+
for eps in $EPSILONS; do
    cell "central_eps$eps" fedavg,fedavg+ --set privacy.mode=central --set "privacy.target_epsilon=$eps" \
        --set "privacy.clip=$CLIP"
    cell "local_eps$eps" fedavg,fedcomed+ --set privacy.mode=local --set "privacy.target_epsilon=$eps" \
        --set "privacy.clip=$CLIP"
done
"$PYTHON" benchmarks/privacy_curve.py "$OUT"
echo "$(date -u +%FT%TZ) done: $OUT/curve.csv, $OUT/curve.png" | tee -a "$OUT/progress.log"
