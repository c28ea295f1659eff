#!/usr/bin/env bash
# The same job binary under Open MPI's mpirun: the ranks read OMPI_COMM_WORLD_{RANK,SIZE,
# LOCAL_RANK,LOCAL_SIZE}; mpirun sets no rendezvous address, so MASTER_ADDR/MASTER_PORT are
# exported with -x. mpp uses MPI only as a launcher: the tensors still travel through Gloo.
#   mpirun.sh MODE STEPS
source "$(dirname "$0")/lib.sh"
mode="${1:?mode}"; steps="${2:-6}"
need_cmd mpirun "apt-get install openmpi-bin, or scripts/setup-multinode"

args=(--mode "$mode" --steps "$steps")
ref=$(reference_loss 4 "${args[@]}")
port=$(free_port)
step "mpirun -np 4"
rc=0
# --allow-run-as-root: tests run as root here; --oversubscribe: 4 ranks on 2 cores;
# --bind-to none: do not pin 4 ranks onto 2 cores one by one.
MASTER_ADDR=127.0.0.1 MASTER_PORT=$port bounded 240 mpirun --allow-run-as-root --oversubscribe \
  --bind-to none -np 4 -x MASTER_ADDR -x MASTER_PORT -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS \
  "$MPP_JOB" "${args[@]}" > "$work/mpirun.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || { tail -n 40 "$work/mpirun.out"; fail "mpirun run exited $rc"; }
grep -aq 'launcher Open MPI' "$work/mpirun.out" || fail "the ranks did not read Open MPI's variables"
got=$(final_loss "$work/mpirun.out")
same_loss "$got" "$ref" || fail "mpirun loss $got differs from mpprun's $ref"
pass "$mode under mpirun: loss $got equals mpprun's $ref"
