#!/usr/bin/env bash
# Tests the API reference's check (cmake/RunDoxygen.cmake with docs/Doxyfile) on header trees in a
# temporary directory: a made-up tree passes with every public declaration commented (undocumented
# `detail` and private members allowed); without one `///` comment it fails naming the declaration.
# The same holds for a copy of the real include/mpp with one comment removed.
#   tests/docs/api_check_test.sh path/to/cmake path/to/doxygen path/to/source-root
set -uo pipefail
cmake=$1 doxygen=$2 root=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# run_check TREE: the check's output (both streams); its status is the check's.
run_check() {
  "$cmake" -DDOXYGEN="$doxygen" -DROOT="$1" -DOUTPUT="$1/out" -P "$root/cmake/RunDoxygen.cmake" 2>&1
}

# new_tree TREE: a tree with mpp's Doxyfile and main page and an empty include/mpp.
new_tree() {
  rm -rf "$1"
  mkdir -p "$1/docs" "$1/include/mpp"
  cp "$root/docs/Doxyfile" "$root/docs/api.md" "$1/docs/"
}

# uncomment FILE LINE_PATTERN: deletes the `///` lines right above the first line matching the
# (extended) pattern, and fails when there were none.
uncomment() {
  local file=$1 pattern=$2
  awk -v pattern="$pattern" '
    !done && $0 ~ pattern { if (held != "") removed = 1; held = ""; done = 1; print; next }
    /^[ \t]*\/\/\// && !done { held = held $0 "\n"; next }
    { printf "%s", held; held = ""; print }
    END { printf "%s", held; exit !removed }' "$file" >"$file.new" && mv "$file.new" "$file" ||
    fail "no /// comment above /$pattern/ in $file"
}

# 1. A made-up tree: public things commented, internals not.
tree=$work/made_up
new_tree "$tree"
cat >"$tree/include/mpp/widget.hpp" <<'HPP'
#pragma once
/// Widgets.
namespace mpp {

namespace detail {
inline int helper(int x) { return x + 1; }
}  // namespace detail

namespace tools::detail {
struct Hidden {
  int value = 0;
};
}  // namespace tools::detail

/// A widget of a given size.
class Widget {
 public:
  /// A widget of `size` units (>= 0).
  explicit Widget(int size) : size_(size) {}
  /// Its size, in units.
  int size() const { return size_; }

 private:
  int twice() const { return 2 * size_; }
  int size_;
};

/// `x` scaled by `factor`.
inline int scale(int x, int factor) { return detail::helper(x) * factor; }

/// A type with a size.
template <class T>
concept sized = requires(const T& t) { t.size(); };

}  // namespace mpp
HPP
out=$(run_check "$tree") || { fail "made-up tree: the check failed on a commented tree:"; echo "$out" >&2; }
[[ -f $tree/out/html/index.html ]] || fail "made-up tree: no reference in $tree/out/html"

# 2. Without the comment of a free function, a member function, a class, a namespace, a concept:
#    each named with its file and line.
expect_named() {  # NAME PATTERN...: the check fails and prints every pattern (extended regex)
  local name=$1; shift
  local out
  if out=$(run_check "$tree"); then
    fail "$name: the check passed without the comment"; echo "$out" >&2; return
  fi
  for pattern in "$@"; do
    grep -qE -- "$pattern" <<<"$out" || { fail "$name: no /$pattern/ in the output:"; echo "$out" >&2; }
  done
}
widget=$tree/include/mpp/widget.hpp
cp "$widget" "$work/widget.hpp"
uncomment "$widget" '^inline int scale'
expect_named "free function" \
  "^include/mpp/widget.hpp:$(grep -n '^inline int scale' "$widget" | cut -d: -f1): error: Member scale\\(int x, int factor\\) \\(function\\) of namespace mpp is not documented\\.$" \
  "docs.api: 1 problem\\(s\\) above"
cp "$work/widget.hpp" "$widget"
uncomment "$widget" 'int size\(\) const'
expect_named "member function" \
  "^include/mpp/widget.hpp:[0-9]+: error: Member size\\(\\) const \\(function\\) of class mpp::Widget is not documented\\.$"
cp "$work/widget.hpp" "$widget"
uncomment "$widget" '^class Widget'
expect_named "class" "^include/mpp/widget.hpp:[0-9]+: error: Compound mpp::Widget is not documented\\.$"
cp "$work/widget.hpp" "$widget"
uncomment "$widget" '^namespace mpp \{'
expect_named "namespace" "namespace mpp is not documented, so doxygen does not check its members"
cp "$work/widget.hpp" "$widget"
uncomment "$widget" '^template <class T>'
expect_named "concept" "^include/mpp/widget.hpp:[0-9]+: error: concept mpp::sized is not documented\\.$"

# 3. A copy of the real headers, with the comment of mpp::trace::chrome_trace removed.
tree=$work/real
new_tree "$tree"
cp -r "$root/include/mpp/." "$tree/include/mpp/"
target="Member chrome_trace(std::span< const RankTrace > traces) (function) of namespace mpp::trace is not documented."
out=$(run_check "$tree")
grep -qF -- "$target" <<<"$out" && fail "real tree: chrome_trace reported before its comment was removed"
uncomment "$tree/include/mpp/trace/timeline.hpp" '^MPP_DECL std::string chrome_trace\('
if out=$(run_check "$tree"); then
  fail "real tree: the check passed without chrome_trace's comment"
fi
grep -F -- "$target" <<<"$out" | grep -q "^include/mpp/trace/timeline.hpp:[0-9]*: error: " ||
  { fail "real tree: chrome_trace is not named:"; echo "$out" >&2; }

if ((failures)); then
  echo "api_check_test: $failures failure(s)" >&2
  exit 1
fi
echo "api_check_test: all cases passed"
