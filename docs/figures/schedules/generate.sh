#!/bin/sh
# Regenerates the timeline pictures of docs/schedules.md with the library's own renderer.
#   docs/figures/schedules/generate.sh [path/to/mpp-schedule]
# or: cmake --build build --target mpp_schedule_figures
set -eu
tool=${1:-build/tools/mpp-schedule/mpp-schedule}
out=$(dirname "$0")
"$tool" naive       -p 4 -q --svg "$out/naive.svg"
"$tool" gpipe       -p 4 -m 8 -q --svg "$out/gpipe.svg"
"$tool" 1f1b        -p 4 -m 8 -q --svg "$out/1f1b.svg"
"$tool" interleaved -p 4 -m 8 -v 2 -q --svg "$out/interleaved.svg"
"$tool" zb-h1       -p 4 -m 8 -q --svg "$out/zb-h1.svg"
"$tool" 1f1b        -p 4 -m 8 --comm blocking --comm-cost 1 -q --svg "$out/1f1b-blocking-comm.svg" \
  --title "OneFOneB<8> on 4 ranks, Blocking, T_comm = 1 (rendezvous transfers in grey)"
