#!/usr/bin/env bash
# `mpp-docs run` (its header says the rules): the commands of a block marked <!-- run --> are run
# and their output compared with the block. Part 1 checks the rules on a made-up tree whose
# commands are printf and friends; part 2 is the mutation test on the real chapters: a copy of the
# repository passes, and the same copy with one expected line changed fails naming the chapter,
# the line, the command, the expected line and the line printed instead.
#   tests/docs/run_test.sh path/to/mpp-docs path/to/repository path/to/build-tree
set -uo pipefail
tool=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
source_root=$(cd "$2" && pwd)
build=$(cd "$3" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# run_passes ROOT NAME: run on ROOT (its docs/01-one.md) must pass.
run_passes() {
  local out
  out=$("$tool" run --root "$1" --build "$work/build" "$1/docs/01-one.md" 2>&1) ||
    { fail "$2: run failed on a sound block:"; echo "$out" >&2; }
}
# run_fails ROOT NAME PATTERN...: run on ROOT must fail and print every pattern (fixed strings).
run_fails() {
  local root=$1 name=$2 out; shift 2
  if out=$("$tool" run --root "$root" --build "$work/build" "$root/docs/01-one.md" 2>&1); then
    fail "$name: run passed"; echo "$out" >&2; return
  fi
  for pattern in "$@"; do
    grep -qF -- "$pattern" <<<"$out" || { fail "$name: no '$pattern' in:"; echo "$out" >&2; }
  done
}

# --- 1. The rules, on a made-up tree.
repo=$work/repo
mkdir -p "$repo/docs" "$work/build"
# chapter BLOCK...: docs/01-one.md with the given lines after its first paragraph (line 5 on).
chapter() {
  { printf '# 01 — One\n\nThe lab is `printf %s` here.\n\n' "'x 1\n'"; printf '%s\n' "$@"; } >"$repo/docs/01-one.md"
}
# A program that prints like a lab under mpprun: two ranks, interleaved, and the launcher's line.
lab="printf '[rank1]: rank 1 ready\n[rank0]: BLAS: one thread\n[rank0]: step 0 loss 0.4010\n[rank1]: rank 1 done 12 ms\n[rank0]: step 1 loss 0.3932\n[rank0]: 1694 samples/s, peak 144.0 KiB\nmpprun: all 2 ranks exited\n'"

chapter '<!-- run free=5 -->' '```' "\$ $lab" '...' '[rank0]: step 0 loss 0.5000' '[rank0]: step 1 loss 0.3000' \
  '[rank0]: 2000 samples/s, peak 288.0 KiB' '[rank1]: rank 1 ready' '[rank1]: rank 1 done ...' '...' '```'
run_passes "$repo" "streams per rank, free numbers, elisions"
# An integer must be the same; decimals are free unless the line is exact.
chapter '<!-- run -->' '```' "\$ $lab" '...' '[rank1]: rank 1 done 13 ms' '```'
run_fails "$repo" "changed integer" "docs/01-one.md:7: \$ printf" \
  "line 9 of docs/01-one.md expects: [rank1]: rank 1 done 13 ms" "but output line 4: [rank1]: rank 1 done 12 ms"
chapter '<!-- run exact=3 -->' '```' "\$ $lab" '...' '[rank0]: step 0 loss 0.4011' '...' '```'
run_fails "$repo" "exact decimal" "line 9 of docs/01-one.md expects: [rank0]: step 0 loss 0.4011"
chapter '<!-- run exact=3 -->' '```' "\$ $lab" '...' '[rank0]: step 0 loss 0.4010' '...' '```'
run_passes "$repo" "exact decimal, same"
# A changed word; a line the output does not have after a `...`; output the block leaves out.
chapter '<!-- run -->' '```' "\$ $lab" '...' '[rank0]: step 1 gain 0.3932' '...' '```'
run_fails "$repo" "changed word" "line 9 of docs/01-one.md expects: [rank0]: step 1 gain 0.3932" \
  "but no line of the output of [rank0]"
chapter '<!-- run -->' '```' "\$ $lab" '[rank1]: rank 1 ready' '```'
run_fails "$repo" "output left out without ..." "is the block's last line of [rank1], but the output goes on: output line 4: [rank1]: rank 1 done 12 ms"
chapter '<!-- run -->' '```' "\$ $lab" '[rank0]: step 0 loss 0.4010' '...' '```'
run_fails "$repo" "first line not first" "line 8 of docs/01-one.md expects: [rank0]: step 0 loss 0.4010" \
  "but output line 2: [rank0]: BLAS: one thread"
# rank=R: the block shows rank R's lines without their prefix; any=LINES: any one line.
chapter '<!-- run rank=0 any=5 -->' '```' "\$ $lab" 'BLAS: one thread' '...' 'step 1 loss 0.3932' 'a timeline row' '...' '```'
run_passes "$repo" "rank=0 and any"
# host=WORD: the word is the name of the machine the block was printed on, any machine's name here.
chapter '<!-- run host=elsewhere -->' '```' "\$ printf 'rank 0 on %s, pid 7\\n' \"\$(hostname)\"" 'rank 0 on elsewhere, pid 7' '```'
run_passes "$repo" "host=elsewhere"
chapter '<!-- run host=elsewhere -->' '```' "\$ printf 'rank 0 on %s, pid 7\\n' \"\$(hostname)x\"" 'rank 0 on elsewhere, pid 7' '```'
run_fails "$repo" "host=elsewhere, another name" "line 8 of docs/01-one.md expects: rank 0 on $(hostname), pid 7"
# The exit status, and the time limit.
chapter '<!-- run -->' '```' '$ echo x; exit 3' 'x' '```'
run_fails "$repo" "exit status" "docs/01-one.md:7: \$ echo x; exit 3" "exited with status 3, not 0"
chapter '<!-- run status=3 -->' '```' '$ echo x; exit 3' 'x' '```'
run_passes "$repo" "status=3"
chapter '<!-- run timeout=1 -->' '```' '$ sleep 5' '```'
run_fails "$repo" "time limit" "did not finish within 1 s"
# A block of output alone runs the marker's command, which the file must write.
chapter "<!-- run: printf 'x 1\\n' -->" '```' 'x 7' '```'
run_fails "$repo" "marker command" "line 7 of docs/01-one.md expects: x 7" "but output line 1: x 1"
chapter "<!-- run: printf 'x 2\\n' -->" '```' 'x 2' '```'
run_fails "$repo" "command not written" "docs/01-one.md:5: the marker runs \`printf 'x 2\\n'\`, which the file does not write"
# A quote line may stand between the marker and the fence: the quoted text (the output of the run
# that drew a figure) is the expected output, and free=/exact= count from the line after the fence.
mkdir -p "$repo/docs/figures"
printf '%s\n' 'step 0 loss 0.4010' '2000 samples/s' >"$repo/docs/figures/one.txt"
lab2="printf 'step 0 loss 0.4010\\n1694 samples/s\\n'"
chapter "Then \`$lab2\`." '' "<!-- run exact=1 free=2: $lab2 -->" '<!-- quote docs/figures/one.txt -->' '```text' \
  'step 0 loss 0.4010' '2000 samples/s' '```'
run_passes "$repo" "marker, quote line, quoted block"
out=$("$tool" run --root "$repo" --build "$work/build" "$repo/docs/01-one.md" 2>&1)
grep -qF "1 command(s) run" <<<"$out" || { fail "marker + quote: the quoted block's command did not run"; echo "$out" >&2; }
chapter "Then \`$lab2\`." '' "<!-- run exact=1 free=2: $lab2 -->" '<!-- quote docs/figures/one.txt -->' '```text' \
  'step 0 loss 0.4011' '2000 samples/s' '```'
run_fails "$repo" "marker + quote, changed expected line" "docs/01-one.md:7: \$ $lab2" \
  "line 10 of docs/01-one.md expects: step 0 loss 0.4011" "but output line 1: step 0 loss 0.4010"
chapter "Then \`$lab2\`." '' "<!-- run exact=1: $lab2 -->" '<!-- quote docs/figures/one.txt -->' '```text' \
  'step 0 loss 0.4010' '2000 samples/s' '```'
run_fails "$repo" "marker + quote, integer not free" "line 11 of docs/01-one.md expects: 2000 samples/s" \
  "but output line 2: 1694 samples/s"
# part: the block is a part of the output (a quoted text holds no `...`); rankR=LINES: lines of
# rank R shown without their prefix, as a figure run's text of several ranks is kept.
printf '%s\n' 'step 0 loss 0.4010' 'step 1 loss 0.3932' >"$repo/docs/figures/two.txt"
chapter "Then \`$lab\`." '' "<!-- run rank=0 part: $lab -->" '<!-- quote docs/figures/two.txt -->' '```text' \
  'step 0 loss 0.4010' 'step 1 loss 0.3932' '```'
run_passes "$repo" "part"
chapter "Then \`$lab\`." '' "<!-- run rank=0: $lab -->" '<!-- quote docs/figures/two.txt -->' '```text' \
  'step 0 loss 0.4010' 'step 1 loss 0.3932' '```'
run_fails "$repo" "a part without part" "line 10 of docs/01-one.md expects: step 0 loss 0.4010" "but output line 2: BLAS: one thread"
chapter "Then \`$lab\`." '' "<!-- run part rank1=1-2 rank0=3: $lab -->" '```text' \
  'rank 1 ready' 'rank 1 done 12 ms' 'step 1 loss 0.3932' '```'
run_passes "$repo" "rankR=LINES"
chapter "Then \`$lab\`." '' "<!-- run part rank0=1-2 rank1=3: $lab -->" '```text' \
  'rank 1 ready' 'rank 1 done 12 ms' 'step 1 loss 0.3932' '```'
run_fails "$repo" "rankR=LINES, another rank" "line 9 of docs/01-one.md expects: [rank0]: rank 1 ready" \
  "but no 2 lines in a row of the output of [rank0]"
# A command written twice in one file runs once; two commands in one block; a continued line.
chapter '<!-- run -->' '```' '$ echo x >>count; \' '    wc -l <count' '1' '$ seq 1 3' '1' '...' '```' \
  '<!-- run -->' '```' '$ echo x >>count; wc -l <count' '1' '```'
run_passes "$repo" "one run per command"
chapter '<!-- run -->' '```' '$ seq 1 3 \' '  | tac' '3' '...' '' '$ seq 2 2' '2' '```'
run_passes "$repo" "continued line, two commands, blank separator"
# A sh block runs line by line; a later block shows the output of one of its commands.
chapter '<!-- run -->' '```sh' "echo 1 >n" "printf 'x 1\\n'; cat n" '```' "<!-- run: printf 'x 1\\n'; cat n -->" '```' 'x 1' '2' '```'
run_fails "$repo" "sh block" "line 13 of docs/01-one.md expects: 2" "but output line 2: 1"
# A long run is skipped unless --long; a unit glued to a number (1.40x) leaves it a number.
chapter '<!-- run long -->' '```' '$ echo speedup 1.40x' 'speedup 0.76x' '$ echo 7' '8' '```'
run_passes "$repo" "long run skipped"
out=$("$tool" run --long --root "$repo" --build "$work/build" "$repo/docs/01-one.md" 2>&1)
grep -qF "line 10 of docs/01-one.md expects: 8" <<<"$out" || { fail "long run with --long"; echo "$out" >&2; }
grep -qF "expects: speedup" <<<"$out" && { fail "1.40x against 0.76x"; echo "$out" >&2; }
# Markers that cannot be used.
chapter '<!-- run frob=1 -->' '```' '$ true' '```'
run_fails "$repo" "unknown option" "docs/01-one.md:5: unknown option \"frob=1\""
chapter '<!-- run -->' '' '```' '$ true' '```'
run_fails "$repo" "marker without block" "docs/01-one.md:5: a run marker must stand right before a fenced block"
chapter '<!-- run -->' '```' 'x' '```'
run_fails "$repo" "no command" "docs/01-one.md:7: output before the first \$ line of a run block"

# --- 2. Mutation on the real chapters: an expected line changed in a copy fails the run.
copy=$work/mpp
mkdir -p "$copy"
(cd "$source_root" && tar cf - --exclude=./build --exclude=./.git .) | (cd "$copy" && tar xf -)
# The chapter with the quickest runs: 04's table is arithmetic; otherwise the first marked one.
file=docs/04-memory-wall.md
grep -q '^ *<!-- run[ :-]' "$copy/$file" 2>/dev/null ||
  file=$(cd "$copy" && grep -l '^ *<!-- run[ :-]' docs/[0-9][0-9]-*.md | head -n1)
if [[ -z $file ]]; then
  fail "no chapter marks a block with <!-- run -->"
else
  if ! out=$("$tool" run --root "$copy" --build "$build" "$copy/$file" 2>&1); then
    fail "the repository's own $file fails the run"; echo "$out" >&2
  fi
  # The first expected line with a word in it: the line after the marker's fence, or after its
  # first `$ ` command, that is neither `...` nor blank.
  line=$(awk '/^ *<!-- run[ :-]/ { on = 1; next }
              on == 1 && /^ *(```|~~~)/ { on = 2; next }
              on == 2 && /^ *(```|~~~)/ { on = 0; next }
              on == 2 && !/^ *\$ / && /[A-Za-z]/ && !/^ *\.\.\. *$/ { print NR; exit }' "$copy/$file")
  text=$(sed -n "${line}p" "$copy/$file")
  # Change its first word of three letters or more: "model:" -> "modelx:".
  mutated=$(sed -E 's/([A-Za-z]{3,})/\1x/' <<<"$text")
  awk -v n="$line" -v to="$mutated" 'NR == n { $0 = to } { print }' "$copy/$file" >"$work/mutated" &&
    cat "$work/mutated" >"$copy/$file"
  echo "mutation: $file:$line: $text -> $mutated"
  if out=$("$tool" run --root "$copy" --build "$build" "$copy/$file" 2>&1); then
    fail "run passed with $file:$line changed to '$mutated'"
  else
    echo "$out" | grep -F -A2 "expects:"
    grep -qF -- "line $line of $file expects: $mutated" <<<"$out" ||
      fail "the failure does not name $file:$line and the changed line"
    grep -qF -- "but output line" <<<"$out" || fail "the failure does not show the line printed instead"
  fi
fi

if ((failures)); then echo "$failures failure(s)" >&2; exit 1; fi
echo "run: the rules hold, and a changed expected line in a chapter fails mpp-docs run"
