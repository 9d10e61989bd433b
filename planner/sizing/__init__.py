"""`planner size`: the cheapest hardware and engine settings that meet a scenario's SLOs.

- question.py: the sizing question as data (Demand, SearchSpec, Money, Probe, SizingQuestion)
- spec.py: the sizing file, a scenario + `search:` (demand, candidates, money, probe), validated
  (spec_fields.py: a section's fields; spec_checks.py: the checks across sections; spec_disaggregated.py and
  spec_length_routed.py: the units' sections; spec_money.py: money and the prices each GPU needs)
- candidates.py: every combination to try (GPU, tensor and data parallel layout, dtype, engine settings), and why
  those that cannot run were pruned
- coefficients.py: the one function that gives a candidate its cost-model coefficients and their provenance
- bound.py: analytic figures from the cost model: a throughput bound, the batch within TPOT, floors
- probe.py: one simulation at one load: do the SLOs hold, is it a steady state
- capacity.py: the highest load per replica at which the SLOs hold (a search over probes)
- money.py: replicas for the demand, rental and purchase costs
- search.py: runs the candidates in waves, pruning those that cannot win
- executor.py: where they run: this process, worker processes or a Ray cluster
- rank.py: the Pareto front, the recommendation, the runner-ups and why they lost
- intervals.py: `--intervals N`: 90% intervals over workload seeds x coefficient draws for the picked candidates
  (unit_intervals.py: the same for the best unit)
- topology.py: units of two pools (prefill/decode, or by prompt length), sized and priced against the replicas
- serve.py: the `vllm serve` command line of a candidate (dp_serve.py: a data-parallel group's flags;
  fleet_serve.py: a fleet's lines; llmd_values.py: llm-d's chart values)
- speculation_curve.py: TPOT and throughput against load with speculation on and off
- cli.py: `planner size`: load, search with a progress bar, print, write the report
- report/: the terminal text, report.md, report.html, sizing.json and the figures (interval_tables.py: the intervals;
  layouts.py: where a data-parallel layout's step time goes; topology.py: the units' section; speculation.py: the
  crossover)
"""
