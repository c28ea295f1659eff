#!/usr/bin/env bash
# A chapter is a lesson, not a reference: tools/docs/mpp-docs check fails a numbered chapter
# (docs/NN-*.md) with more than 2,000 words of prose, fenced blocks and HTML comments not counted.
# The mutation test on a copy of the repository: the copy passes; 2,100 words of prose appended to
# one chapter fail the check naming the chapter and its count; the same words inside a fenced
# block, or inside an HTML comment spread over several lines, do not.
#   tests/docs/chapter_length_test.sh path/to/mpp-docs path/to/repository
set -uo pipefail
tool=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
source_root=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

copy=$work/mpp
mkdir -p "$copy"
(cd "$source_root" && tar cf - --exclude=./build --exclude=./.git .) | (cd "$copy" && tar xf -)
if ! out=$("$tool" check --root "$copy" 2>&1); then
  fail "the repository's own docs fail the check"; echo "$out" >&2
fi

chapter=$(cd "$copy" && ls docs/[0-9][0-9]-*.md | head -n1)
[[ -n $chapter ]] || { echo "no numbered chapter in $source_root/docs" >&2; exit 1; }
cp "$copy/$chapter" "$work/original"
# 2,100 words: 150 lines of 14.
words=$(for _ in $(seq 150); do echo "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"; done)

# restore; append TEXT: the chapter as it was, with TEXT after its last line.
append() { { cat "$work/original"; printf '\n%s\n' "$1"; } >"$copy/$chapter"; }

# 1. As prose, the chapter is over the limit: the check fails naming it and its count.
append "$words"
if out=$("$tool" check --root "$copy" 2>&1); then
  fail "check passed with 2,100 words of prose appended to $chapter"
else
  echo "$out"
  grep -qE -- "$chapter: the chapter has [0-9]+ words of prose, more than 2000" <<<"$out" ||
    fail "the failure does not name $chapter and its count of words"
fi

# 2. In a fenced block (a program's output), the same words are not prose.
append $'```text\n'"$words"$'\n```'
out=$("$tool" check --root "$copy" 2>&1) || { fail "words in a fenced block were counted as prose"; echo "$out" >&2; }

# 3. Nor in an HTML comment over several lines.
append $'<!-- a note for the authors,\n'"$words"$'\nend of the note -->'
out=$("$tool" check --root "$copy" 2>&1) || { fail "words in an HTML comment were counted as prose"; echo "$out" >&2; }

cp "$work/original" "$copy/$chapter"
if ((failures)); then echo "$failures failure(s)" >&2; exit 1; fi
echo "chapter length: a chapter over 2,000 words of prose fails docs.check, fenced blocks and comments do not count"
