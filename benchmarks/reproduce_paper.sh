#!/usr/bin/env bash
# Issue 46's measurements, in order, resumable (run it again after an interruption; finished steps are
# reused): (1) the tuning protocol (benchmarks/tune_paper.sh), (2) the actor-critic's cash-drift study
# (configs/study_cash_drift.yaml), (3) the paper-scale comparison with the paper's agent and the knobs
# chosen in (1), three seeds (configs/paper_sp500.yaml), and its verdict table (benchmarks/paper_verdicts.py,
# OUT/paper_sp500/verdicts.md).  Usage: bash benchmarks/reproduce_paper.sh [OUT]
# (default runs/reproduce).  Each step's wall time goes to OUT/progress.log.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/reproduce}
PORTFED=${PORTFED:-.venv/bin/portfed}
PYTHON=${PYTHON:-.venv/bin/python}
mkdir -p "$OUT"
log() { echo "$(date -u +%FT%TZ) $*" | tee -a "$OUT/progress.log"; }
resume_if() { [ -e "$1" ] && echo --resume || true; }

log "step 1: tuning"
PORTFED="$PORTFED" bash benchmarks/tune_paper.sh "$OUT/tune_paper"

log "step 2: cash-drift study"
"$PORTFED" study collapse configs/study_cash_drift.yaml --out "$OUT/study_cash_drift" \
    $(resume_if "$OUT/study_cash_drift") 2>&1 | tee -a "$OUT/progress.log"

log "step 3: paper-scale comparison, three seeds"
mapfile -t chosen < <("$PYTHON" - "$OUT/tune_paper" <<'PY'
import json, sys
from pathlib import Path
for algorithm in ("fedavg+", "fedgeomed+", "fedcomed+", "fedprox"):
    choice = json.loads((Path(sys.argv[1]) / algorithm / "chosen.json").read_text())
    print("--set"); print(choice["override"])
PY
)
log "chosen: ${chosen[*]}"
"$PORTFED" compare configs/paper_sp500.yaml --seeds 0,1,2 --out "$OUT/paper_sp500" --jobs 2 "${chosen[@]}" \
    $(resume_if "$OUT/paper_sp500/seed_0") 2>&1 | tee -a "$OUT/progress.log"
"$PYTHON" benchmarks/paper_verdicts.py "$OUT/paper_sp500" | tee -a "$OUT/progress.log"
log "done: $OUT/paper_sp500/verdicts.md"
