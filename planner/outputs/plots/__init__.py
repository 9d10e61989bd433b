"""The three PNG plots of a run (the same for `planner simulate` and `planner run`).

    latency_cdf.png  CDFs of TTFT, TPOT, ITL and E2E latency with p50/p90/p99 (and SLO bounds) marked
    throughput.png   output tokens/s, requests arriving and completing per second, queue and batch over time
    kv_cache.png     KV-cache blocks in use (% of the pool) and batch size over time, preemptions marked

- draw.py: `write_plots`, the figures drawn in this process (latency.py, throughput.py, kv_cache.py: one each;
  context.py, binning.py, layout.py, style.py: what they share)
- workers.py: the same figures drawn by child processes beside a long run
- calibration.py: the figures of `planner calibrate`'s held-out validation

This module holds what the run's own process needs to know of the plots without importing matplotlib (~0.7 s):
their names, the data they read.
"""

PLOT_NAMES = ("latency_cdf.png", "throughput.png", "kv_cache.png")
# A CDF curve draws at most this many points, at evenly spaced ranks (percentiles stay exact): a panel of the
# latency figure is about 230 pixels high, so consecutive points are 0.06 pixel apart in y. 200,000 cost 12% more
# to draw on the 10k benchmark (2.25 against 1.98 billion instructions, callgrind), for the same picture.
CDF_POINTS = 4096
# The step columns the figures read: the others are not sent to a plotting process, whose pickled step sample is
# then 36 of 88 bytes a row (at its cap of 2^18 rows: 9.4 MB instead of 23 MB).
PLOT_STEP_COLUMNS = (
    "start_s",
    "duration_s",
    "num_running",
    "num_waiting",
    "num_sampled",
    "kv_blocks_used",
    "num_preemptions",
)
