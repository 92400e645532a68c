#!/usr/bin/env bash
# The whole pytest suite as two runs side by side: the tests marked slurm (one cluster, so one
# test at a time; most of their time is spent waiting on Slurm's scheduling and the engines'
# polling) beside all the others. The others print as they go; the Slurm run's output is kept
# and printed whole once it ends. Exits non-zero when either run failed.
#   scripts/test-suite.sh [pytest options...]      (PYTEST= another pytest command)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
read -r -a pytest <<<"${PYTEST:-.venv/bin/pytest}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"${pytest[@]}" -q -m slurm tests "$@" >"$log" 2>&1 &
slurm=$!
"${pytest[@]}" -q -m "not slurm" tests "$@"
others=$?
wait "$slurm"
slurm_status=$?
echo "=== the tests marked slurm (run beside the others) ==="
cat "$log"
echo "=== pytest exit status: $others without Slurm, $slurm_status with it ==="
[ "$others" -eq 0 ] && [ "$slurm_status" -eq 0 ]
