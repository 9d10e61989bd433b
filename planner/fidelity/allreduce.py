"""All-reduce: what Vidur's times measure (two launch states below a few MB), and the shipped fits on them."""

from __future__ import annotations

import numpy as np

from planner.fidelity.fit_errors import errors, link_bytes_per_s
from planner.fidelity.markdown import pct

SMALL_MESSAGE_BYTES = 1 << 20  # below: the launch-bound regime of Vidur's all-reduce loop (ALL_REDUCE_NOISE)
LARGE_MESSAGE_BYTES = 4 << 20  # from here: the kernel outlasts the launch interval and the runs agree

ALLREDUCE_NOTE = """## All-reduce: what Vidur's times measure

Vidur times an all-reduce as the NCCL kernel's duration on rank 0: 11 eager `torch.distributed.all_reduce`
calls back to back, the median kernel, 3 runs per size (vidur/profiling/collectives/). An NCCL kernel starts
when its own rank launches it and ends once every peer's data has arrived: it spins while a later peer is
still launching (NVIDIA/nccl#1025; NVIDIA/nccl-tests#330, the rank that launches first shows the longer
kernel). Below a few MB these eager launches are host-bound, so each run lands in one of two states: rank 0
launched last (the all-reduce itself) or first (plus up to one launch interval of waiting: a ceiling of
{ceiling}, the same at 2, 4 and 8 GPUs of a node, i.e. the host, not the link). Which state does not
depend on the size: below 1 MB the 3 runs of ONE size differ by up to {small_spread} of their median (median
over the sizes of one setup; table), and one bin's sizes have medians {small_range} us apart (10th to 90th
percentile); from 4 MB the runs agree within {large_spread}. One size's median is a coin toss between the two states, so
`planner.calibration.public_data` pools at least {min_sizes} measured sizes per bin (half-octave bins,
merged below a few MB) and the step figures interpolate between the pooled medians. Before pooling, single
sizes' medians jumped between neighbouring sizes and the relative least-squares fit followed the low ones
(this page's previous version: latencies of 11-37 us, the fits 7-52% off in median). The form, a latency plus the ring's
bytes at a fitted fraction of the link, is kept. From 4 MB, where the runs agree, it fits the bins within
{large_fit} median; two shapes it cannot follow there, each fitted beside it by the same fitter (last two
columns): on the A100 at 4 and 8 GPUs time grows more slowly with size at the top of the range, as NCCL
switching algorithm and protocol with size would make it (NVIDIA/nccl#754: the cheaper of several latency +
bandwidth regimes), and on the H100 the flat floor reaches into the sizes where the runs agree. Either costs one to three more
coefficients, and neither moves a profile across the per-step target: where steps still miss (the A100 at
4 and 8 GPUs), the pooled medians alternate between the two states over runs of neighbouring sizes (4
GPUs: {a100_tp4_small} us below 1 MB), which no price of the size follows.

**What a CUDA graph pays.** The fit to the pooled medians is the price of an eager all-reduce as Vidur
launched it, launch wait included: that is what the per-step figures above compare (Vidur's layers ran
eagerly). vLLM replays decode steps from CUDA graphs, which launch no kernel from the host between the
layers, so no rank waits for a peer's host launch there. The profiles therefore split the fitted latency
(`public_fit.fit_allreduce`): `allreduce_latency_s` is the low state, the median over the bins below 1 MB
of their lower envelope (each bin's 10th percentile of its sizes' fastest run, less the fitted ring bytes);
`allreduce_launch_wait_s` is the rest, and the cost model pays it per all-reduce with the launches that
graphs remove. The eager price (latency + wait) is the fit unchanged, so every figure on this page is
unchanged by the split. The lower envelope is an estimate: in {never_low} of the 36 bins below 1 MB none of
the sizes' 3 runs reached the low state (their 10th percentile is still {high_floor} us), so the median over
bins is used, not the lowest; and a graph replay still has skew between ranks (their kernels' durations
differ), which the low state, measured after a host-launch race, does not show. Last columns: the split,
and what it takes off a graph-replayed decode step per layer (two all-reduces).

| setup | GPUs | sizes per bin | runs of one size, (max - min) / median, < 1 MB / >= 4 MB | bin medians < 1 MB (us) | profile's fit, median / p90, all bins | profile's fit, bins >= 4 MB | two regimes, bins >= 4 MB (median) | floor, bins >= 4 MB (median) | eager latency = low state + launch wait (us) | graphed decode saves per layer (us) |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
"""


