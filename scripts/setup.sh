#!/usr/bin/env bash
# Set up devicelayer on a fresh Debian machine: the drivers CI uses (PoCL for
# OpenCL, Mesa's lavapipe for Vulkan), the shader compiler, a C compiler (for
# the host runner), a virtual environment in .venv and the package with its
# extras. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(pocl-opencl-icd ocl-icd-libopencl1 mesa-vulkan-drivers libvulkan1 glslc libshaderc1
          vulkan-validationlayers clinfo vulkan-tools python3-venv libgomp1 gcc libc6-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($python --version)"
  $python -m venv .venv
fi
extras="opencl,vulkan,onnx,cluster,dev"  # cluster: Ray, for devicelayer.cluster and its tests
if [ "$(uname -m)" = "x86_64" ]; then extras="$extras,onednn"; fi  # the host's convolutions through oneDNN
if command -v nvidia-smi >/dev/null 2>&1; then extras="$extras,cuda"; fi
echo "setup: installing devicelayer[$extras] into .venv"
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e ".[$extras]"
echo "setup: done"
