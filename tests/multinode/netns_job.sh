#!/usr/bin/env bash
# Two "nodes" (network namespaces joined by a veth pair, 10.231.x.1 and .2), two ranks each,
# started by one `mpprun --nnodes 2 --node-rank R` per node: a 4-rank job (MODE = ddp or
# pipeline) trained over real TCP between the namespaces. It must end with the same loss as the
# same job on one host over loopback, and the veth link must have carried the traffic.
#   netns_job.sh MODE STEPS
source "$(dirname "$0")/lib.sh"
mode="${1:?mode}"; steps="${2:-6}"

need_root "the two-namespace test"
"$MPP_SOURCE_DIR/scripts/netns" check || skip "network namespaces cannot be created here (see above)"

prefix="mn$$"; prefix="${prefix:0:10}"
"$MPP_SOURCE_DIR/scripts/netns" up "$prefix" >/dev/null
at_exit "'$MPP_SOURCE_DIR/scripts/netns' down $prefix"
node() { "$MPP_SOURCE_DIR/scripts/netns" exec "$prefix" "$@"; }
master=$("$MPP_SOURCE_DIR/scripts/netns" addr "$prefix" 0)

args=(--mode "$mode" --steps "$steps")
step "reference: 4 ranks on one host"
ref=$(reference_loss 4 "${args[@]}")
echo "reference final loss $ref"

# Bytes node0's end of the veth has sent (tx) or received (rx) so far.
link_bytes() {
  ip -n "${prefix}0" -s -j link show "${prefix}v0" | sed "s/.*\"$1\":{\"bytes\":\([0-9]*\).*/\1/"
}
tx0=$(link_bytes tx); rx0=$(link_bytes rx)

port=29500
step "node1 ($("$MPP_SOURCE_DIR/scripts/netns" addr "$prefix" 1)) and node0 ($master), 2 ranks each"
start=$(date +%s.%N)
node 1 timeout --kill-after=5 240 "$MPPRUN" --nnodes 2 --node-rank 1 --nproc-per-node 2 \
  --master-addr "$master" --master-port "$port" --log-dir "$work/logs1" \
  "$MPP_JOB" "${args[@]}" > "$work/node1.out" 2>&1 &
pid1=$!
at_exit "kill -KILL $pid1"
rc0=0
node 0 timeout --kill-after=5 240 "$MPPRUN" --nnodes 2 --node-rank 0 --nproc-per-node 2 \
  --master-addr "$master" --master-port "$port" --log-dir "$work/logs0" \
  "$MPP_JOB" "${args[@]}" > "$work/node0.out" 2>&1 || rc0=$?
rc1=0; wait "$pid1" || rc1=$?
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
if [[ $rc0 -ne 0 || $rc1 -ne 0 ]]; then
  echo "---- node0 (exit $rc0)"; tail -n 40 "$work/node0.out"
  echo "---- node1 (exit $rc1)"; tail -n 40 "$work/node1.out"
  fail "the two-node run failed (node0 exit $rc0, node1 exit $rc1)"
fi
tx=$(( $(link_bytes tx) - tx0 )); rx=$(( $(link_bytes rx) - rx0 ))

got=$(final_loss "$work/node0.out")
loss_went_down "$work/node0.out"
grep -aq 'rank 2 of 4, node 1' "$work/node1.out" || fail "node1 did not run global ranks 2 and 3"
grep -aq 'rank 3 of 4, node 1' "$work/node1.out" || fail "node1 did not run global ranks 2 and 3"
echo "two-node final loss $got (reference $ref), ${elapsed} s, veth node0: sent $tx B, received $rx B"
same_loss "$got" "$ref" || fail "two-node loss $got differs from the one-host loss $ref"
# Real TCP between the namespaces: the ranks' traffic crossed the veth, not loopback.
# (node1 cannot reach node0 any other way; the counters show how much went over the link.)
(( tx > 50000 && rx > 50000 )) ||
  fail "the veth link carried only $tx/$rx bytes: the ranks did not talk across the namespaces"
pass "$mode over two namespaces: loss $got equals one-host $ref; $tx B out / $rx B in over the veth in ${elapsed} s"
