#!/usr/bin/env bash
# mpp-plot on made-up files: a CSV with a header (named columns, empty fields skipped) and a
# whitespace log with comments (numbered columns); a missing column fails naming it.
#   tests/docs/mpp_plot_test.sh path/to/mpp-plot
set -uo pipefail
plot=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

printf 'step,epoch,train_loss,validation_loss\n0,0,3.4,3.47\n1,0,3.0,\n2,0,2.5,2.6\n' >"$work/metrics.csv"
printf '# rank 0 of 2: step loss samples_per_s time_s\n5 2.8 900 0.1\n10 2.1 910 0.2\n15 1.9 905 0.3\n' >"$work/train.log"

"$plot" --x step --y train_loss,validation_loss "$work/metrics.csv=run" --svg "$work/a.svg" ||
  fail "named columns"
[[ $(grep -c '<polyline' "$work/a.svg") == 2 ]] || fail "two series expected in a.svg"
[[ $(grep -c '<circle' "$work/a.svg") == 5 ]] || fail "3 train + 2 validation points expected"
grep -qF '>run: validation_loss<' "$work/a.svg" || fail "legend label 'run: validation_loss'"

"$plot" --x 1 --y 2 "$work/train.log=rank 0" --svg "$work/b.svg" --title "t" || fail "numbered columns"
[[ $(grep -c '<circle' "$work/b.svg") == 3 ]] || fail "3 points expected in b.svg (comments skipped)"

if out=$("$plot" --x step --y nope "$work/metrics.csv" --svg "$work/c.svg" 2>&1); then
  fail "a missing column did not fail"
else
  grep -qF "no column 'nope'" <<<"$out" || fail "the error does not name the column: $out"
fi

((failures)) && { echo "mpp_plot_test: $failures failure(s)" >&2; exit 1; }
echo "mpp_plot_test: all cases passed"
