"""Benchmark of `planner size`: a 1,024-candidate search (8 GPUs x 4 tensor parallel sizes x 4 max_num_seqs x
4 token budgets x 2 chunked-prefill settings, replicas as needed) with 2,000-request simulations per probe;
with --disaggregated, also 80 prefill/decode units (2 prefill GPUs x 2 decode GPUs x tensor parallel 1 or 2 per
role x the 5 default xPyD ratios) weighed against it. Prints the wall time, how many candidates were simulated or
pruned, the number of simulations and their median time. Target: < 60 s on a 2-core machine.
    python scripts/bench_size.py [--workers N] [--disaggregated]"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

from planner.sizing.rank import rank
from planner.sizing.search import median_simulation_s, run_search
from planner.sizing.spec import load_sizing
from planner.sizing.topology import compare_topologies

SIZING = """
name: bench_size_llama31_8b
model: llama-3.1-8b
hardware: {gpu: a10}
engine: {max_model_len: 8192}
workload:
  seed: 0
  arrival: {process: poisson, rate: 20}
  prompt_tokens: {dist: lognormal, mean: 512, std: 256, max: 4096}
  output_tokens: {dist: lognormal, mean: 128, std: 64, max: 1024}
slo:
  ttft_ms: {p99: 2000}
  tpot_ms: {p99: 60}
search:
  demand: {rate: 20, headroom: 1.2}
  candidates:
    gpus: [a10, l4, l40s, a100-40gb, a100-80gb, h100-sxm, h100-pcie, h200]
    tensor_parallel_sizes: [1, 2, 4, 8]
    engine:
      max_num_seqs: [32, 64, 128, 256]
      max_num_batched_tokens: [2048, 4096, 8192, 16384]
      enable_chunked_prefill: [true, false]
  probe: {num_requests: 2000, max_probes: 6, tolerance: 0.15}
"""
UNITS = """
  disaggregated:
    prefill: {gpus: [l40s, h100-sxm], tensor_parallel_sizes: [1, 2]}
    decode: {gpus: [h100-sxm, h200], tensor_parallel_sizes: [1, 2]}
    kv_transfer: {link: infiniband, bandwidth_gbit_per_s: 400}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--disaggregated", action="store_true", help="also weigh 80 prefill/decode units")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench_size.yaml"
        path.write_text(SIZING + (UNITS if args.disaggregated else ""))
        question = load_sizing(path)
        start, start_cpu = time.perf_counter(), _cpu_s()
        out = run_search(question, workers=args.workers)
        ranking = rank(out)
        units = None
        if args.disaggregated:
            cheapest = ranking.recommended.objective_usd_per_month if ranking.recommended else None
            units = compare_topologies(question, cheapest, args.workers, None)
        wall_s, cpu_s = time.perf_counter() - start, _cpu_s() - start_cpu
    num = len(out.results) + len(out.pruned)
    median = median_simulation_s(out)
    print(f"candidates            {num:,}")
    print(f"  cannot run          {len(out.pruned):,}")
    print(f"  not simulated       {sum(1 for r in out.results if r.evaluation is None):,} (analytic: cannot win)")
    print(f"  simulated           {len(out.evaluated):,}")
    short = sum(1 for r in out.evaluated if r.evaluation.capacity.short_of is not None)
    print(f"    one probe only    {short:,} (fail at the capacity they need to beat the cheapest on their GPU)")
    print(
        f"simulations           {out.num_simulations:,} of up to 2,000 requests: median {median:.2f} s wall,"
        f" {median_simulation_s(out, cpu=True):.2f} s CPU each"
    )
    if units is not None:
        cannot_win = sum(1 for _, why in units.pruned if why.startswith("cannot win"))
        print(
            f"prefill/decode units  {len(units.results) + len(units.pruned):,}: {len(units.results):,} simulated in"
            f" {units.num_simulations:,} simulations, {cannot_win:,} cannot win, {len(units.pruned) - cannot_win:,}"
            f" cannot run; {units.wall_s:.1f} s wall"
        )
        print(
            f"topology              {'disaggregated ' + units.best.unit.label if units.best and (not ranking.recommended or units.best.objective_usd_per_month < ranking.recommended.objective_usd_per_month) else 'aggregated'}"
        )
    print(f"workers               {out.workers}")
    print(f"wall                  {wall_s:.1f} s  (target < 60 s: {'PASS' if wall_s < 60 else 'MISS'})")
    print(
        f"CPU                   {cpu_s:.1f} s in all processes; on {args.workers} otherwise idle cores about"
        f" {cpu_s / args.workers:.1f} s wall (the wall time above depends on what else the machine runs)"
    )
    best = ranking.recommended
    print(
        f"recommended           {best.candidate.label} x {best.evaluation.replicas}" if best else "no candidate meets"
    )


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the worker processes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


if __name__ == "__main__":
    main()
