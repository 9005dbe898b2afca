#!/usr/bin/env bash
# Set up (scripts/setup.sh), then run the test suite on every device present.
# DEVICELAYER_REQUIRE names the backends that must be present (default: the three CI has, and oneDNN for the
# host's convolutions on x86-64).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
# the cluster tests start several Ray nodes on this machine: every Ray process on 127.0.0.1, no usage report
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=${RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER:-0} RAY_USAGE_STATS_ENABLED=0
required=host,opencl,vulkan
if [ "$(uname -m)" = "x86_64" ]; then required="$required,onednn"; fi
export DEVICELAYER_REQUIRE=${DEVICELAYER_REQUIRE-$required}
.venv/bin/devicelayer info
exec .venv/bin/python -m pytest -q tests "$@"
