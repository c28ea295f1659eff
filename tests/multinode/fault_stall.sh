#!/usr/bin/env bash
# A rank that stalls (sleeps) mid-step past the deadline: its peers' waits expire after
# MPP_TIMEOUT_S with an error naming the stalled rank, and mpprun stops the job and exits
# non-zero with a summary, well before the stalled rank would have woken up.
#   fault_stall.sh MODE
source "$(dirname "$0")/lib.sh"
mode="${1:?mode}"
# The survivors name the dead/stalled peer: checked for the pipeline (point-to-point knows its
# peer) and, for DDP, only with "names-peer" (a failed collective does not name ranks yet).
names_peer=0
[[ "$mode" == pipeline || "${2:-}" == names-peer ]] && names_peer=1
deadline=5
export MPP_TIMEOUT_S=$deadline MPP_INIT_TIMEOUT_S=60
port=$(free_port); rc=0; t0=$(date +%s.%N)
bounded 120 "$MPPRUN" --nproc-per-node 4 --master-port "$port" --log-dir "$work/logs" \
  "$MPP_JOB" --mode "$mode" --steps 30 --fault stall --fault-rank 2 --fault-step 3 --stall-seconds 60 \
  > "$work/out" 2> "$work/err" || rc=$?
took=$(since_fault "$work/out")
grep -a 'mpp' "$work/err" | tail -n 8
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "mpprun exited $rc; expected a rank's failure (not 0, not the launcher's own timeout)"
grep -aq 'fault: rank 2 stalls' "$work/out" || fail "the stall was not injected"
awk -v t="$took" -v d="$deadline" 'BEGIN { exit !(t < d + 5) }' ||
  fail "the job ended ${took} s after the stall began (deadline ${deadline} s, stall 60 s)"
first=$(first_failure "$work/err")
[[ -n "$first" && "$first" != 2 ]] || fail "mpprun's summary should name a peer of rank 2 as the first failure (got '$first')"
# Waits form a chain (rank 0 waits on 1, which waits on 2): the neighbours of the stalled rank
# name it; a rank further away may time out first and names the neighbour it waited on.
named=$(grep -aE '^\[rank[0-9]+\]: mpp: ' "$work/err" | grep -aiE 'time|deadline' | grep -aE 'rank 2\b|rank\(s\) \[([0-9]+, )*2[],]' | head -n 2 || true)
if [[ $names_peer -eq 1 ]]; then
  [[ -n "$named" ]] || { grep -a 'mpp:' "$work/err" | tail -n 5; fail "no rank's timeout error names the stalled rank 2"; }
  echo "$named"
else
  grep -aE '^\[rank[0-9]+\]: mpp: ' "$work/err" | grep -aiE 'time|deadline' | head -n 1 ||
    fail "no rank reported a timeout"
  echo "NOT CHECKED here: that the timeouts name rank 2 (multinode.fault_stall_ddp_names_peer)"
fi
pass "stall: timeouts after ~${deadline} s (first failure: rank $first); job ended ${took} s after the stall began, exit $rc"
