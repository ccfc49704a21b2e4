# Sourced by the dev/ PTX checks: expand DIR FILE prints cl_kernels FILE as the runtime
# expands it: `#include "x"` lines (only blanks before them) replaced by the file, each file
# once, with #line markers.
expand() {  # $1 dir, $2 file
  awk -v dir="$1" -v top="$2" '
    function ex(f,   line, n, inc) {
      print "#line 1 \"" f "\""
      n = 0
      while ((getline line < (dir "/" f)) > 0) {
        ++n
        if (line ~ /^[ \t]*#include "/) {
          inc = line; sub(/^[ \t]*#include "/, "", inc); sub(/".*$/, "", inc)
          if (!(inc in seen)) { seen[inc] = 1; ex(inc) }
          print "#line " (n + 1) " \"" f "\""
          continue
        }
        print line
      }
      close(dir "/" f)
    }
    BEGIN { seen[top] = 1; ex(top) }'
}
