#!/usr/bin/env bash
# End-to-end checks of the train_tiny_transformer program itself (lab 15), on a tiny config:
#   1. --resume continues the same loss curve: metrics.csv of an interrupted + resumed run equals
#      the uninterrupted run's, value for value (dropout on: the generator state travels too);
#   2. a truncated checkpoint and a checkpoint of another model are refused, with the reason;
#   3. under mpprun with --ddp on 2 ranks: every rank writes logs/rank_<r>/train.log, the ranks'
#      losses differ (different data) and the global loss equals the single-process run's;
#   4. a DDP run interrupted and resumed on 2 ranks continues the same curve;
#   5. started by a launcher without --ddp, the program refuses to run;
#   6. Python (Debian's python3-torch) opens the program's checkpoint with torch.load and, from the
#      saved weights alone, decodes the same greedy sample the program printed;
#   7. with --pipeline on 2 and 4 ranks (embedding on the first stage, head on the last) the losses
#      equal the single-process run's; a pipeline run resumed from its per-stage checkpoint
#      continues the same curve; a pipeline checkpoint is refused by a non-pipeline run.
#   lab15.sh   (environment: LAB=<train_tiny_transformer>, MPPRUN=<mpprun>)
set -euo pipefail
: "${LAB:?path of train_tiny_transformer}" "${MPPRUN:?path of mpprun}"
work=$(mktemp -d "${TMPDIR:-/tmp}/mpp_lab15.XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

config() {  # config DROPOUT > file (2 blocks: 4 parts, one per stage of a 4-stage pipeline)
  cat <<EOF
{"model": {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 2,
           "intermediate_size": 64, "max_position_embeddings": 32, "dropout": $1},
 "training": {"batch_size": 8, "sequence_length": 32, "eval_every": 4, "log_every": 2},
 "data": {"train_characters": 2049, "validation_characters": 200}}
EOF
}
config 0.1 > "$work/dropout.json"
config 0.0 > "$work/plain.json"
run() { timeout 120 "$LAB" --quiet --sample 0 "$@"; }
losses() { cut -d, -f1,3 "$1/metrics.csv"; }  # step, train loss

step "1. resume continues the same curve (8 steps per epoch, 12 steps, checkpoint at 6)"
run --config "$work/dropout.json" --max-steps 12 --out-dir "$work/whole" > /dev/null
run --config "$work/dropout.json" --max-steps 6 --save-every 6 --out-dir "$work/split" > /dev/null
run --config "$work/dropout.json" --max-steps 12 --resume latest --out-dir "$work/split" \
  > "$work/resume.out"
grep -q "resumed from .*step_6 at step 6" "$work/resume.out" || fail "no resume message: $(cat "$work/resume.out")"
[[ $(losses "$work/whole" | wc -l) -eq 13 ]] || fail "expected 12 metrics rows"
diff <(losses "$work/whole") <(losses "$work/split") || fail "resumed run's losses differ"
[[ -s "$work/split/loss_curve.svg" ]] || fail "no loss_curve.svg"
grep -q "# resumed at step 6" "$work/split/logs/rank_0/train.log" || fail "train.log lacks the resume mark"

step "2. damaged and foreign checkpoints are refused"
cp -r "$work/split" "$work/cut"
state="$work/cut/checkpoints/step_6/state.pt"
truncate -s $(( $(stat -c %s "$state") / 2 )) "$state"
if run --config "$work/dropout.json" --resume latest --out-dir "$work/cut" 2> "$work/cut.err"; then
  fail "a truncated checkpoint was accepted"
fi
grep -q "truncated or overwritten" "$work/cut.err" || fail "unexpected message: $(cat "$work/cut.err")"
sed 's/"hidden_size": 32/"hidden_size": 16/' "$work/dropout.json" > "$work/narrow.json"
if run --config "$work/narrow.json" --resume latest --out-dir "$work/split" 2> "$work/narrow.err"; then
  fail "a checkpoint of another model was accepted"
fi
grep -q "written with model.hidden_size = 32 but the config says 16" "$work/narrow.err" ||
  fail "unexpected message: $(cat "$work/narrow.err")"

step "3. DDP on 2 ranks under mpprun equals one process on the same global batch"
run --config "$work/plain.json" --max-steps 10 --out-dir "$work/single" > /dev/null
timeout 180 "$MPPRUN" --nproc-per-node 2 --timeout 150 "$LAB" --ddp --quiet --sample 0 \
  --config "$work/plain.json" --max-steps 10 --out-dir "$work/ddp" > "$work/ddp.out" 2>&1 ||
  { cat "$work/ddp.out"; fail "mpprun --ddp failed"; }
for r in 0 1; do
  [[ -s "$work/ddp/logs/rank_$r/train.log" ]] || fail "rank $r wrote no train.log"
done
diff -q <(grep -v '^#' "$work/ddp/logs/rank_0/train.log" | cut -d' ' -f2) \
  <(grep -v '^#' "$work/ddp/logs/rank_1/train.log" | cut -d' ' -f2) > /dev/null &&
  fail "both ranks logged the same losses: is the data really split?"
worst=$(paste -d, <(losses "$work/single") <(losses "$work/ddp") | tail -n +2 |
  awk -F, '{ d = $2 - $4; if (d < 0) d = -d; if (d > m) m = d } END { printf "%g", m }')
awk -v w="$worst" 'BEGIN { exit !(w < 1e-4) }' || fail "DDP loss differs from single process by $worst"
echo "largest |DDP - single| train loss over 10 steps: $worst"

step "4. a DDP run resumed on 2 ranks continues the same curve (dropout on: per-rank generators)"
ddp() { timeout 180 "$MPPRUN" --nproc-per-node 2 --timeout 150 "$LAB" --ddp --quiet --sample 0 \
  --config "$work/dropout.json" "$@" > "$work/ddp2.out" 2>&1 || { cat "$work/ddp2.out"; fail "mpprun $*"; }; }
ddp --max-steps 10 --out-dir "$work/ddp_whole"
ddp --max-steps 5 --save-every 5 --out-dir "$work/ddp_split"
ddp --max-steps 10 --resume latest --out-dir "$work/ddp_split"
diff <(losses "$work/ddp_whole") <(losses "$work/ddp_split") || fail "resumed DDP run's losses differ"
if run --config "$work/dropout.json" --resume latest --out-dir "$work/ddp_split" 2> "$work/world.err"; then
  fail "a 2-rank checkpoint was resumed by one process"
fi
grep -q "written by 2 rank(s) and this run has 1" "$work/world.err" ||
  fail "unexpected message: $(cat "$work/world.err")"

step "5. several copies without --ddp are refused"
if WORLD_SIZE=2 RANK=0 run --config "$work/plain.json" --max-steps 1 --out-dir "$work/nope" 2> "$work/nope.err"; then
  fail "ran as one of 2 ranks without --ddp"
fi
grep -q "without --ddp" "$work/nope.err" || fail "unexpected message: $(cat "$work/nope.err")"
step "6. torch.load in Python: same weights, same greedy sample"
if /usr/bin/python3 -c 'import torch' 2> /dev/null; then
  run --config "$work/plain.json" --max-steps 12 --save-every 12 --sample 40 --out-dir "$work/py" \
    > "$work/py.out"
  /usr/bin/python3 "$(dirname "$0")/../../examples/15_tiny_transformer/load_checkpoint.py" \
    "$work/py/checkpoints/step_12" 40 > "$work/py_load.out" || fail "load_checkpoint.py failed"
  grep -q "^step 12 (epoch 2, batch 4)" "$work/py_load.out" || fail "unexpected: $(cat "$work/py_load.out")"
  diff <(sed -n '/^greedy sample/,$p' "$work/py.out") <(sed -n '/^greedy sample/,$p' "$work/py_load.out") ||
    fail "Python's greedy sample from the checkpoint differs from the program's"
  echo "python: $(head -1 "$work/py_load.out")"
else
  echo "SKIPPED step 6: /usr/bin/python3 has no torch (apt-get install python3-torch)"
fi
step "7. pipeline on 2 and 4 stages equals one process; per-stage checkpoints resume"
for n in 2 4; do
  timeout 180 "$MPPRUN" --nproc-per-node $n --timeout 150 "$LAB" --pipeline --quiet --sample 0 \
    --config "$work/plain.json" --max-steps 10 --out-dir "$work/pipe$n" > "$work/pipe$n.out" 2>&1 ||
    { cat "$work/pipe$n.out"; fail "mpprun --pipeline on $n ranks failed"; }
  worst=$(paste -d, <(losses "$work/single") <(losses "$work/pipe$n") | tail -n +2 |
    awk -F, '{ d = $2 - $4; if (d < 0) d = -d; if (d > m) m = d } END { printf "%g", m }')
  awk -v w="$worst" 'BEGIN { exit !(w < 1e-4) }' || fail "$n-stage pipeline loss differs by $worst"
  echo "largest |pipeline($n) - single| train loss over 10 steps: $worst"
done
pipe() { timeout 180 "$MPPRUN" --nproc-per-node 2 --timeout 150 "$LAB" --pipeline --quiet --sample 0 \
  --config "$work/dropout.json" "$@" > "$work/pipe.out" 2>&1 || { cat "$work/pipe.out"; fail "mpprun $*"; }; }
pipe --max-steps 12 --out-dir "$work/pipe_whole"
pipe --max-steps 6 --save-every 6 --out-dir "$work/pipe_split"
[[ -f "$work/pipe_split/checkpoints/step_6/stage_0.pt" && -f "$work/pipe_split/checkpoints/step_6/stage_1.pt" ]] ||
  fail "the pipeline checkpoint lacks a stage file"
pipe --max-steps 12 --resume latest --out-dir "$work/pipe_split"
diff <(losses "$work/pipe_whole") <(losses "$work/pipe_split") || fail "resumed pipeline run's losses differ"
if run --config "$work/dropout.json" --resume latest --out-dir "$work/pipe_split" 2> "$work/mode.err"; then
  fail "a pipeline checkpoint was resumed by a single process"
fi
grep -q "written by a pipeline run" "$work/mode.err" || fail "unexpected message: $(cat "$work/mode.err")"
echo "PASS"
