#!/usr/bin/env bash
# Chapter 01's claim of reproducibility: two runs of the monolith on one machine print the same
# losses, digit for digit (another machine's CPU or BLAS kernel need not, so the chapter's quoted
# losses are compared to a tolerance by docs.run, and exactly only here).
#   same_losses_twice.sh MONOLITH [ARGS...]
set -uo pipefail
lab="${1:?monolith}"; shift
fail() { echo "FAIL: $*" >&2; exit 1; }
losses() { timeout --kill-after=5 120 "$lab" "$@" | grep -E '^step +[0-9]+ +loss '; }
first=$(losses "$@") || fail "the first run failed or printed no loss"
second=$(losses "$@") || fail "the second run failed or printed no loss"
[[ $(wc -l <<<"$first") -ge 2 ]] || fail "fewer than two loss lines: $first"
if [[ $first != "$second" ]]; then
  diff <(echo "$first") <(echo "$second")
  fail "two runs on this machine printed different losses"
fi
echo "$first"
echo "PASS: two runs printed the same $(wc -l <<<"$first") loss lines"
