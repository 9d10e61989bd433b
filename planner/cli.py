"""`planner`: the command line. User errors print one message and exit 2; nothing else prints here."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from planner.errors import PlannerError, one_line
from sim.errors import WorkloadError

EXIT_USAGE = 2


def _scenario_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario field, e.g. --set engine.max_num_seqs=64 (repeatable)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="planner", description="Capacity planner for LLM inference.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check scenario files")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")

    p = sub.add_parser("catalog", help="list the GPU and model catalogs, or show one entry")
    p.add_argument("kind", nargs="?", choices=["gpu", "model"])
    p.add_argument("name", nargs="?")
    p.add_argument("--json", action="store_true", help="print the entries as JSON")

    p = sub.add_parser("memory", help="the memory model: weights, activations, KV blocks")
    _scenario_args(p)
    p.add_argument("--json", action="store_true", help="print the breakdown as JSON")

    p = sub.add_parser("simulate", help="predict throughput and latency with the simulator")
    _scenario_args(p)
    p.add_argument("--out", type=Path, help="write summary.json, requests.csv, steps.csv and plots here")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument(
        "--all-steps",
        action="store_true",
        help="steps.csv: a row per step (default: runs of identical decode steps merged, num_steps each)",
    )
    p.add_argument(
        "--calibration",
        metavar="FILE|auto",
        help="the cost model's calibration profile (default: the scenario's `calibration` key, auto)",
    )
    p.add_argument(
        "--intervals",
        type=int,
        metavar="N",
        help="also run N workload seeds x coefficient draws: 90%% intervals and the probability of each SLO",
    )

    p = sub.add_parser("run", help="run the scenario on the live engine (needs the engine extra)")
    _scenario_args(p)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--model-path", type=Path, help="local HF safetensors directory (default: random weights)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default); sampling is seeded")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold in (0, 1]")
    p.add_argument("--out", type=Path)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("calibrate", help="fit the simulator's cost model to the engine at hand, then validate it")
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="model, dtype and engine settings to calibrate")
    p.add_argument("--device", choices=["cpu", "cuda"], help="where the live engine runs the sweep")
    p.add_argument("--gpu", action="store_true", help="the same as --device cuda")
    p.add_argument("--model", help="catalog model for the built-in default scenario (no SCENARIO given)")
    p.add_argument("--budget-s", type=float, help="seconds for the step sweep (default: 45 on CPU, 240 on CUDA)")
    p.add_argument("--held-out-requests", type=int, help="requests per held-out scenario (default: 32 CPU, 200 CUDA)")
    p.add_argument("--out", type=Path, help="the profile file to write (default: in the user's profile folder)")
    p.add_argument(
        "--from", dest="from_runs", nargs="+", type=Path, metavar="RUN_DIR", help="fit `planner run` output folders"
    )
    p = sub.add_parser("size", help="the cheapest hardware and engine settings that meet the SLOs")
    _scenario_args(p)
    p.add_argument("--out", type=Path, help="write report.md, report.html, sizing.json and the figures here")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("--workers", type=int, help="worker processes (default: all cores)")
    p.add_argument("--ray", metavar="ADDRESS", help="run the candidates on this Ray cluster (needs the ray extra)")
    p.add_argument(
        "--intervals",
        type=int,
        metavar="N",
        help="N workload seeds x coefficient draws for the recommendation and runner-ups: 90%% intervals",
    )

    p = sub.add_parser("compare", help="two runs' summaries side by side")
    p.add_argument("a", type=Path, help="a run's output folder (or its summary.json)")
    p.add_argument("b", type=Path)
    p.add_argument("--json", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (PlannerError, WorkloadError) as e:  # WorkloadError: a trace file that cannot supply the requests
        print(f"planner: error: {one_line(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader (head, less) went away: not an error of ours
        sys.stderr.close()
        return 0


def cmd_validate(args) -> int:
    from planner.scenario import load_scenario
    from planner.sizing.spec import load_sizing

    status = 0
    for path in args.files:
        try:  # a sizing file (a scenario + `search:`) validates both parts
            scenario = (
                load_sizing(path, args.overrides).scenario if _has_search(path) else load_scenario(path, args.overrides)
            )
            problems = _run_problems(scenario)
        except (PlannerError, WorkloadError) as e:  # WorkloadError: a trace the workload cannot read
            print(f"planner: error: {one_line(str(e))}", file=sys.stderr)
            status = EXIT_USAGE
            continue
        for problem in problems:
            print(f"planner: error: {one_line(f'{path}: cannot run: {problem}')}", file=sys.stderr)
            status = EXIT_USAGE
        if not problems:
            e = scenario.engine  # the resolved limits: unset ones are what `vllm serve` picks on this GPU
            print(
                f"ok  {path}  ({scenario.model.name} on {scenario.hardware.tensor_parallel_size}x"
                f"{scenario.hardware.gpu.name}, {scenario.workload.num_requests} requests;"
                f" max_num_batched_tokens {e.max_num_batched_tokens}, max_num_seqs {e.max_num_seqs})"
            )
    return status


def _has_search(path: str) -> bool:
    """Whether a file is a sizing file (a scenario with a top-level `search:` section)."""
    from planner.errors import read_text_file
    from planner.scenario import MAX_SCENARIO_BYTES

    try:
        text = read_text_file(Path(path), "scenario file", MAX_SCENARIO_BYTES)  # no FIFO, no huge file
    except PlannerError:
        return False  # load_scenario reports it
    return any(line.startswith("search:") for line in text.splitlines())


def _catalog_entry(entry) -> dict:
    """A catalog entry as JSON data; models also carry their derived parameter count."""
    from dataclasses import asdict

    data = asdict(entry)
    if hasattr(entry, "num_params"):
        data["num_params"] = entry.num_params
    return data


def cmd_catalog(args) -> int:
    from planner.catalog import load_gpu_catalog, load_model_catalog

    catalogs = {"gpu": load_gpu_catalog(), "model": load_model_catalog()}
    if args.name:
        if args.kind is None:
            raise PlannerError(
                f"say which catalog: planner catalog gpu {args.name} or planner catalog model {args.name}"
            )
        entries = catalogs[args.kind]
        if args.name not in entries:
            raise PlannerError(f"no {args.kind} named {args.name!r} in the catalog; known: {', '.join(entries)}")
        print(json.dumps(_catalog_entry(entries[args.name]), indent=2))
        return 0
    kinds = [args.kind] if args.kind else ["gpu", "model"]
    if args.json:
        data = {kind: {name: _catalog_entry(e) for name, e in catalogs[kind].items()} for kind in kinds}
        print(json.dumps(data, indent=2))
        return 0
    if "gpu" in kinds:
        print(f"{'GPU':<12}{'memory GiB':>12}{'bf16 TFLOPS':>13}{'fp8 TFLOPS':>12}{'HBM GB/s':>10}{'$/h':>7}")
        for name, g in catalogs["gpu"].items():
            fp8 = "-" if g.fp8_tflops is None else f"{g.fp8_tflops:g}"
            rent = "-" if g.rental_usd_per_hour is None else f"{g.rental_usd_per_hour:.2f}"
            print(
                f"{name:<12}{g.memory_bytes / 2**30:>12.2f}{g.bf16_tflops:>13g}{fp8:>12}"
                f"{g.memory_bandwidth_gbps:>10g}{rent:>7}"
            )
    if len(kinds) == 2:
        print()
    if "model" in kinds:
        print(f"{'model':<14}{'params':>10}{'layers':>8}{'hidden':>8}{'heads':>7}{'kv heads':>10}{'vocab':>9}")
        for name, m in catalogs["model"].items():
            print(
                f"{name:<14}{_params(m.num_params):>10}{m.num_hidden_layers:>8}{m.hidden_size:>8}"
                f"{m.num_attention_heads:>7}{m.num_key_value_heads:>10}{m.vocab_size:>9}"
            )
    return 0


def _load(args):
    from planner.scenario import load_scenario

    return load_scenario(args.scenario, args.overrides)


def _mean_request_tokens(scenario) -> float:
    from sim.workload import generate_workload

    wl = generate_workload(scenario.workload, scenario.max_model_len)
    return float((wl.prompt_tokens + wl.output_tokens).mean()) if len(wl) else 0.0


def _params(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"


def cmd_memory(args) -> int:
    from planner.report import memory_lines
    from sim.memory import memory_breakdown
    from sim.memory_fit import fit_problems

    scenario = _load(args)
    mem = memory_breakdown(scenario)
    mean_tokens = _mean_request_tokens(scenario)
    problems = fit_problems(scenario, mem)
    if args.json:
        print(
            json.dumps(
                mem.to_dict()
                | {
                    # the resolved limits the activation and CUDA-graph terms were sized with
                    "max_num_batched_tokens": scenario.engine.max_num_batched_tokens,
                    "max_num_seqs": scenario.engine.max_num_seqs,
                    # What is left for KV, never negative; a deployment that does not fit says by how much.
                    "kv_cache_bytes": max(mem.kv_cache_bytes, 0),
                    "kv_cache_shortfall_bytes": max(-mem.kv_cache_bytes, 0),
                    "mean_request_tokens": mean_tokens,
                    "requests_at_mean_length": mem.requests_that_fit(mean_tokens) if mean_tokens else None,
                    "fits": not problems,
                    "problems": problems,
                },
                indent=2,
            )
        )
    else:
        print(
            f"{scenario.name}: {scenario.model.name} ({_params(scenario.model.num_params)} params, "
            f"{scenario.dtype}) on {scenario.hardware.tensor_parallel_size}x {scenario.hardware.gpu.name}"
        )
        print("\n".join(memory_lines(mem, scenario.hardware.tensor_parallel_size, mean_tokens)))
        for problem in problems:
            print(f"cannot run: {problem}")
    return EXIT_USAGE if problems else 0


class Progress:
    """A one-line progress bar on stderr, shown only once a run has taken a couple of seconds."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.start = time.perf_counter()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        elapsed = time.perf_counter() - self.start
        if elapsed < 2.0 or not sys.stderr.isatty():
            return
        self.shown = True
        width = 30
        filled = int(width * done / max(total, 1))
        print(
            f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} requests {elapsed:.0f}s",
            end="",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        if self.shown:
            print(file=sys.stderr)


