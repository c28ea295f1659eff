#!/usr/bin/env bash
# mpprun --max-restarts 1: rank 1 is SIGKILLed at step 7 of the first attempt; mpprun restarts
# all ranks, which resume from the latest checkpoint (step 6, written every 3 steps) and end with
# the same final loss as a run that was never interrupted.
# Part 2: the same with one mpprun per node (--nnodes 2): the node that lost a rank restarts,
# the other node's ranks fail on the closed connections and its mpprun restarts too; both meet
# again on the same MASTER_PORT and resume from the same checkpoint.
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

step "two launchers (--nnodes 2), rank 2 killed at step 7, --max-restarts 1 on both"
port=$(free_port)
fault=(--ckpt-dir "$work/ckpt2" --fault kill --fault-rank 2 --fault-step 7 --fault-once "$work/fired2")
timeout --kill-after=5 240 "$MPPRUN" --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr 127.0.0.1 \
  --master-port "$port" --max-restarts 1 --log-dir "$work/logs1" "$MPP_JOB" "${args[@]}" "${fault[@]}" \
  > "$work/node1.out" 2>&1 &
pid1=$!
at_exit "kill -KILL $pid1"
rc0=0
bounded 240 "$MPPRUN" --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr 127.0.0.1 \
  --master-port "$port" --max-restarts 1 --log-dir "$work/logs0" "$MPP_JOB" "${args[@]}" "${fault[@]}" \
  > "$work/node0.out" 2>&1 || rc0=$?
rc1=0; wait "$pid1" || rc1=$?
grep -a 'restarting\|resumed\|killed' "$work/node0.out" "$work/node1.out" | head -n 6
[[ $rc0 -eq 0 && $rc1 -eq 0 ]] || { tail -n 20 "$work/node0.out" "$work/node1.out"; fail "node 0 exited $rc0, node 1 exited $rc1"; }
grep -aq 'restarting all ranks' "$work/node0.out" || fail "node 0's mpprun did not restart"
grep -aq 'restarting all ranks' "$work/node1.out" || fail "node 1's mpprun did not restart"
grep -aq 'mpp-job: resumed from step 6' "$work/node0.out" || fail "the job did not resume from step 6"
got2=$(final_loss "$work/node0.out")
same_loss "$got2" "$ref" 0 || fail "two-launcher final loss after restart $got2 differs from the uninterrupted $ref"
pass "$mode, two launchers: both restarted, resumed from step 6, final loss $got2 == uninterrupted $ref"
