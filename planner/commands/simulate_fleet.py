"""`planner simulate` and `planner run` of a fleet (a scenario with `fleet:`): every pool's cost model, the run
(simulated, or the live prefill/decode pair), the summary with its `fleet` section, and --out's summary.json,
requests.csv and steps.csv (a `pool` column), the client's latency CDFs (latency_cdf.png), each pool's throughput
and KV cache over time (throughput_POOL.png, kv_cache_POOL.png) and, for a prefill/decode fleet that llm-d's chart
can start, its values (llm-d-values.yaml, planner/sizing/llmd_values.py)."""

from __future__ import annotations

import sys

from planner.errors import PlannerError
from planner.outputs.progress import ProgressBar


def simulate_fleet_command(args, scenario) -> int:
    from planner.calibration.resolve import resolve_cost_model
    from planner.commands.output import check_out

    coefficients, provenance = {}, {}
    for pool in scenario.fleet.pools:
        coefficients[pool.name], provenance[pool.name] = resolve_cost_model(
            scenario.pool_scenario(pool), args.calibration
        )
    check_out(args)
    as_dicts = {pool: prov.to_dict() for pool, prov in provenance.items()}
    summary, result = run_fleet(scenario, coefficients, as_dicts, record_steps=args.out is not None)
    from planner.sizing.fleet_serve import fleet_serve_lines

    summary["fleet"]["serve"] = fleet_serve_lines(scenario)  # what to run for the fleet simulated
    extra_lines = []
    if args.intervals:
        from planner.calibration.intervals import interval_lines, simulate_fleet_intervals

        progress = ProgressBar(f"{args.intervals} interval runs", "requests", delay_s=2.0)
        try:
            summary["intervals"] = simulate_fleet_intervals(
                scenario, coefficients, provenance, args.intervals, progress
            )
        finally:
            progress.close()
        by_label: dict[str, list[str]] = {}
        for pool, prov in provenance.items():
            by_label.setdefault(prov.label, []).append(pool)
        labels = "; ".join(f"{label} (pools {', '.join(pools)})" for label, pools in by_label.items())
        extra_lines = interval_lines(summary["intervals"], labels)
    return _emit(args, summary, result, extra_lines)


def run_pair_command(args, scenario, sampling) -> int:
    """`planner run` of a fleet: the live prefill/decode pair, its summary a fleet's (mode measured)."""
    from gpu_engine.engine import EngineError
    from gpu_engine.pd_pair import run_pd_pair

    progress = ProgressBar(f"running on {args.device}", "requests", delay_s=2.0)
    try:
        result = run_pd_pair(scenario, args.device, progress, sampling)
    except EngineError as e:
        raise PlannerError(str(e)) from e
    finally:
        progress.close()
    return _emit(args, fleet_summary("measured", result, {}), result)


def _emit(args, summary: dict, result, extra_lines: list[str] = ()) -> int:
    if args.out:
        written = write_fleet_outputs(args.out, summary, result)
    if args.json:
        from planner.outputs.results import summary_json

        sys.stdout.write(summary_json(summary))
        return 0
    from planner.outputs.report import summary_lines

    print("\n".join([*summary_lines(summary), *extra_lines]))
    if args.out:
        print(f"\nwrote {', '.join(p.name for p in written)} to {args.out}")
    return 0


def run_fleet(scenario, coefficients: dict, provenance: dict, record_steps: bool = False):
    """(summary, FleetResult) of a fleet scenario's simulation."""
    from sim.fleet import simulate_fleet

    progress = ProgressBar("simulating", "requests", delay_s=2.0)
    result = simulate_fleet(scenario, coefficients, record_steps=record_steps, progress=progress)
    progress.close()
    return fleet_summary("simulated", result, provenance), result


def fleet_summary(mode: str, result, provenance: dict) -> dict:
    """A fleet run's summary: the client's figures, then the `fleet` section (planner/outputs/fleet_summary.py)."""
    from planner.outputs.fleet_summary import fleet_section
    from planner.outputs.results import _finite, build_summary

    scenario, wl = result.scenario, result.workload
    memory = {p.config.name: p.memory.to_dict() for p in result.pools}
    summary = build_summary(mode, scenario, result.recorder, memory, wl.num_rejected, wl.num_truncated, {})
    # the client's recorder holds no steps: a fleet's are its pools' (in `fleet.pools`)
    for key in ("busy_s", "kv_cache_utilization", "kv_slot_utilization"):
        del summary[key]
    summary["num_steps"] = sum(p.recorder.num_steps for p in result.pools)
    summary["num_preemptions"] = sum(p.recorder.num_preemptions for p in result.pools)
    fleet = fleet_section(result, provenance, summary["duration_s"])
    summary = {**summary, "fleet": fleet, "scenario": summary.pop("scenario")}  # the scenario stays last
    return _finite(summary)


