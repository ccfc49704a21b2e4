#!/usr/bin/env bash
# ctest python_pybind11_3: builds the module against pybind11 3.x (its CMake config dir as
# the 5th argument or $CLATTN_PYBIND11_3_DIR) and runs the pytest suite on it. Exit 77
# (skipped) when no pybind11 3 is given.
set -euo pipefail
src="$1" dir="$2" lib="$3" py="$4" pb="${5:-${CLATTN_PYBIND11_3_DIR:-}}"
if [ -z "$pb" ]; then
  echo "python_pybind11_3: skipped: no pybind11 3 (configure with -DCLATTN_PYBIND11_3_DIR=<dir of pybind11Config.cmake>)"
  exit 77
fi
if [ ! -f "$pb/pybind11Config.cmake" ]; then
  echo "python_pybind11_3: $pb holds no pybind11Config.cmake" >&2
  exit 1
fi
cmake -S "$src/tests/python/pybind11_3" -B "$dir" -DCMAKE_BUILD_TYPE=Release -Dpybind11_DIR="$pb" \
  -DPython3_EXECUTABLE="$py" -DCLATTN_SOURCE_DIR="$src" -DCLATTN_LIBRARY="$lib" > "$dir.configure.log" 2>&1 \
  || { cat "$dir.configure.log"; exit 1; }
grep "clattn: Python module" "$dir.configure.log"
case "$(grep -o 'pybind11 [0-9][0-9.]*' "$dir.configure.log" | head -1)" in
  "pybind11 3."*) ;;
  *) echo "python_pybind11_3: $pb is not pybind11 3.x" >&2; exit 1 ;;
esac
cmake --build "$dir" -j"$(nproc)" --target clattn_python > "$dir.build.log" 2>&1 || { tail -50 "$dir.build.log"; exit 1; }
PYTHONPATH="$dir/python" "$py" -X faulthandler -m pytest -q -p no:cacheprovider "$src/tests/python"
