#!/usr/bin/env bash
# ctest python_interpreter: <build>/python/PYTHON names the interpreter the module is built
# for, and that interpreter imports this build's module (not another installed clattn).
set -euo pipefail
dir="$1" expect="$2"
py="$(cat "$dir/PYTHON")"
if [ "$py" != "$expect" ]; then
  echo "interpreter_check: $dir/PYTHON says '$py', the build uses '$expect'" >&2
  exit 1
fi
PYTHONPATH="$dir" "$py" - "$dir" <<'PY'
import os, sys
import clattn
where = os.path.realpath(clattn._clattn.__file__)
assert where.startswith(os.path.realpath(sys.argv[1]) + os.sep), f"imported {where}, not the build's module"
print(f"{sys.executable} imports {where} (clattn {clattn.__version__})")
PY
