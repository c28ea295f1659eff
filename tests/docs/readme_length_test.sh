#!/usr/bin/env bash
# The README promises an example of at most 20 lines: count the region it quotes.
#   tests/docs/readme_length_test.sh tests/docs/readme_example.cpp
set -euo pipefail
n=$(awk '/\[quote:readme\]/ { on = 1; next } /\[\/quote:readme\]/ { on = 0 } on' "$1" | wc -l)
echo "README example: $n lines"
if ((n < 5 || n > 20)); then
  echo "readme_length_test: the quoted region of $1 has $n lines; the README promises at most 20" >&2
  exit 1
fi
