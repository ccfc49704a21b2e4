#!/usr/bin/env bash
# Builds the clattn Python module for the python3 first on PATH (or $PYTHON) with that
# interpreter's own pybind11 (pip's `pybind11.get_cmake_dir()`, else the system's) into
# ${CLATTN_BUILD_DIR:-build-py<X.Y>}, then runs the pytest suite (tests/python) once per
# OpenCL device clattn sees, each with CLATTN_TEST_DEVICE=<index>. Meant for a machine
# whose Python is not the one ctest uses (a venv, another numpy / pybind11); any device.
# Extra arguments go to pytest. When a suite dies on a signal and gdb is installed, the
# first failing test file is re-run under gdb to print the native backtrace.
# Exit status: 0 all passed, 1 a suite failed, 2 a prerequisite is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-$(command -v python3 || true)}"
[ -n "$py" ] || { echo "python-tests: no python3 on PATH (or set PYTHON)"; exit 2; }
"$py" -c "import numpy, pytest" 2>/dev/null || { echo "python-tests: $py needs numpy and pytest"; exit 2; }
ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
pb=$("$py" -c 'import pybind11; print(pybind11.get_cmake_dir())' 2>/dev/null || true)
dir="${CLATTN_BUILD_DIR:-build-py$ver}"
echo "python-tests: $py (Python $ver, numpy $("$py" -c 'import numpy; print(numpy.__version__)')," \
     "pybind11 ${pb:-from the system}) -> $dir"
mkdir -p "$dir"
if ! cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$py" ${pb:+-Dpybind11_DIR="$pb"} \
     -DCLATTN_BUILD_TESTS=OFF -DCLATTN_BUILD_BENCH=OFF -DCLATTN_BUILD_TOOLS=OFF > "$dir/configure.log" 2>&1; then
  tail -30 "$dir/configure.log"; exit 2
fi
grep "clattn: Python" "$dir/configure.log"
cmake --build "$dir" -j"$(nproc)" --target clattn_python > "$dir/build.log" 2>&1 || { tail -40 "$dir/build.log"; exit 2; }
export PYTHONPATH="$PWD/$dir/python"
devices=$("$py" -c 'import clattn; print(" ".join(str(d["index"]) for d in clattn.devices()))') || exit 2
[ -n "$devices" ] || { echo "python-tests: clattn sees no OpenCL device"; exit 2; }
status=0 summary=""
for d in $devices; do
  name=$("$py" -c "import clattn; print(clattn.devices()[$d]['device_name'])")
  echo "=== device $d: $name"
  CLATTN_TEST_DEVICE=$d "$py" -X faulthandler -m pytest -q -p no:cacheprovider tests/python "$@"
  rc=$?
  summary+="device $d ($name): $([ $rc -eq 0 ] && echo passed || echo "FAILED (exit $rc)")"$'\n'
  [ $rc -eq 0 ] && continue
  status=1
  if [ $rc -gt 128 ] && command -v gdb > /dev/null; then
    echo "=== device $d: the suite died on signal $((rc - 128)); native backtrace of the first test file that dies:"
    for f in tests/python/test_*.py; do
      CLATTN_TEST_DEVICE=$d "$py" -m pytest -q -p no:cacheprovider -x "$f" > /dev/null 2>&1
      [ $? -gt 128 ] || continue
      CLATTN_TEST_DEVICE=$d gdb -q -batch -ex run -ex bt -ex "info sharedlibrary" \
        --args "$py" -X faulthandler -m pytest -q -p no:cacheprovider -x "$f" 2>&1 | tail -80
      break
    done
  fi
done
printf '%s' "$summary"
exit $status
