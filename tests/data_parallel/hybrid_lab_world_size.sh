#!/usr/bin/env bash
# Lab 14 on a world size its mesh cannot cut into 2-stage pipelines: every rank prints the mesh's
# message (prefixed "hybrid:") and exits with code 1, which mpprun passes on; no rank aborts.
#   hybrid_lab_world_size.sh MPPRUN LAB
set -uo pipefail
mpprun="${1:?mpprun}"; lab="${2:?lab}"
fail() { echo "FAIL: $*" >&2; exit 1; }
out=$(mktemp); trap 'rm -f "$out"' EXIT

rc=0
timeout --kill-after=5 120 "$mpprun" --nproc-per-node 3 --log-dir "" "$lab" 1 12 > "$out" 2>&1 || rc=$?
cat "$out"
[[ $rc -eq 1 ]] || fail "on 3 ranks the lab exited with $rc, not 1"
grep -q "hybrid: mpp: DP x PP mesh needs the world size to be a multiple of the pipeline degree" "$out" ||
  fail "on 3 ranks the lab did not print the mesh's message"
grep -q "launch a multiple of 2 ranks" "$out" || fail "the message does not name the fix"
# The launcher stops the ranks still running with SIGTERM once one has failed; an abort would
# show as signal 6.
grep -q "signal 6\|SIGABRT\|terminate called" "$out" && fail "a rank aborted"
echo "PASS: refused on 3 ranks with the message and exit code 1"