def _workload_problems(scenario) -> list[str]:
    from sim.workload import generate_workload

    workload = generate_workload(scenario.workload, scenario.max_model_len)
    if len(workload):
        return []
    return [
        (
            f"all {workload.num_rejected} requests are longer than max_model_len {scenario.max_model_len} and were"
            " rejected; raise engine.max_model_len or set workload.too_long: truncate"
        )
    ]


def _run_problems(scenario) -> list[str]:
    """Why the simulated deployment cannot run: it does not fit, or its workload keeps no request."""
    from sim.memory import memory_breakdown
    from sim.memory_fit import fit_problems

    return fit_problems(scenario, memory_breakdown(scenario)) + _workload_problems(scenario)


def _refuse(scenario, problems: list[str]) -> None:
    if problems:
        raise PlannerError(f"{scenario.source}: cannot run: " + "; ".join(problems))


def _check_out(args) -> None:
    """--out must be writable before the run starts, not found unwritable after it."""
    from planner.results import check_out_dir

    if args.out is not None:
        check_out_dir(args.out)


def _emit(args, summary: dict, recorder, title: str, extra_lines: list[str] = (), plot_workers=None) -> None:
    from planner.results import summary_json, write_outputs

    if args.out:
        written = write_outputs(args.out, summary, recorder, title, plot_workers)
    if args.json:
        sys.stdout.write(summary_json(summary))
    else:
        from planner.report import summary_lines  # here: --json prints none of the text report

        print("\n".join([*summary_lines(summary), *extra_lines]))
        if args.out:
            print(f"\nwrote {', '.join(p.name for p in written)} to {args.out}")


