"""What the buyer reads: the terminal summary, `report.md`, a self-contained `report.html` and the figures.

- tables.py: the question, the one-sentence answer, the candidate rows and the assumptions (shared)
- figures.py: latency vs load, cost vs capacity (Pareto), memory per GPU (PNG bytes)
- files.py: report.md, report.html (figures embedded as base64 PNG), sizing.json
- data.py: the result as JSON data (`--json`, sizing.json)
"""
