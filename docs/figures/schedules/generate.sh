#!/bin/sh
# Regenerates the timeline pictures of docs/schedules.md with the library's own renderer: one
# picture per built-in schedule (the list `mpp-schedule --list` prints, i.e. mpp::builtin_schedules)
# on 4 ranks, and one of 1F1B under Blocking with a transfer cost.
#   docs/figures/schedules/generate.sh [path/to/mpp-schedule]
# or: cmake --build --preset release --target mpp_schedule_figures
set -eu
tool=${1:-build/release/tools/mpp-schedule/mpp-schedule}
out=$(dirname "$0")
"$tool" --list | while read -r schedule knobs; do
  # shellcheck disable=SC2086 # the knobs are separate arguments
  "$tool" "$schedule" -p 4 $knobs -q --svg "$out/$schedule.svg"
done
"$tool" 1f1b        -p 4 -m 8 --comm blocking --comm-cost 1 -q --svg "$out/1f1b-blocking-comm.svg" \
  --title "OneFOneB<8> on 4 ranks, Blocking, T_comm = 1 (rendezvous transfers in grey)"