def cmd_simulate(args) -> int:
    from planner.calibration.resolve import resolve_cost_model
    from planner.plot_workers import plot_workers_for

    scenario = _load(args)
    _refuse(scenario, _run_problems(scenario))
    if args.intervals is not None and args.intervals < 1:
        raise PlannerError(f"--intervals {args.intervals}: must be a number of runs >= 1")
    if args.all_steps and args.out is None:
        raise PlannerError("--all-steps: it says what steps.csv holds, and only --out DIR writes steps.csv")
    coefficients, provenance = resolve_cost_model(scenario, args.calibration)
    _check_out(args)
    plot_workers = plot_workers_for(scenario.workload.num_requests, args.out)  # importing while we run
    try:
        _simulate(args, scenario, coefficients, provenance, plot_workers)
    finally:
        if plot_workers is not None:
            plot_workers.close()  # a no-op once they have drawn; else (a failed run) they exit
    return 0


def _simulate(args, scenario, coefficients, provenance, plot_workers) -> None:
    from planner.results import StepsCsv, build_summary
    from sim.driver import simulate

    progress = Progress("simulating")
    steps_csv = StepsCsv(args.out / "steps.csv", args.all_steps) if args.out else None  # written as it runs
    result = simulate(
        scenario, coefficients, record_steps=args.out is not None, progress=progress, steps_sink=steps_csv
    )
    progress.close()
    wl = result.workload
    mean_prompt = float(wl.prompt_tokens.mean()) if len(wl) else 0.0
    summary = build_summary(
        "simulated",
        scenario,
        result.recorder,
        result.memory.to_dict(),
        wl.num_rejected,
        wl.num_truncated,
        {
            "floors": result.cost_model.floors(scenario, mean_prompt),
            "cost_model": result.cost_model.coefficients.to_dict(),
            "cost_model_provenance": provenance.to_dict(),
        },
    )
    extra_lines = []
    if args.intervals:
        from planner.calibration.intervals import interval_lines, simulate_intervals

        progress = Progress(f"{args.intervals} interval runs")
        summary["intervals"] = simulate_intervals(scenario, coefficients, provenance, args.intervals, progress)
        progress.close()
        extra_lines = interval_lines(summary["intervals"], provenance.label)
    title = f"{scenario.name} (simulated; cost model: {provenance.label})"
    _emit(args, summary, result.recorder, title, extra_lines, plot_workers)


