#!/usr/bin/env python3
"""The search matrix's figures as a flat values file for docs/benchmarks.md's tied numbers.

    search_values.py OUT.json RUN_P2.json RUN_P4.json

Each RUN is pipeline_bench's Google Benchmark JSON (--benchmark_filter=searched_vs
--benchmark_out=RUN --benchmark_format=json) on 2 or 4 ranks. Keys: "<model>_p<P>.<counter>",
e.g. "course_h128_b32_p2.1F1B_ms", "<model>_p<P>.<searched>_is_builtin" (1 where the searched
table is a built-in's, which is then not timed twice) and "<model>_p<P>.best" (the best
built-in's name is not a number: it is written under "labels" instead), and
"<model>_p<P>.load_avg_start", the 1-minute load average Google Benchmark read as the run began.
"""
import json
import re
import sys


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    values, labels = {}, {}
    for path in sys.argv[2:]:
        with open(path) as f:
            run = json.load(f)
        for bench in run["benchmarks"]:
            m = re.match(r"searched_vs_builtins/([^/]+)/P=(\d+)/", bench["name"])
            if not m:
                continue
            key = f"{m.group(1)}_p{m.group(2)}"
            for name, value in bench.items():
                if isinstance(value, float) and (name.endswith(("_ms", "_pct", "_lo", "_hi", "_MiB", "_is_builtin", "_chunks"))):
                    values[f"{key}.{name}"] = round(value, 3)
            labels[key] = bench.get("label", "")
            values[f"{key}.load_avg_start"] = round(run["context"]["load_avg"][0], 2)
    with open(sys.argv[1], "w") as f:
        json.dump(values, f, indent=1, sort_keys=True)
        f.write("\n")
    for key, label in sorted(labels.items()):
        print(f"{key}: {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
