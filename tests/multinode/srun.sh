#!/usr/bin/env bash
# The same job binary under SLURM's srun on a private one-node cluster started for this test
# (scripts/slurm-local: slurmctld + slurmd, auth/none). The ranks read SLURM_PROCID, SLURM_NTASKS,
# SLURM_LOCALID, SLURM_NODEID and SLURM_STEP_TASKS_PER_NODE; MASTER_ADDR/PORT come from the
# caller as in an sbatch script. See slurm_by_hand.sh for the same without daemons.
#   srun.sh MODE STEPS
source "$(dirname "$0")/lib.sh"
mode="${1:?mode}"; steps="${2:-6}"
"$MPP_SOURCE_DIR/scripts/slurm-local" check || skip "SLURM's daemons cannot run here (see above)"

args=(--mode "$mode" --steps "$steps")
ref=$(reference_loss 4 "${args[@]}")
export MPP_SLURM_PORT=$(free_port)
bounded 60 "$MPP_SOURCE_DIR/scripts/slurm-local" up "$work/slurm" ||
  fail "the local SLURM cluster did not start (logs in $work/slurm/log)"
at_exit "'$MPP_SOURCE_DIR/scripts/slurm-local' down '$work/slurm'"
port=$(free_port)
step "srun -n 4"
rc=0
MASTER_ADDR=127.0.0.1 MASTER_PORT=$port bounded 240 "$MPP_SOURCE_DIR/scripts/slurm-local" run \
  "$work/slurm" srun --ntasks 4 --time 4 --kill-on-bad-exit=1 "$MPP_JOB" "${args[@]}" \
  > "$work/srun.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || { tail -n 40 "$work/srun.out"; fail "srun run exited $rc"; }
grep -aq 'launcher SLURM' "$work/srun.out" || fail "the ranks did not read SLURM's variables"
got=$(final_loss "$work/srun.out")
same_loss "$got" "$ref" || fail "srun loss $got differs from mpprun's $ref"
pass "$mode under srun: loss $got equals mpprun's $ref"