def cmd_run(args) -> int:
    try:
        from gpu_engine.engine import EngineError, run_scenario
        from gpu_engine.runner import SamplingParams
    except ImportError as e:
        raise PlannerError(f"the live engine needs the engine extra (pip install 'planner[engine]'): {e}") from e
    from planner.results import build_summary

    if args.temperature < 0 or not 0 < args.top_p <= 1:
        raise PlannerError(
            f"--temperature {args.temperature} --top-p {args.top_p}: temperature must be >= 0 and top-p in (0, 1]"
        )
    scenario = _load(args)
    _refuse(scenario, _workload_problems(scenario))  # the fit is measured by the engine itself
    _check_out(args)
    progress = Progress(f"running on {args.device}")
    try:
        sampling = SamplingParams(args.temperature, args.top_p)
        result = run_scenario(scenario, args.device, args.model_path, sampling, progress)
    except EngineError as e:
        raise PlannerError(str(e)) from e
    finally:
        progress.close()
    wl = result.workload
    summary = build_summary(
        "measured", scenario, result.recorder, result.memory, wl.num_rejected, wl.num_truncated, result.extra
    )
    _emit(args, summary, result.recorder, f"{scenario.name} (measured on {result.extra['device_name']})")
    from planner.calibration.busy import busy_reasons

    reasons = busy_reasons(result.extra.get("cpu_share"), result.extra.get("other_cpu_load"))
    if reasons:
        print(
            f"planner: warning: a busy machine ({'; '.join(reasons)}): a CPU engine's steps slow down then, so"
            " these latencies measure the load too (run it again on a quieter machine to measure the engine)",
            file=sys.stderr,
        )
    return 0


def cmd_compare(args) -> int:
    from planner.report import compare_lines, compare_rows
    from planner.results import read_summary

    a, b = read_summary(args.a), read_summary(args.b)
    if args.json:
        print(json.dumps({"a": str(args.a), "b": str(args.b), "rows": compare_rows(a, b)}, indent=2))
    else:
        print("\n".join(compare_lines(a, b, args.a.name or str(args.a), args.b.name or str(args.b))))
    return 0


def cmd_calibrate(args) -> int:
    from planner.calibration.command import cmd_calibrate as calibrate

    return calibrate(args)


def cmd_size(args) -> int:
    from planner.sizing.cli import run_size

    return run_size(args)


COMMANDS = {
    "validate": cmd_validate,
    "catalog": cmd_catalog,
    "memory": cmd_memory,
    "simulate": cmd_simulate,
    "run": cmd_run,
    "compare": cmd_compare,
    "calibrate": cmd_calibrate,
    "size": cmd_size,
}

if __name__ == "__main__":
    sys.exit(main())
