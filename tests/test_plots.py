"""planner.outputs.plots: the three PNGs are written, valid and non-trivial, also for degenerate runs and large
step tables, and without touching pyplot's global state."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from planner.outputs.plots.binning import output_tokens_from_requests
from planner.outputs.plots.draw import write_plots
from sim.metrics import REQUEST_COLUMNS, STEP_COLUMNS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NAMES = ["latency_cdf.png", "throughput.png", "kv_cache.png"]


def synthetic_run(num_requests: int = 500, num_steps: int = 20_000, seed: int = 0, one_token: bool = False):
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.uniform(0, 60, num_requests))
    ttft = rng.lognormal(np.log(0.08), 0.8, num_requests)
    out = np.ones(num_requests, np.int64) if one_token else rng.integers(1, 400, num_requests)
    tpot = rng.lognormal(np.log(0.025), 0.3, num_requests)
    first = arrival + ttft
    finished = first + (out - 1) * tpot
    preempt = (rng.random(num_requests) < 0.02).astype(np.int32)
    requests = {
        "request_id": np.arange(num_requests, dtype=np.int64),
        "arrival_s": arrival,
        "first_token_s": first,
        "finished_s": finished,
        "prompt_tokens": rng.integers(16, 2048, num_requests),
        "output_tokens": out,
        "preemptions": preempt,
    }
    t_end = float(finished.max()) if num_requests else 1.0
    start = np.sort(rng.uniform(0, t_end, num_steps))
    duration = np.diff(np.append(start, t_end)) * 0.9
    phase = np.sin(start / max(t_end, 1e-9) * np.pi)
    running = np.maximum((phase * 120 + rng.normal(0, 5, num_steps)).astype(np.int32), 0)
    waiting = np.maximum((phase**4 * 60 + rng.normal(0, 3, num_steps)).astype(np.int32), 0)
    steps = {
        "start_s": start,
        "duration_s": duration,
        "num_running": running,
        "num_waiting": waiting,
        "num_prefill_tokens": rng.integers(0, 512, num_steps).astype(np.int32),
        "num_decode_requests": running,
        "num_sampled": running,
        "sum_context_tokens": running.astype(np.int64) * 800,
        "attention_pairs": running.astype(np.int64) * 800,
        "kv_blocks_used": np.minimum(running * 40, 4000).astype(np.int32),
        "num_preemptions": (rng.random(num_steps) < 0.0005).astype(np.int32),
        "replica": np.zeros(num_steps, np.int32),  # an unknown column: ignored
    }
    itl_ms = np.concatenate([np.full(int(n) - 1, t * 1e3) for n, t in zip(out, tpot)]) if num_requests else np.empty(0)
    itl_ms = itl_ms * rng.lognormal(0, 0.2, len(itl_ms))
    summary = {
        "mode": "simulated",
        "scenario_name": "synthetic_test",
        "memory": {"num_gpu_blocks": 4096},
        "slo": {"checks": [{"metric": "ttft_ms", "stat": "p99", "bound_ms": 1000.0, "value_ms": 0.0, "met": True}]},
    }
    return requests, steps, summary, itl_ms


def empty_columns(dtypes: dict) -> dict[str, np.ndarray]:
    return {name: np.empty(0, dtype) for name, dtype in dtypes.items()}


def check_pngs(paths, out_dir, min_bytes: int = 10_000) -> None:
    assert [p.name for p in paths] == NAMES
    for p in paths:
        assert p.parent == out_dir and p.exists()
        data = p.read_bytes()
        assert data[:8] == PNG_MAGIC
        assert len(data) > min_bytes, (p.name, len(data))


def test_writes_three_valid_pngs(tmp_path):
    requests, steps, summary, itl_ms = synthetic_run()
    paths = write_plots(tmp_path, requests, steps, summary, "synthetic_test (simulated)", itl_ms=itl_ms)
    check_pngs(paths, tmp_path)


def test_does_not_touch_pyplot(tmp_path):
    requests, steps, summary, itl_ms = synthetic_run(50, 500)
    write_plots(tmp_path, requests, steps, summary, "t (simulated)", itl_ms=itl_ms, num_gpu_blocks=4096)
    if "matplotlib.pyplot" in sys.modules:
        import matplotlib.pyplot as plt

        assert plt.get_fignums() == []


@pytest.mark.parametrize(
    "case",
    [
        "no_requests",
        "one_request",
        "one_token_outputs",
        "no_steps",
        "no_itl",
        "no_pool_size",
        "unsorted_steps",
        "zero_duration",
    ],
)
def test_edge_cases_do_not_crash(tmp_path, case):
    requests, steps, summary, itl_ms = synthetic_run(200, 2_000)
    num_gpu_blocks = None
    if case == "no_requests":
        requests, steps, itl_ms = empty_columns(REQUEST_COLUMNS), empty_columns(STEP_COLUMNS), np.empty(0)
    elif case == "one_request":
        requests, steps, summary, itl_ms = synthetic_run(1, 3)
    elif case == "one_token_outputs":
        requests, steps, summary, itl_ms = synthetic_run(100, 500, one_token=True)
    elif case == "no_steps":
        steps = empty_columns(STEP_COLUMNS)
    elif case == "no_itl":
        itl_ms = None
    elif case == "no_pool_size":
        summary = {}
    elif case == "unsorted_steps":  # interleaved replicas record out of time order
        order = np.random.default_rng(1).permutation(len(steps["start_s"]))
        steps = {k: v[order] for k, v in steps.items()}
        num_gpu_blocks = 4096
    elif case == "zero_duration":
        requests = {k: v[:5] for k, v in requests.items()}
        for k in ("arrival_s", "first_token_s", "finished_s"):
            requests[k] = np.zeros(5)
        steps = empty_columns(STEP_COLUMNS)
    paths = write_plots(
        tmp_path / case, requests, steps, summary, f"{case} (measured)", itl_ms=itl_ms, num_gpu_blocks=num_gpu_blocks
    )
    check_pngs(paths, tmp_path / case, min_bytes=5_000)


def test_two_million_steps(tmp_path):
    requests, steps, summary, itl_ms = synthetic_run(20_000, 2_000_000)
    t0 = time.perf_counter()
    paths = write_plots(tmp_path, requests, steps, summary, "big (simulated)", itl_ms=itl_ms)
    print(f"2M steps, {len(itl_ms):,} ITL gaps: {time.perf_counter() - t0:.2f} s")
    check_pngs(paths, tmp_path)


def test_tokens_from_requests_conserves_total():
    requests, _, _, _ = synthetic_run(300, 10)
    edges = np.linspace(0, float(requests["finished_s"].max()) + 1e-6, 101)
    per_bin = output_tokens_from_requests(requests, edges)
    assert per_bin.sum() == pytest.approx(float(requests["output_tokens"].sum()), rel=1e-9)
    assert (per_bin >= 0).all()


def test_a_long_title_wraps_inside_the_figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from planner.outputs.plots.context import Context, finish
    from planner.outputs.plots.style import FIGSIZE

    requests, steps, summary, _ = synthetic_run(num_requests=20, num_steps=100)
    title = "a100_llama2_7b_azure_10k (simulated; cost model: calibrated (public profile 5cb427046e34, a100-80gb))"
    fig = Figure(figsize=FIGSIZE)
    canvas = FigureCanvasAgg(fig)
    fig.subplots()
    finish(fig, f"Throughput and load over time — {title}", Context(requests, steps, summary, title), "")
    box = fig._suptitle.get_window_extent(canvas.get_renderer())
    assert "\n" in fig._suptitle.get_text()
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width  # one line would run off both edges


def test_the_itl_panel_counts_every_gap_not_the_sample(tmp_path):
    from matplotlib.figure import Figure

    from planner.outputs.plots.context import Context
    from planner.outputs.plots.latency import latency_figure

    requests, steps, summary, _ = synthetic_run(num_requests=50, num_steps=100)
    summary = {**summary, "total_output_tokens": 5_000_050, "completed": 50, "mean_itl_ms": 12.5}
    fig = Figure()
    latency_figure(fig, Context(requests, steps, summary, "t"), itl_ms=np.full(1000, 10.0))
    titles = [ax.get_title() for ax in fig.axes]
    assert "Inter-token latency: 5,000,000 gaps, mean 12.5 ms" in titles


def _layout_boxes(fig, renderer) -> list[tuple[str, object]]:
    """(owner, window extent) of every panel and of every text the layout makes room for: each panel's title,
    axis labels and visible tick labels, the suptitle and the footnote."""
    boxes = []
    for i, ax in enumerate(fig.axes):
        owner = f"panel {i}"
        boxes.append((owner, ax.get_window_extent(renderer)))
        texts = [ax.title, ax.xaxis.label, ax.yaxis.label]
        for labels, limits, coordinate in (
            (ax.get_xticklabels(), ax.get_xlim(), 0),
            (ax.get_yticklabels(), ax.get_ylim(), 1),
        ):
            low, high = sorted(limits)
            span = (high - low) * 1e-9  # a tick on the limit is drawn; those beyond are not
            texts += [
                t for t in labels if t.get_visible() and low - span <= t.get_position()[coordinate] <= high + span
            ]
        for text in texts:
            if text.get_text():
                boxes.append((owner, text.get_window_extent(renderer)))
    boxes.append(("suptitle", fig._suptitle.get_window_extent(renderer)))
    boxes += [("footnote", t.get_window_extent(renderer)) for t in fig.texts if t.get_text() and t is not fig._suptitle]
    return boxes


@pytest.mark.parametrize("case", ["synthetic", "huge_numbers", "no_steps", "long_title"])
def test_the_panels_labels_fit_inside_the_figure_and_clear_of_each_other(tmp_path, case):
    """planner.outputs.plots.layout sets the margins from estimates instead of measuring (tight_layout): drawn, no text
    leaves the figure, and no text of one panel (or the suptitle or footnote) overlaps another panel or its
    texts; checked on tick labels far wider than usual too."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from planner.outputs.plots.context import Context
    from planner.outputs.plots.kv_cache import kv_cache_figure
    from planner.outputs.plots.latency import latency_figure
    from planner.outputs.plots.style import FIGSIZE
    from planner.outputs.plots.throughput import throughput_figure

    requests, steps, summary, itl_ms = synthetic_run(300, 3_000)
    title = "t (simulated)"
    if case == "huge_numbers":  # rates in the millions: 9-character tick labels on the y axes
        requests["output_tokens"] = requests["output_tokens"] * 100_000
        steps = {**steps, "num_sampled": steps["num_sampled"] * 100_000, "num_running": steps["num_running"] * 1000}
        itl_ms = itl_ms * 1e6
    elif case == "no_steps":
        steps = empty_columns(STEP_COLUMNS)
    elif case == "long_title":
        title = "a100_llama2_7b_azure_10k (simulated; cost model: calibrated (public profile 5cb427046e34, a100-80gb))"
    ctx = Context(requests, steps, summary, title)
    for draw in (lambda f: latency_figure(f, ctx, itl_ms), throughput_figure, lambda f: kv_cache_figure(f, ctx, 4096)):
        fig = Figure(figsize=FIGSIZE)
        canvas = FigureCanvasAgg(fig)
        draw(fig) if draw is not throughput_figure else draw(fig, ctx)
        canvas.draw()
        renderer = canvas.get_renderer()
        boxes = _layout_boxes(fig, renderer)
        for owner, box in boxes:
            assert box.x0 >= 0 and box.y0 >= 0, (case, owner, box)
            assert box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height, (case, owner, box)
        for i, (owner_a, a) in enumerate(boxes):
            for owner_b, b in boxes[i + 1 :]:
                if owner_a != owner_b:
                    assert not a.overlaps(b), (case, owner_a, a, owner_b, b)


def test_the_figures_read_only_the_step_columns_a_plotting_process_is_sent(tmp_path):
    """planner.outputs.results sends a plotting process only PLOT_STEP_COLUMNS of the step rows: the figures drawn
    from those alone are the figures drawn from every column, byte for byte."""
    from planner.outputs.plots import PLOT_STEP_COLUMNS

    requests, steps, summary, itl_ms = synthetic_run(200, 2_000)
    steps = {
        **steps,
        **{name: np.zeros(len(steps["start_s"]), dtype) for name, dtype in STEP_COLUMNS.items() if name not in steps},
    }
    sent = {name: steps[name] for name in PLOT_STEP_COLUMNS}
    every = write_plots(tmp_path / "every", requests, steps, summary, "t (simulated)", itl_ms=itl_ms)
    only = write_plots(tmp_path / "sent", requests, sent, summary, "t (simulated)", itl_ms=itl_ms)
    assert [path.read_bytes() for path in every] == [path.read_bytes() for path in only]
