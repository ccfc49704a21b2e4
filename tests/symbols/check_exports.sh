#!/usr/bin/env bash
# The shared objects clattn builds define no dynamic symbol that the C++ runtime defines
# (libstdc++.so.6, libgcc_s.so.1): such a copy interposes the process's runtime for libraries
# loaded after it (an OpenCL driver's LLVM calling std::call_once through libstdc++'s
# __once_proxy reached libclattn's copy, whose std::__once_call was never set: SIGSEGV at 0).
# Weak definitions (template instantiations) are fine; strong ones (T, B, D, R) are not.
# Usage: check_exports.sh CXX SHARED_OBJECT...
set -uo pipefail
cxx=$1
shift
strong() { nm -D --defined-only "$1" | awk '$2 ~ /^[TBDR]$/ {print $3}' | sed 's/@.*//' | sort -u; }
runtime=$(mktemp)
trap 'rm -f "$runtime"' EXIT
for lib in libstdc++.so.6 libgcc_s.so.1; do
  path=$("$cxx" -print-file-name=$lib)
  [ -f "$path" ] && strong "$(readlink -f "$path")" >> "$runtime"
done
sort -u -o "$runtime" "$runtime"
[ -s "$runtime" ] || { echo "no C++ runtime found through $cxx: skipped"; exit 77; }
failed=0
for so in "$@"; do
  dup=$(comm -12 "$runtime" <(strong "$so"))
  if [ -n "$dup" ]; then
    echo "FAIL: $(basename "$so") exports $(echo "$dup" | wc -l) symbols of the C++ runtime, e.g.:"
    echo "$dup" | head -8
    failed=1
  else
    echo "ok   $(basename "$so"): $(strong "$so" | wc -l) strong exports, none of the C++ runtime's"
  fi
done
exit $failed
