#!/usr/bin/env bash
# One binary, several world sizes: the 1F1B lab (built with mpp::with_ranks<2, 4>) trains on 2
# ranks and on 4, and on 3 it stops at once with exit code 2 and the sizes it supports.
#   with_ranks_lab.sh MPPRUN LAB
set -uo pipefail
mpprun="${1:?mpprun}"; lab="${2:?lab}"
fail() { echo "FAIL: $*" >&2; exit 1; }
out=$(mktemp); trap 'rm -f "$out"' EXIT

for n in 2 4; do
  timeout --kill-after=5 240 "$mpprun" --nproc-per-node "$n" --log-dir "" "$lab" --steps 1 \
    > "$out" 2>&1 || { cat "$out"; fail "the lab failed on $n ranks"; }
  grep -q "lab 08: $n ranks over" "$out" || { cat "$out"; fail "no '$n ranks' header"; }
  echo "PASS: trains on $n ranks"
done

rc=0
timeout --kill-after=5 120 "$mpprun" --nproc-per-node 3 --log-dir "" "$lab" --steps 1 \
  > "$out" 2>&1 || rc=$?
cat "$out"
[[ $rc -eq 2 ]] || fail "on 3 ranks the lab exited with $rc, not 2"
grep -q "this program runs on 2 or 4 ranks, not 3; launch one of those" "$out" ||
  fail "on 3 ranks the lab did not name the sizes it supports"
echo "PASS: refused on 3 ranks with the list"
