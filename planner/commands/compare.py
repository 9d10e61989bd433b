"""`planner compare`: two runs' summaries side by side."""

from __future__ import annotations

import json


def cmd_compare(args) -> int:
    from planner.outputs.report import compare_lines, compare_rows, scenario_differences
    from planner.outputs.results import read_summary

    a, b = read_summary(args.a), read_summary(args.b)
    if args.json:
        rows = compare_rows(a, b)  # JSON has no Infinity or NaN: allow_nan=False keeps it so
        differences = scenario_differences(a, b)
        out = {"a": str(args.a), "b": str(args.b), "rows": rows, "scenario_differences": differences}
        print(json.dumps(out, indent=2, allow_nan=False))
    else:
        print("\n".join(compare_lines(a, b, args.a.name or str(args.a), args.b.name or str(args.b))))
    return 0
