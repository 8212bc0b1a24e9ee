#!/usr/bin/env bash
# linewidth.sh checks that the Go files of the examples, what vendors
# copy, have lines of at most MAX columns (default 100; a tab counts as
# TAB columns, default 4), so that a line count measures work, not
# density. gofmt is checked by test.sh. Arguments name the folders to
# check instead of the default: every folder under examples/ except those
# in EXCLUDE (space-separated; none by default).
set -euo pipefail
export LC_ALL=C
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
MAX=${MAX:-100}
TAB=${TAB:-4}
EXCLUDE=${EXCLUDE-}

dirs=("$@")
if [ ${#dirs[@]} -eq 0 ]; then
  for d in examples/*/; do
    d=${d%/}
    case " $EXCLUDE " in *" $d "*) continue ;; esac
    dirs+=("$d")
  done
fi

# An Example's "// Output:" block is what the program prints, not code: it
# is not checked.
long=$(git ls-files -- "${dirs[@]/%//*.go}" | xargs -r awk -v max="$MAX" -v tab="$TAB" '
  FNR == 1 { output = 0 }
  /^[ \t]*\/\/ (Unordered output|Output):/ { output = 1; next }
  output && /^[ \t]*\/\// { next }
  { output = 0 }
  { line = $0; width = 0
    for (i = 1; i <= length(line); i++) {
      c = substr(line, i, 1)
      if (c == "\t") width += tab - width % tab; else if (c !~ /[\200-\277]/) width++
    }
    if (width > max) printf "%s:%d: %d columns\n", FILENAME, FNR, width }')
if [ -n "$long" ]; then
  echo "lines wider than $MAX columns (a tab is $TAB) in ${dirs[*]}:" >&2
  echo "$long" >&2
  exit 1
fi
