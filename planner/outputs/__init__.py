"""A run's outputs, the same for `planner simulate` and `planner run`.

- results.py: the --out folder (checked before the run) and summary.json, requests.csv, steps.csv
- decode_runs.py: steps.csv's rule for long runs (runs of identical decode steps merged into one row)
- out_lock.py: one planner process at a time writes an --out folder
- plots/: the three PNG figures (drawn in this process, or by child processes beside a long run)
- report.py: the terminal text (the summary table, the memory report, the comparison of two runs)
- progress.py: the progress bar of long loops
"""
