# Shared by the multi-node tests (sourced). Each test is a bash script run by CTest with:
#   MPP_SOURCE_DIR  the source tree (scripts/, config/)
#   MPPRUN          the mpprun binary
#   MPP_JOB         the training job (examples/17_multinode), the same binary for every launcher
# A test exits 0 when its claim holds, 1 when it does not, and 77 (CTest SKIP_RETURN_CODE) with a
# "SKIP: <reason>" line when this machine cannot run it. Every step is bounded in time.
set -euo pipefail

SKIP=77
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# Fault tests need a short deadline; the others keep the default of the comm layer.
: "${MPP_SOURCE_DIR:?set by CTest}" "${MPPRUN:?set by CTest}" "${MPP_JOB:?set by CTest}"

work=$(mktemp -d "/tmp/mpp-${MPP_TEST_NAME:-multinode}.XXXXXX")
cleanups=()
on_exit() {
  local rc=$?
  local i
  for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do eval "${cleanups[i]}" >/dev/null 2>&1 || true; done
  if [[ $rc -ne 0 && $rc -ne $SKIP ]]; then
    echo "---- logs kept in $work" >&2
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM
at_exit() { cleanups+=("$1"); }

skip() { echo "SKIP: $*"; exit "$SKIP"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "PASS: $*"; }
step() { echo "== $*"; }

need_root() { [[ $(id -u) -eq 0 ]] || skip "$1 needs root (running as uid $(id -u))"; }
need_cmd() { command -v "$1" >/dev/null || skip "'$1' is not installed ($2)"; }

# A TCP port nobody listens on right now (tests run one at a time on a port range of their own).
free_port() {
  # Below the kernel's ephemeral range: a port in it can be taken, between this check and the
  # job's listen, as the local end of any other process's outgoing connection (Gloo, a store
  # client), and the job then fails with "Address already in use". Not in use in any state.
  local p low=32768
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
  ((low > 12000)) || low=32768
  for _ in $(seq 1 50); do
    p=$(( 10000 + RANDOM % (low - 10000) ))
    ss -Htan "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return; }
  done
  fail "no free TCP port found"
}

# bounded SECONDS CMD...: the command, killed (TERM, then KILL 5 s later) past its time.
bounded() { local s="$1"; shift; timeout --kill-after=5 "$s" "$@"; }

# The job prints "mpp-job: final loss <x>" on global rank 0.
final_loss() {
  local x
  x=$(grep -ao 'mpp-job: final loss [-0-9.eE+naninf]*' "$1" | tail -n1 | awk '{print $4}' || true)
  [[ -n "$x" ]] || { tail -n 30 "$1" >&2; fail "no 'final loss' line in $1"; }
  echo "$x"
}

# same_loss A B [REL_TOL]: equal to a relative tolerance (default 1e-5).
same_loss() {
  awk -v a="$1" -v b="$2" -v t="${3:-1e-5}" 'BEGIN {
    d = a - b; if (d < 0) d = -d; m = (a < 0 ? -a : a); if (m < 1e-12) m = 1e-12;
    exit !(d / m <= t) }'
}

# Decreasing: the last loss is below the first (the job printed "mpp-job: step <s> loss <x>").
loss_went_down() {
  local first last
  first=$(grep -ao 'mpp-job: step [0-9]* loss [-0-9.eE+]*' "$1" | head -n1 | awk '{print $5}' || true)
  last=$(final_loss "$1")
  [[ -n "$first" ]] || fail "no 'step ... loss' line in $1"
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' ||
    fail "loss did not go down ($first -> $last) in $1"
}

# The reference: the same job with mpprun on this host, all ranks on loopback.
reference_loss() {  # NPROC JOB-ARGS...
  local n="$1"; shift
  local port; port=$(free_port)
  bounded 240 "$MPPRUN" --nproc-per-node "$n" --master-port "$port" --log-dir "$work/ref-logs" \
    "$MPP_JOB" "$@" > "$work/reference.out" 2>&1 ||
    { tail -n 40 "$work/reference.out" >&2; fail "the reference run (mpprun, $n ranks, one host) failed"; }
  final_loss "$work/reference.out"
}

# The rank a launcher's summary names first: the one whose own failure ended the job.
first_failure() {
  { grep -aoE '^(mpprun|mpp launch): rank [0-9]+ (\(pid [0-9]+\) )?(exited|was killed)' "$1" || true; } |
    head -n1 | awk '{print $3}'
}

# Seconds from the injected fault ("mpp-job: fault: ... at t=<epoch>") in FILE until now.
since_fault() {
  local t
  t=$(grep -ao 'mpp-job: fault: .* at t=[0-9.]*' "$1" | head -n1 | sed 's/.*at t=//' || true)
  [[ -n "$t" ]] || fail "no fault line in $1"
  awk -v s="$t" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'
}
