#!/usr/bin/env bash
# scripts/check-lab judges a learner's file: a rank count the check cannot run on is refused
# before building; the untouched skeleton fails, naming its first unfinished part; the solution
# passes.
#   check_lab_test.sh <repository root> <build tree>
set -uo pipefail
root=$1
export MPP_BUILD_DIR=$2
labs=$root/examples/write_it_yourself
failures=0
# The file the learner's build names now, given back at the end.
inc=$MPP_BUILD_DIR/examples/write_it_yourself/mine/gpipe.inc
saved=$(cat "$inc" 2>/dev/null || true)

# A rank count the check cannot run on is refused before anything is built.
out=$("$root/scripts/check-lab" gpipe "$labs/gpipe.cpp" --ranks 3 2>&1)
status=$?
if [[ $status -ne 2 || $out != *"gpipe runs on 2 or 4 ranks (got --ranks 3)"* || $out == *building* ]]; then
  echo "check-lab --ranks 3: expected a refusal before building (exit $status):"
  echo "$out"
  failures=$((failures + 1))
fi

out=$("$root/scripts/check-lab" gpipe "$labs/gpipe.cpp" 2>&1)
status=$?
if [[ $status -eq 0 || $out != *"gpipe: unfinished: "* || $out == *"PASS"* ]]; then
  echo "check-lab on the skeleton: expected a failure naming an unfinished part (exit $status):"
  echo "$out"
  failures=$((failures + 1))
fi

out=$("$root/scripts/check-lab" gpipe "$labs/solutions/gpipe.cpp" 2>&1)
status=$?
if [[ $status -ne 0 || $out != *"PASS: gpipe on 2 ranks"* ]]; then
  echo "check-lab on the solution: expected PASS (exit $status):"
  echo "$out"
  failures=$((failures + 1))
fi

[[ -n $saved ]] && echo "$saved" >"$inc"
[[ $failures -eq 0 ]] && echo "check-lab: skeleton fails, solution passes"
exit $failures
