#!/usr/bin/env bash
# Tied numbers (tools/docs/mpp-docs, "tied numbers" in its header): a number in a chapter followed
# by <!-- value: FILE KEY --> must equal KEY of docs/figures/FILE at the decimals it is written
# with. Part 1 checks the rules on a made-up tree; parts 2 and 3 are the mutation test on the real
# chapters: a copy of the repository passes, and the same copy with one tied number changed (in
# the prose, then in an exercise's answer) fails naming the chapter, the line, the number written
# and the source value.
#   tests/docs/values_test.sh path/to/mpp-docs path/to/repository
set -uo pipefail
tool=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
source_root=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# check_has ROOT NAME PATTERN...: check on ROOT must fail and print every pattern.
check_has() {
  local root=$1 name=$2 out; shift 2
  if out=$("$tool" check --root "$root" 2>&1); then fail "$name: check passed"; echo "$out" >&2; return; fi
  for pattern in "$@"; do
    grep -qF -- "$pattern" <<<"$out" || { fail "$name: no '$pattern' in:"; echo "$out" >&2; }
  done
}

# --- 1. The rules, on a made-up tree.
repo=$work/repo
mkdir -p "$repo/docs/figures/lab"
cat >"$repo/docs/README.md" <<'MD'
# Course

<!-- chapters -->
| # | chapter |
|---|---|
| 1 | [One](01-one.md) |
<!-- /chapters -->
MD
cat >"$repo/docs/figures/lab/run.json" <<'JSON'
{
  "remake": "tools/docs/mpp-docs figures --only lab",
  "bubble_pct[M=8]": 14.46,
  "samples_per_s": 1694.4,
  "best_us[1 MiB]": 212.3
}
JSON
chapter() {
  cat >"$repo/docs/01-one.md" <<MD
# 01 — One

The bubble is $1 %<!-- value: lab/run.json bubble_pct[M=8] --> at $2 samples/s<!-- value: lab/run.json samples_per_s -->,
a 1 MiB message $3 µs<!-- value: lab/run.json best_us[1 MiB] --> one way.

\`\`\`
Inside a fence nothing is tied: 99 %<!-- value: lab/run.json bubble_pct[M=8] -->
\`\`\`

## Exercise

Run it.
MD
}
chapter 14.5 "1 694" 212
out=$("$tool" check --root "$repo" 2>&1) || { fail "sound tree fails"; echo "$out" >&2; }
chapter 14 "1 694" 212.3   # as many decimals as written: 14 and 212.3 are right too
out=$("$tool" check --root "$repo" 2>&1) || { fail "rounding to the written decimals"; echo "$out" >&2; }
chapter 14.6 "1 694" 212
check_has "$repo" "changed number" \
  "docs/01-one.md:3: the text says 14.6 % but docs/figures/lab/run.json bubble_pct[M=8] is 14.46, which is 14.5 % at 1 decimal(s) (remade by tools/docs/mpp-docs figures --only lab)"
chapter 14.5 "1 700" 212
check_has "$repo" "grouped digits" "docs/01-one.md:3: the text says 1 700 samples/s but" "which is 1 694 samples/s"
chapter 14.5 1694 212   # four digits or more are written grouped
check_has "$repo" "ungrouped digits" "docs/01-one.md:3: the text says 1694 samples/s but" "which is 1 694 samples/s"
# update rewrites the numbers (keeping the decimals, grouping digits) and then the check passes.
chapter 10.0 2000 1
"$tool" update --root "$repo" "$repo/docs/01-one.md" >/dev/null || fail "update failed"
grep -qF 'The bubble is 14.5 %<!-- value: lab/run.json bubble_pct[M=8] --> at 1 694 samples/s<!--' "$repo/docs/01-one.md" ||
  { fail "update did not rewrite the numbers"; cat "$repo/docs/01-one.md" >&2; }
grep -qF 'a 1 MiB message 212 µs<!--' "$repo/docs/01-one.md" || fail "update changed the decimals"
grep -qF '99 %<!--' "$repo/docs/01-one.md" || fail "update touched a fenced block"
out=$("$tool" check --root "$repo" 2>&1) || { fail "check after update"; echo "$out" >&2; }
# Ties that cannot be resolved.
sed -i 's|lab/run.json samples_per_s|lab/gone.json samples_per_s|; s|best_us\[1 MiB\]|best_us[2 MiB]|' "$repo/docs/01-one.md"
echo 'No number: <!-- value: lab/run.json samples_per_s -->' >>"$repo/docs/01-one.md"
check_has "$repo" "unresolved ties" \
  "docs/01-one.md:3: 1 694 samples/s is tied to docs/figures/lab/gone.json, which does not exist" \
  "docs/01-one.md:4: 212 µs is tied to \"best_us[2 MiB]\", which docs/figures/lab/run.json does not hold" \
  "docs/01-one.md:13: no number right before <!-- value: lab/run.json samples_per_s -->"

# --- 2. Mutation on the real chapters.
copy=$work/mpp
mkdir -p "$copy"
(cd "$source_root" && tar cf - --exclude=./build --exclude=./.git .) | (cd "$copy" && tar xf -)
if ! out=$("$tool" check --root "$copy" 2>&1); then
  fail "the repository's own docs fail the check"; echo "$out" >&2
fi
# mutate FILE LINE: changes the number of the first tie on that line by one in its last digit, and
# the check on the copy must fail naming the file, the line and the changed number. Restores it.
mutate() {
  local file=$1 line=$2 text number last mutated out
  text=$(sed -n "${line}p" "$copy/$file" | grep -o -m1 '[0-9][0-9.]*[^0-9<]*<!-- value: [^>]*-->' | head -n1)
  number=$(sed 's/[^0-9.].*//' <<<"$text")
  last=${number: -1}; mutated=${number%?}$(((last + 1) % 10))
  cp "$copy/$file" "$work/original"
  # Change the number in that line only (its last occurrence before the first comment).
  awk -v n="$line" -v from_unit="$number" -v to_unit="$mutated" '
    NR == n { at = index($0, "<!-- value:"); head = substr($0, 1, at - 1); tail = substr($0, at)
              k = 0; for (i = length(head) - length(from_unit) + 1; i > 0; --i)
                if (substr(head, i, length(from_unit)) == from_unit) { k = i; break }
              if (k) head = substr(head, 1, k - 1) to_unit substr(head, k + length(from_unit))
              $0 = head tail }
    { print }' "$work/original" >"$copy/$file"
  echo "mutation: $file:$line: $number -> $mutated"
  if out=$("$tool" check --root "$copy" 2>&1); then
    fail "check passed with $file:$line changed from $number to $mutated"
  else
    echo "$out"
    grep -qF -- "$file:$line: the text says $mutated" <<<"$out" ||
      fail "the failure does not name $file:$line and the number $mutated"
  fi
  cp "$work/original" "$copy/$file"
}

tie=$(cd "$copy" && grep -n -m1 -o '[0-9][0-9.]*[^0-9<]*<!-- value: [^>]*-->' docs/[0-9][0-9]-*.md | head -n1)
if [[ -z $tie ]]; then
  fail "no chapter ties a number (<!-- value: ... -->)"
else
  file=${tie%%:*}; rest=${tie#*:}
  mutate "$file" "${rest%%:*}"
fi

# --- 3. The same for an exercise's answer: the first tie in a chapter's last section, the
# exercises (a chapter's last `## ` heading starts with "Exercise").
answer=$(cd "$copy" && for f in docs/[0-9][0-9]-*.md; do
  awk -v f="$f" '/^## / { exercises = ($0 ~ /^## ([0-9]+\. )?Exercise/) }
                 exercises && /[0-9]<!-- value: / { print f ":" NR; exit }' "$f"
done | head -n1)
if [[ -z $answer ]]; then
  fail "no chapter's exercises tie a number (<!-- value: ... -->)"
else
  mutate "${answer%%:*}" "${answer#*:}"
fi

if ((failures)); then echo "$failures failure(s)" >&2; exit 1; fi
echo "tied numbers: the rules hold, and a changed number in a chapter or an exercise's answer fails docs.check"
