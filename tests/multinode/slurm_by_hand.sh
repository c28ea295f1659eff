#!/usr/bin/env bash
# What srun does for the ranks, done by hand: each process gets only SLURM's variables (as srun
# sets them for 2 nodes x 2 tasks) plus MASTER_ADDR/MASTER_PORT, and must find its place from
# them. Needs no SLURM daemons, so it runs everywhere.
#   slurm_by_hand.sh MODE STEPS
source "$(dirname "$0")/lib.sh"
mode="${1:?mode}"; steps="${2:-6}"

args=(--mode "$mode" --steps "$steps")
ref=$(reference_loss 4 "${args[@]}")
port=$(free_port)
step "4 processes with SLURM_* variables (nodes 0 and 1, 2 tasks each)"
pids=()
for r in 0 1 2 3; do
  env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE \
    SLURM_PROCID=$r SLURM_NTASKS=4 SLURM_NNODES=2 SLURM_NODEID=$((r / 2)) SLURM_LOCALID=$((r % 2)) \
    SLURM_TASKS_PER_NODE='2(x2)' SLURM_STEP_TASKS_PER_NODE='2(x2)' SLURM_JOB_NODELIST='node[0-1]' \
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout --kill-after=5 240 "$MPP_JOB" "${args[@]}" > "$work/rank$r.out" 2>&1 &
  pids+=($!)
  at_exit "kill -KILL ${pids[-1]}"
done
for r in 0 1 2 3; do
  rc=0; wait "${pids[r]}" || rc=$?
  [[ $rc -eq 0 ]] || { tail -n 30 "$work/rank$r.out"; fail "rank $r exited $rc"; }
done
grep -aq 'rank 3 of 4, node 1, local 1, launcher SLURM' "$work/rank3.out" ||
  { cat "$work/rank3.out"; fail "rank 3 did not place itself as node 1, local rank 1 from SLURM's variables"; }
got=$(final_loss "$work/rank0.out")
same_loss "$got" "$ref" || fail "loss $got differs from mpprun's $ref"
pass "$mode with SLURM variables by hand: loss $got equals mpprun's $ref"