def write_fleet_outputs(out_dir, summary: dict, result) -> list:
    import numpy as np

    from planner.outputs.results import _write_csv, summary_json, with_num_steps
    from planner.sizing.llmd_values import llmd_values
    from planner.sizing.report.files import MANIFEST_NAME
    from planner.vllm_files.export import BENCH_FILE, bench_json
    from sim.fleet import fleet_step_rows

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        written = [out_dir / "summary.json", out_dir / "requests.csv", out_dir / "steps.csv"]
        written[0].write_text(summary_json(summary))
        requests = result.recorder.requests.view()
        order = np.argsort(requests["request_id"], kind="stable")
        _write_csv(written[1], {name: column[order] for name, column in requests.items()})
        _write_csv(written[2], with_num_steps(fleet_step_rows(result)))
        written.append(out_dir / BENCH_FILE)  # what `vllm bench serve` against the fleet's proxy or router saves
        written[-1].write_text(bench_json(summary, result.recorder))
        written += write_fleet_plots(out_dir, summary, result)
        manifest = llmd_values(None, 0, result.scenario, 1)
        if manifest is not None:  # a prefill/decode fleet with NixlConnector and a checkpoint: llm-d's chart values
            written.append(out_dir / MANIFEST_NAME)
            written[-1].write_text(manifest)
    except OSError as e:
        raise PlannerError(f"--out {out_dir}: cannot write the outputs: {e}") from None
    return written


def _pools_plot(out_dir, summary: dict, result, title: str):
    """pools.png: the pools side by side over time (planner/outputs/plots/pools.py)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from planner.outputs.plots.context import Context
    from planner.outputs.plots.pools import pools_figure
    from planner.outputs.plots.style import DPI, FIGSIZE

    pools = []
    for pool in result.pools:
        hw = pool.config.hardware
        name = pool.config.name if pool.config.name == pool.config.role else f"{pool.config.name} ({pool.config.role})"
        label = f"{name}: {hw.replicas}x {hw.tensor_parallel_size}x {hw.gpu.name}"
        pools.append((label, pool.recorder.step_rows(), pool.recorder.num_gpu_blocks))
    steps = {"start_s": np.concatenate([p[1]["start_s"] for p in pools]),
             "duration_s": np.concatenate([p[1]["duration_s"] for p in pools])}  # fmt: skip
    ctx = Context(result.recorder.requests.view(), steps, summary, title)
    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    FigureCanvasAgg(fig)
    pools_figure(fig, ctx, pools)
    path = out_dir / "pools.png"
    fig.savefig(path, dpi=DPI)
    return path


def write_fleet_plots(out_dir, summary: dict, result) -> list:
    """The client's latency CDFs (the requests as the proxy or router returns them, their SLO bounds marked), and
    per pool its throughput and KV cache over time from its own steps and requests (a prefill pool's requests end
    at their first token)."""
    from planner.outputs.plots.draw import write_plots
    from planner.outputs.results import CDF_POINTS

    name, mode = result.scenario.name, summary["mode"]
    client = result.recorder
    replicas = sum(pool.config.hardware.replicas for pool in result.pools)  # the footer counts the fleet's
    client_summary = {**summary, "scenario": {**summary["scenario"], "hardware": {"replicas": replicas}}}
    written = write_plots(
        out_dir, client.requests.view(), {}, client_summary, f"{name} ({mode})", client.itl.sample_ms(CDF_POINTS),
        names=("latency_cdf.png",),
    )  # fmt: skip
    written.append(_pools_plot(out_dir, client_summary, result, f"{name} ({mode})"))
    for pool in result.pools:
        hw = pool.config.hardware
        pool_summary = {"mode": mode, "scenario": {"hardware": {"replicas": hw.replicas}}}
        title = f"{name} ({mode}), pool {pool.config.name}: {hw.replicas}x {hw.tensor_parallel_size}x {hw.gpu.name}"
        written += write_plots(
            out_dir, pool.recorder.requests.view(), pool.recorder.step_rows(), pool_summary, title,
            num_gpu_blocks=pool.recorder.num_gpu_blocks, names=("throughput.png", "kv_cache.png"),
            suffix=f"_{pool.config.name}",
        )  # fmt: skip
    return written
