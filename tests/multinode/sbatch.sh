#!/usr/bin/env bash
# config/slurm_example.sbatch, unchanged, on a real two-node SLURM cluster made for this test:
# node0 and node1 are network namespaces joined by a veth pair, each with its own slurmd
# (scripts/netns + scripts/slurm-local --netns). sbatch runs the script on node0; srun starts
# 2 ranks on each node; the 4-rank job must end with the same loss as on one host.
#   sbatch.sh MODE STEPS
source "$(dirname "$0")/lib.sh"
mode="${1:?mode}"; steps="${2:-6}"
need_root "the two-node SLURM test"
"$MPP_SOURCE_DIR/scripts/netns" check || skip "network namespaces cannot be created here (see above)"
"$MPP_SOURCE_DIR/scripts/slurm-local" check || skip "SLURM's daemons cannot run here (see above)"

args=(--mode "$mode" --steps "$steps")
ref=$(reference_loss 4 "${args[@]}")

prefix="sb$$"; prefix="${prefix:0:10}"
"$MPP_SOURCE_DIR/scripts/netns" up "$prefix" >/dev/null
at_exit "'$MPP_SOURCE_DIR/scripts/netns' down $prefix"
export MPP_SLURM_PORT=16817
bounded 60 "$MPP_SOURCE_DIR/scripts/slurm-local" up "$work/slurm" --netns "$prefix" ||
  fail "the two-node SLURM cluster did not start (logs in $work/slurm/log)"
at_exit "'$MPP_SOURCE_DIR/scripts/slurm-local' down '$work/slurm'"

step "sbatch --wait config/slurm_example.sbatch (2 nodes x 2 tasks)"
rc=0
(cd "$MPP_SOURCE_DIR" && bounded 300 "$MPP_SOURCE_DIR/scripts/slurm-local" run "$work/slurm" \
  sbatch --wait --output="$work/job.out" config/slurm_example.sbatch "$MPP_JOB" "${args[@]}") \
  > "$work/sbatch.out" 2>&1 || rc=$?
cat "$work/sbatch.out"
[[ -f "$work/job.out" ]] || fail "the job wrote no output file (sbatch exit $rc)"
[[ $rc -eq 0 ]] || { tail -n 40 "$work/job.out"; fail "the sbatch job failed (exit $rc)"; }
grep -a '^job ' "$work/job.out" || true
grep -aq 'rendezvous at node0:' "$work/job.out" || fail "MASTER_ADDR was not the first node (node0)"
for r in 0 1 2 3; do
  grep -aq "rank $r of 4, node $((r / 2)), local $((r % 2)), launcher SLURM" "$work/job.out" ||
    { cat "$work/job.out"; fail "rank $r did not run as node $((r / 2)), local rank $((r % 2))"; }
done
got=$(final_loss "$work/job.out")
same_loss "$got" "$ref" || fail "sbatch loss $got differs from the one-host loss $ref"
pass "$mode via sbatch on 2 SLURM nodes: loss $got equals one-host $ref"
