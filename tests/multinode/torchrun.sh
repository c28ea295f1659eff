#!/usr/bin/env bash
# The same job binary under torchrun from Debian's python3-torch (`--no_python`): 4 ranks, same
# final loss as under mpprun. torch 1.13's torchrun on Python 3.11 crashes in its redirect
# parsing unless --redirects/--tee hold a value whose flag is a single bit: 1 (stdout) works.
#   torchrun.sh MODE STEPS
source "$(dirname "$0")/lib.sh"
mode="${1:?mode}"; steps="${2:-6}"
py=/usr/bin/python3
[[ -x $py ]] || skip "Debian's /usr/bin/python3 is missing (apt-get install python3-torch)"
$py -c 'import torch.distributed.run' 2>/dev/null ||
  skip "torchrun is not available: /usr/bin/python3 cannot import torch.distributed.run (apt-get install python3-torch)"

args=(--mode "$mode" --steps "$steps")
ref=$(reference_loss 4 "${args[@]}")
port=$(free_port)
step "torchrun --no_python --nproc_per_node 4"
rc=0
bounded 240 $py -m torch.distributed.run --redirects 1 --tee 1 --no_python --nproc_per_node 4 \
  --master_port "$port" --log_dir "$work/torchrun-logs" \
  "$MPP_JOB" "${args[@]}" > "$work/torchrun.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || { tail -n 40 "$work/torchrun.out"; fail "torchrun run exited $rc"; }
grep -aq 'launcher torchrun' "$work/torchrun.out" || fail "the ranks did not read torchrun's variables"
got=$(final_loss "$work/torchrun.out")
same_loss "$got" "$ref" || fail "torchrun loss $got differs from mpprun's $ref"
pass "$mode under torchrun: loss $got equals mpprun's $ref"
