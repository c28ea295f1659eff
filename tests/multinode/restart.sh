#!/usr/bin/env bash
# mpprun --max-restarts 1: rank 1 is SIGKILLed at step 7 of the first attempt; mpprun restarts
# all ranks, which resume from the latest checkpoint (step 6, written every 3 steps) and end with
# the same final loss as a run that was never interrupted.
#   restart.sh MODE
source "$(dirname "$0")/lib.sh"
mode="${1:?mode}"
export MPP_TIMEOUT_S=10
args=(--mode "$mode" --steps 10 --ckpt-every 3)

step "uninterrupted run"
ref=$(reference_loss 4 "${args[@]}" --ckpt-dir "$work/ckpt-ref")
step "run with a kill at step 7 and --max-restarts 1"
port=$(free_port); rc=0
bounded 240 "$MPPRUN" --nproc-per-node 4 --master-port "$port" --max-restarts 1 --log-dir "$work/logs" \
  "$MPP_JOB" "${args[@]}" --ckpt-dir "$work/ckpt" \
  --fault kill --fault-rank 1 --fault-step 7 --fault-once "$work/fired" > "$work/out" 2> "$work/err" || rc=$?
grep -a 'restart\|resumed\|killed' "$work/out" "$work/err" | head -n 8
[[ $rc -eq 0 ]] || { tail -n 30 "$work/err"; fail "the restarted job exited $rc"; }
[[ -f "$work/fired" ]] || fail "the fault never fired"
grep -aq 'restarting all ranks' "$work/err" || fail "mpprun did not restart the job"
grep -aq 'mpp-job: resumed from step 6' "$work/out" || fail "the job did not resume from the step-6 checkpoint"
got=$(final_loss "$work/out")
same_loss "$got" "$ref" 0 || fail "final loss after restart $got differs from the uninterrupted $ref"
pass "$mode: killed at step 7, resumed from step 6, final loss $got == uninterrupted $ref"