def _allreduce_alternatives(size, tp: int, link: float, measured) -> dict[str, np.ndarray]:
    """Two other prices of an all-reduce, fitted by the same fitter to the same bins (evidence only, as the
    p-norm is for the GEMMs): NCCL's own tuning model, the cheaper of two (latency, bandwidth) regimes (it
    switches algorithm and protocol with size, NVIDIA/nccl#754), and a floor under one regime (the
    launch-bound plateau). Returns each one's predicted seconds per bin."""
    from planner.calibration import public_fit as pf
    from planner.calibration.fit import fit_relative

    def line(x, i):
        return pf.allreduce_time_s(size, tp, link, x[i], x[i + 1])

    # name: (price, initial, lower, upper, scale), coefficients as (efficiency, latency_s[, ...], floor_s)
    forms = {
        "two regimes": (
            lambda x: np.minimum(line(x, 0), line(x, 2)),
            (0.5, 1e-5, 0.8, 5e-5), (0.01, 0.0, 0.01, 0.0), (1.0, 1e-3, 1.0, 1e-3), (1.0, 1e-5, 1.0, 1e-5),
        ),
        "floor": (
            lambda x: np.maximum(x[2], line(x, 0)),
            (0.7, 2e-5, 3e-5), (0.01, 0.0, 0.0), (1.0, 1e-3, 1e-3), (1.0, 1e-5, 1e-5),
        ),
    }  # fmt: skip
    out = {}
    for name, (price, initial, lower, upper, scale) in forms.items():
        fit = fit_relative(price, measured, [str(i) for i in range(len(initial))], initial, lower, upper, scale)
        out[name] = price(fit.values)
    return out


def section_allreduce(ar) -> list[str]:
    """The all-reduce data's two regimes, and the shipped fits on each (public_data's ALL_REDUCE_NOISE)."""
    from planner.calibration import public_fit as pf
    from planner.calibration.public_data import ALL_REDUCE_SETUPS, MIN_SIZES_PER_BIN
    from planner.calibration.public_fit import all_reduce_rows
    from planner.calibration.shipped import TENSOR_PARALLEL_SIZES
    from planner.calibration.transfer import load_profile

    lines, ceilings, small_spreads, large_spreads, large_fits, ranges, high_floors = [], {}, [], [], [], [], []
    tp4_small = ""
    for gpu, setup in ALL_REDUCE_SETUPS.items():
        for tp in TENSOR_PARALLEL_SIZES[1:]:
            rows = all_reduce_rows(gpu, tp, ar)
            c = load_profile(gpu, tp)["coefficients"]
            link = link_bytes_per_s(gpu)
            size = np.asarray([r.size_bytes for r in rows], dtype=np.float64)
            measured = np.asarray([r.ms for r in rows]) * 1e-3
            error = pf.allreduce_time_s(size, tp, link, c["interconnect_efficiency"], pf.eager_allreduce_latency_s(c))
            error = error / measured - 1
            small, large = size < SMALL_MESSAGE_BYTES, size >= LARGE_MESSAGE_BYTES
            spread = np.asarray([r.run_spread for r in rows])
            medians_us = ", ".join(f"{m:.0f}" for m in measured[small] * 1e6)
            p10, p90 = (np.asarray([getattr(r, k) for r in rows])[small] * 1e3 for k in ("p10_ms", "p90_ms"))
            ceilings.setdefault(setup, []).append(max(p90))
            small_spreads.append(np.median(spread[small]))
            large_spreads.append(np.median(spread[large]))
            large_fits.append(errors(error[large])[0])
            ranges.append((min(p10), max(p90)))
            if gpu == "a100-80gb" and tp == 4:
                tp4_small = medians_us
            others = {k: errors(v[large] / measured[large] - 1)[0] for k, v in _allreduce_alternatives(size, tp, link, measured).items()}  # fmt: skip
            lines.append(
                f"| {setup} | {tp} | {min(r.num_sizes for r in rows)}-{max(r.num_sizes for r in rows)} "
                f"| {pct(np.median(spread[small]))} / {pct(np.median(spread[large]))} | {medians_us} "
                f"| {' / '.join(map(pct, errors(error)))} | {' / '.join(map(pct, errors(error[large])))} "
                f"| {pct(others['two regimes'])} | {pct(others['floor'])} "
                f"| {1e6 * pf.eager_allreduce_latency_s(c):.1f} = {1e6 * c['allreduce_latency_s']:.1f} + "
                f"{1e6 * c[pf.WAIT_NAME]:.1f} | {1e6 * pf.ALLREDUCES_PER_LAYER * c[pf.WAIT_NAME]:.0f} |"
            )
            fastest_small = np.asarray([r.fastest_p10_ms for r in rows])[small] * 1e3
            high_floors += [f for f in fastest_small if f > 40]
    note = ALLREDUCE_NOTE.format(
        ceiling=" and ".join(f"{min(v):.0f}-{max(v):.0f} us ({k})" for k, v in ceilings.items()),
        small_spread=f"{100 * max(small_spreads):.0f}%",
        small_range=f"as far as {min(lo for lo, _ in ranges):.0f} to {max(hi for _, hi in ranges):.0f}",
        large_spread=f"{100 * min(large_spreads):.1f}-{100 * max(large_spreads):.1f}%",
        min_sizes=MIN_SIZES_PER_BIN,
        large_fit=f"{100 * min(large_fits):.1f}-{100 * max(large_fits):.1f}%",
        a100_tp4_small=tp4_small,
        never_low=len(high_floors),
        high_floor=f"{min(high_floors):.0f}-{max(high_floors):.0f}",
    )
    return [*note.rstrip("\n").split("\n"), *lines]
