#!/usr/bin/env bash
# Two "nodes" on one machine, no root: two mpprun processes on loopback, each told its place only
# by the variables a launcher script exports (NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT), one
# rank each. The 2-rank job (MODE = ddp or pipeline) must end with the same loss as the same job
# started by one mpprun, and the second node must run global rank 1.
#   loopback_env.sh MODE STEPS
source "$(dirname "$0")/lib.sh"
mode="${1:?mode}"; steps="${2:-6}"; nproc="${3:-1}"; world=$((2 * nproc))

args=(--mode "$mode" --steps "$steps")
step "reference: $world ranks started by one mpprun"
ref=$(reference_loss "$world" "${args[@]}")
echo "reference final loss $ref"

port=$(free_port)
step "node 1 and node 0 from the environment, $nproc rank(s) each, rendezvous at 127.0.0.1:$port"
NNODES=2 NODE_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
  timeout --kill-after=5 240 "$MPPRUN" --nproc-per-node "$nproc" --log-dir "$work/logs1" \
  "$MPP_JOB" "${args[@]}" > "$work/node1.out" 2>&1 &
pid1=$!
at_exit "kill -KILL $pid1"
rc0=0
NNODES=2 NODE_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
  timeout --kill-after=5 240 "$MPPRUN" --nproc-per-node "$nproc" --log-dir "$work/logs0" \
  "$MPP_JOB" "${args[@]}" > "$work/node0.out" 2>&1 || rc0=$?
rc1=0; wait "$pid1" || rc1=$?
if [[ $rc0 -ne 0 || $rc1 -ne 0 ]]; then
  echo "---- node0 (exit $rc0)"; tail -n 40 "$work/node0.out"
  echo "---- node1 (exit $rc1)"; tail -n 40 "$work/node1.out"
  fail "the two-node run failed (node0 exit $rc0, node1 exit $rc1)"
fi
for ((r = nproc; r < world; r++)); do
  grep -aq "rank $r of $world, node 1" "$work/node1.out" || fail "node 1 did not run global rank $r"
done
got=$(final_loss "$work/node0.out")
loss_went_down "$work/node0.out"
same_loss "$got" "$ref" || fail "two-node loss $got differs from the one-mpprun loss $ref"
pass "$mode, two mpprun from the environment on loopback: loss $got equals $ref"
