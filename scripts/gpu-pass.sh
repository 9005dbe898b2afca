#!/usr/bin/env bash
# The whole test suite and the benchmarks on a GPU machine, logs and JSON under $OUT (default ./gpu-pass).
# On the shared GPU machine: let .gpu travel with the run and start with `source .gpu/enter.sh;`
# (see ../shared/gpu/README.md). Two parts, each under ten minutes there: `tests`, then `bench`.
set -uo pipefail
cd "$(dirname "$0")/.."
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
OUT=${OUT:-gpu-pass}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
OPS="tests/test_ops.py tests/test_ops_binary_props.py tests/test_ops_matmul_props.py tests/test_ops_movement_props.py tests/test_ops_reduce_props.py"
part=${1:-all}
if [[ $part == tests || $part == all ]]; then
  $PY -m devicelayer.cli info --json > "$OUT/devicelayer-info.json"
  timeout 280 $PY -X faulthandler -m pytest -q --timeout 120 -p no:cacheprovider $OPS > "$OUT/tests-ops.log" 2>&1
  echo "ops: rc=$? $(tail -1 "$OUT/tests-ops.log")"
  ignore=""; for f in $OPS; do ignore="$ignore --ignore=$f"; done
  timeout 290 $PY -X faulthandler -m pytest -q --timeout 120 -p no:cacheprovider tests --deselect tests/test_install.py \
    $ignore > "$OUT/tests-rest.log" 2>&1
  echo "rest: rc=$? $(tail -1 "$OUT/tests-rest.log")"
fi
if [[ $part == bench || $part == all ]]; then
  gpus=$($PY -c "import devicelayer as dl; print(','.join(d.id for d in dl.devices() if d.info.device_type == 'gpu'))")
  timeout 240 $PY -m benchmarks.run --devices "$gpus,host" --out "$OUT" > "$OUT/bench.log" 2>&1; echo "bench: rc=$?"
  timeout 200 $PY -m benchmarks.run --only models --devices "$gpus" --out "$OUT" > "$OUT/models.log" 2>&1
  echo "models: rc=$?"
  args=""; for d in ${gpus//,/ }; do args="$args --device $d"; done
  timeout 120 $PY -m benchmarks.soak --cycles 100000 --runs 10000 $args --out "$OUT" > "$OUT/soak.log" 2>&1
  echo "soak: rc=$?"
  timeout 120 $PY -m benchmarks.fuzz --graphs 500 $args --out "$OUT" > "$OUT/fuzz.log" 2>&1; echo "fuzz: rc=$?"
fi
