#!/usr/bin/env bash
# Installs clattn's build and test dependencies from Debian (idempotent: does nothing when
# everything is present). Works as root or through sudo.
set -euo pipefail
pkgs=(build-essential cmake pkg-config git
      ocl-icd-opencl-dev opencl-headers opencl-clhpp-headers pocl-opencl-icd clinfo
      libspdlog-dev nlohmann-json3-dev libcli11-dev libclblast-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      pybind11-dev python3-dev python3-numpy python3-pyopencl python3-pytest   # Python module (python/)
      intel-opencl-icd libigc-tools clang-15 llvm-15 rocm-device-libs          # offline gate (tools/kernel_report)
      oclgrind                                                                 # ctest oclgrind (tests/oclgrind)
      mesa-opencl-icd)                                                         # ctest rusticl (llvmpipe through Mesa's rusticl)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "clattn: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
