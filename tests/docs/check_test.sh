#!/usr/bin/env bash
# Tests tools/docs/mpp-docs on a made-up repository in a temporary directory: a sound one passes;
# each kind of breakage fails naming the chapter and the missing thing; `update` refreshes quotes;
# `commands` refuses a command naming a program or input that does not exist.
#   tests/docs/check_test.sh path/to/mpp-docs
set -uo pipefail
tool=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# expect_fail NAME PATTERN...: the check must fail and print every pattern (fixed strings).
expect_fail() {
  local name=$1; shift
  local out
  if out=$("$tool" check --root "$work/repo" 2>&1); then
    fail "$name: check passed on a broken tree"; echo "$out" >&2; return
  fi
  for pattern in "$@"; do
    grep -qF -- "$pattern" <<<"$out" || { fail "$name: no '$pattern' in the output:"; echo "$out" >&2; }
  done
}

expect_pass() {
  local out
  out=$("$tool" check --root "$work/repo" 2>&1) || { fail "$1: check failed on a sound tree:"; echo "$out" >&2; }
}

# A small sound repository.
make_repo() {
  rm -rf "$work/repo"
  mkdir -p "$work/repo/docs/figures" "$work/repo/examples/01_lab"
  cat >"$work/repo/examples/01_lab/lab.cpp" <<'EOF'
#include <cstdio>
int main() {
  // [quote:loop]
  for (int i = 0; i < 3; ++i) {
    std::puts("step");
  }
  // [/quote:loop]
  return 0;
}
EOF
  echo '<svg xmlns="http://www.w3.org/2000/svg"/>' >"$work/repo/docs/figures/loss.svg"
  cat >"$work/repo/docs/README.md" <<'EOF'
# Course

<!-- chapters -->
| # | chapter | lab |
|---|---|---|
| 1 | [The lab](01-lab.md) | `examples/01_lab` |
<!-- /chapters -->

A quote shown as an example is not a quote:

```
<!-- quote examples/none.cpp -->
```
EOF
  cat >"$work/repo/docs/01-lab.md" <<'EOF'
# 01 — The lab

The lab is `examples/01_lab/lab.cpp` (see `examples/01_lab/lab.cpp:3`); its loop:

<!-- quote examples/01_lab/lab.cpp#loop -->
```cpp
for (int i = 0; i < 3; ++i) {
  std::puts("step");
}
```

Lines 2 and 3:

<!-- quote examples/01_lab/lab.cpp:2-3 -->
```cpp
int main() {
  // [quote:loop]
```

![the loss](figures/loss.svg) and [the index](README.md#course), [web](https://pytorch.org).
In code, `a[i](x)` is not a link, and `build/examples/01_lab/lab` is a build output.

## Exercise

Change 3 to 4 and observe four lines.
EOF
}

# 1. A sound tree passes.
make_repo
expect_pass "sound tree"

# 2. A missing quoted file, named with the chapter.
make_repo
sed -i 's|lab.cpp#loop|gone.cpp#loop|' "$work/repo/docs/01-lab.md"
expect_fail "missing quoted file" "docs/01-lab.md:5: quoted file examples/01_lab/gone.cpp does not exist"

# 3. A region that is not marked in the file.
make_repo
sed -i 's|#loop|#train|' "$work/repo/docs/01-lab.md"
expect_fail "missing region" "docs/01-lab.md:5: quoted region \"train\" is not marked in examples/01_lab/lab.cpp"

# 4. A snippet that no longer matches its file; `update` repairs it and the check passes again.
make_repo
sed -i 's|i < 3|i < 4|' "$work/repo/examples/01_lab/lab.cpp"
expect_fail "stale snippet" "docs/01-lab.md" "quoted snippet is out of date"
"$tool" update --root "$work/repo" >/dev/null || fail "update failed"
grep -qF 'for (int i = 0; i < 4; ++i) {' "$work/repo/docs/01-lab.md" || fail "update did not refresh the snippet"
expect_pass "after update"

# 5. A new marker without a block gets one from `update`.
make_repo
printf '\n<!-- quote examples/01_lab/lab.cpp:1-1 -->\n' >>"$work/repo/docs/README.md"
expect_fail "marker without block" "docs/README.md" "quoted snippet is out of date"
"$tool" update --root "$work/repo" >/dev/null
grep -qF '#include <cstdio>' "$work/repo/docs/README.md" || fail "update did not insert the snippet"
expect_pass "inserted block"

# 6. A line range past the end of the file.
make_repo
sed -i 's|lab.cpp:2-3|lab.cpp:2-30|' "$work/repo/docs/01-lab.md"
expect_fail "bad range" "docs/01-lab.md:14: quoted lines 2-30 are not in examples/01_lab/lab.cpp (9 lines)"

# 7. A missing picture, a broken link, a missing inline path.
make_repo
rm "$work/repo/docs/figures/loss.svg"
sed -i 's|(README.md#course)|(02-next.md)|; s|`examples/01_lab/lab.cpp`|`examples/01_lab/old.cpp`|' \
  "$work/repo/docs/01-lab.md"
expect_fail "missing picture and link" \
  "docs/01-lab.md:20: image figures/loss.svg does not exist" \
  "docs/01-lab.md:20: link 02-next.md does not exist" \
  "docs/01-lab.md:3: quoted path examples/01_lab/old.cpp does not exist"

# 8. An <img> tag to a missing file.
make_repo
echo '<img src="figures/none.svg" alt="x">' >>"$work/repo/docs/README.md"
expect_fail "img tag" "docs/README.md:14: image figures/none.svg does not exist"

# 9. A chapter that does not end with an exercise, one whose exercise is empty.
make_repo
printf '\n## Summary\n\nDone.\n' >>"$work/repo/docs/01-lab.md"
expect_fail "no exercise" "docs/01-lab.md:27: chapter does not end with an exercise: its last section is \"## Summary\""
make_repo
sed -i '/^Change 3/d' "$work/repo/docs/01-lab.md"
expect_fail "empty exercise" "docs/01-lab.md:23: the exercise section is empty"

# 10. Numbered exercise headings are accepted; "Exercises-like" words are not.
make_repo
sed -i 's|^## Exercise$|## 4. Exercises|' "$work/repo/docs/01-lab.md"
expect_pass "numbered exercises"
sed -i 's|^## 4. Exercises$|## Exercisesque|' "$work/repo/docs/01-lab.md"
expect_fail "not an exercise heading" "its last section is \"## Exercisesque\""

# 11. A chapter missing from the table of contents, and a listed chapter that does not exist.
make_repo
cp "$work/repo/docs/01-lab.md" "$work/repo/docs/02-more.md"
sed -i 's|\[The lab\](01-lab.md)|[The lab](01-lab.md) [Gone](03-gone.md)|' "$work/repo/docs/README.md"
expect_fail "table of contents" \
  "docs/02-more.md: chapter is not in the table of contents" \
  "docs/README.md: the table of contents lists docs/03-gone.md, which does not exist"

# 12. A chapter that quotes no file of the lab its row names (a quote shown inside a fence does
#     not count).
make_repo
mkdir -p "$work/repo/examples/02_other"
sed -i 's|`examples/01_lab` |`examples/02_other` |' "$work/repo/docs/README.md"
printf '\n```\n<!-- quote examples/02_other/x.cpp -->\n```\n' >>"$work/repo/docs/01-lab.md"
expect_fail "lab not quoted" \
  "docs/01-lab.md: the chapter quotes no file of its lab (examples/02_other)"

# 13. `commands`: the programs and inputs the docs' commands name exist, build outputs in the build
#     tree; outputs (option values, redirections) are not checked; a missing program or input is
#     refused with file:line, and so is a bare name the repository builds, until PATH is set.
commands_repo() {
  make_repo
  rm -rf "$work/build"
  mkdir -p "$work/build/examples/01_lab" "$work/repo/scripts" "$work/repo/config"
  printf '#!/bin/sh\n' >"$work/build/examples/01_lab/lab"
  printf '#!/bin/sh\n' >"$work/repo/scripts/run"
  chmod +x "$work/build/examples/01_lab/lab" "$work/repo/scripts/run"
  cat >>"$work/repo/docs/01-lab.md" <<'EOF'

```sh
scripts/run --build build/release && OMP_NUM_THREADS=1 build/release/examples/01_lab/lab \
  --svg docs/figures/new.svg --log-dir build/release/logs examples/01_lab/lab.cpp > docs/out.txt
```

```
$ build/release/examples/01_lab/lab --out=runs/x | grep step   # prints three lines
step
```
EOF
  printf '#!/bin/bash\n# sbatch config/job.sh\nset -- build/release/examples/01_lab/lab --steps 2\n' \
    >"$work/repo/config/job.sh"
}
expect_commands() {
  local want=$1 name=$2; shift 2
  local out status=0
  out=$("$tool" commands --root "$work/repo" --build "$work/build" "${commands_options[@]}" 2>&1) ||
    status=$?
  if [[ $want == pass ]]; then
    ((status == 0)) || { fail "$name: commands failed on a sound tree:"; echo "$out" >&2; }
    return
  fi
  ((status != 0)) || { fail "$name: commands passed on a broken tree"; echo "$out" >&2; return; }
  for pattern in "$@"; do
    grep -qF -- "$pattern" <<<"$out" || { fail "$name: no '$pattern' in the output:"; echo "$out" >&2; }
  done
}
commands_options=()
commands_repo
expect_commands pass "sound commands"
sed -i 's|=1 build/release/examples/01_lab/lab|=1 build/release/examples/02_gone/lab|' \
  "$work/repo/docs/01-lab.md"
sed -i 's|^\$ build/release/examples/01_lab/lab|$ scripts/gone|; s|examples/01_lab/lab.cpp >|examples/01_lab/old.cpp >|' \
  "$work/repo/docs/01-lab.md"
sed -i 's|01_lab/lab --steps|01_lab/lab2 --steps|' "$work/repo/config/job.sh"
expect_commands fail "missing program and inputs" \
  "docs/01-lab.md:28: program build/release/examples/02_gone/lab does not exist in the build tree" \
  "docs/01-lab.md:28: input examples/01_lab/old.cpp does not exist" \
  "docs/01-lab.md:33: program scripts/gone does not exist" \
  "config/job.sh:3: input build/release/examples/01_lab/lab2 does not exist in the build tree"
commands_repo
printf '\n```sh\nlab --steps 2\n```\n' >>"$work/repo/docs/01-lab.md"
expect_commands fail "bare program" "docs/01-lab.md:38: lab is not on PATH"
commands_repo
printf '\n```sh\nexport PATH="$PWD/build/release/examples/01_lab:$PATH"\nlab --steps 2\n```\n' \
  >>"$work/repo/docs/01-lab.md"
expect_commands pass "bare program after PATH"
# A part of the build tree left out on purpose (--not-built benchmarks, the asan preset's tree):
# its programs are not looked up, every other one still is.
commands_repo
printf '\n```sh\nbuild/release/benchmarks/b/bench --benchmark_filter=x\n```\n' >>"$work/repo/docs/01-lab.md"
expect_commands fail "unbuilt benchmark without --not-built" \
  "docs/01-lab.md:38: program build/release/benchmarks/b/bench does not exist in the build tree"
commands_options=(--not-built benchmarks)
expect_commands pass "unbuilt benchmark with --not-built benchmarks"
printf '\n```sh\nbuild/release/examples/02_gone/lab\n```\n' >>"$work/repo/docs/01-lab.md"
expect_commands fail "--not-built benchmarks still checks the examples" \
  "docs/01-lab.md:42: program build/release/examples/02_gone/lab does not exist in the build tree"
commands_options=()

# 14. A chapter over 2,000 words of prose fails naming it and its count; the same words in a fenced
# block (a program's output), or in an HTML comment over several lines, are not prose.
words=$(for _ in $(seq 150); do echo "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"; done)
make_repo
printf '\n%s\n' "$words" >>"$work/repo/docs/01-lab.md"
expect_fail "long chapter" "docs/01-lab.md: the chapter has 2" "words of prose, more than 2000"
make_repo
printf '\n```text\n%s\n```\n' "$words" >>"$work/repo/docs/01-lab.md"
expect_pass "words in a fenced block"
make_repo
printf '\n<!-- a note for the authors,\n%s\nend of the note -->\n' "$words" >>"$work/repo/docs/01-lab.md"
expect_pass "words in an HTML comment over several lines"

if ((failures)); then
  echo "check_test: $failures failure(s)" >&2
  exit 1
fi
echo "check_test: all cases passed"
