#!/usr/bin/env bash
# The soaks on a GPU machine, logs and JSON under $OUT (default ./soak-gpu; no ':' in any file name):
#   1. the per-device soak test (tests/test_soak.py: allocate/free cycles and plan runs on each device, after a
#      full warm-up pass), as pytest's JUnit XML and log;
#   2. the concurrent soak (benchmarks/soak_concurrent.py): 8 threads launching kernels, transferring between
#      devices, running recorded and unrecorded plans and callbacks on every device for
#      DEVICELAYER_SOAK_SECONDS (default 600), then device memory, threads and file descriptors checked
#      against the baseline taken after a warm-up cycle: soak-concurrent-*.json and its log.
# On the shared GPU machine: let .gpu travel with the run and start with `source .gpu/enter.sh;`
# (../shared/gpu/README.md). One command there runs at most 10 minutes: with the default 600 s, run the two
# parts as two commands (`bash scripts/soak-gpu.sh tests`, then `bash scripts/soak-gpu.sh concurrent`).
set -uo pipefail
cd "$(dirname "$0")/.."
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
OUT=${OUT:-soak-gpu}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
SOAK_SECONDS=${DEVICELAYER_SOAK_SECONDS:-600}
part=${1:-all}
$PY -m devicelayer.cli info --json > "$OUT/devicelayer-info.json" 2> "$OUT/devicelayer-info.log"
status=0
if [[ $part == tests || $part == all ]]; then
  timeout 500 $PY -X faulthandler -m pytest -q -p no:cacheprovider --timeout 400 tests/test_soak.py \
    -k "not concurrent_soak_returns" --junitxml "$OUT/test-soak.xml" > "$OUT/test-soak.log" 2>&1
  rc=$?; echo "soak tests: rc=$rc $(tail -1 "$OUT/test-soak.log")"; [[ $rc == 0 ]] || status=1
fi
if [[ $part == concurrent || $part == all ]]; then
  timeout $((${SOAK_SECONDS%.*} + 400)) $PY -X faulthandler -m benchmarks.soak_concurrent --seconds "$SOAK_SECONDS" \
    --out "$OUT" > "$OUT/soak-concurrent.log" 2>&1
  rc=$?; echo "concurrent soak ($SOAK_SECONDS s): rc=$rc $(grep -E 'passed|FAILED' "$OUT/soak-concurrent.log" | tail -1)"
  [[ $rc == 0 ]] || status=1
fi
exit $status
