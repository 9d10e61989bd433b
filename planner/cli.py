"""`planner`: the command line, parsed here and run by the command's module (planner/commands/, imported only then).
User errors print one message and exit 2; nothing else prints here."""

from __future__ import annotations

import argparse
import sys
from importlib import import_module
from pathlib import Path

from planner.errors import EXIT_USAGE, PlannerError, one_line
from sim.errors import WorkloadError


def _given(what: str, convert=str):
    """An argument's type that refuses an empty string: as a path it would silently mean the current folder
    (Path("") is "."), writing the outputs there (`--out ""`) or reading it as a file (`--calibration ""`)."""

    def check(value: str):
        if not value:
            raise argparse.ArgumentTypeError(f"'' is empty: give {what}")
        return convert(value)

    return check


_scenario_file = _given("a scenario file")
_folder = _given("a folder name (. for the current folder)", Path)
_profile_file = _given("the profile's file name (e.g. tiny.yaml)", Path)
_run_output = _given("a run's --out folder or its summary.json", Path)


def _scenario_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", type=_scenario_file, help="scenario YAML file")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario field, e.g. --set engine.max_num_seqs=64 (repeatable)",
    )


def _validate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", type=_scenario_file, metavar="FILE")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")


def _catalog_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", nargs="?", choices=["gpu", "model"])
    p.add_argument("name", nargs="?")
    p.add_argument("--json", action="store_true", help="print the entries as JSON")


def _memory_args(p: argparse.ArgumentParser) -> None:
    _scenario_args(p)
    p.add_argument("--json", action="store_true", help="print the breakdown as JSON")


def _simulate_args(p: argparse.ArgumentParser) -> None:
    _scenario_args(p)
    p.add_argument("--out", type=_folder, help="write summary.json, requests.csv, steps.csv and plots here")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument(
        "--all-steps",
        action="store_true",
        help="steps.csv: a row per step (default: runs of identical decode steps merged, num_steps each)",
    )
    p.add_argument(
        "--calibration",
        type=_given("a profile file or auto"),
        metavar="FILE|auto",
        help="the cost model's calibration profile (default: the scenario's `calibration` key, auto)",
    )
    p.add_argument(
        "--intervals",
        type=int,
        metavar="N",
        help="also run N workload seeds x coefficient draws: 90%% intervals and the probability of each SLO",
    )
    _scrape_arg(p)


def _scrape_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scrape-every",
        type=float,
        metavar="SECONDS",
        help="with --out: also write vllm_scrapes/, the engine's /metrics scraped every SECONDS of the run",
    )


def _run_args(p: argparse.ArgumentParser) -> None:
    _scenario_args(p)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--model-path", type=_folder, help="local HF safetensors directory (default: random weights)")
    p.add_argument(
        "--temperature", type=float, default=0.0, help="0 = greedy (default), else >= 0.01; sampling is seeded"
    )
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold in (0, 1]")
    p.add_argument("--out", type=_folder)
    p.add_argument("--json", action="store_true")
    _scrape_arg(p)


def _calibrate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="model, dtype and engine settings to calibrate")
    p.add_argument("--device", choices=["cpu", "cuda"], help="where the live engine runs the sweep")
    p.add_argument("--gpu", action="store_true", help="the same as --device cuda")
    p.add_argument("--model", help="catalog model for the built-in default scenario (no SCENARIO given)")
    p.add_argument("--budget-s", type=float, help="seconds for the step sweep (default: 45 on CPU, 240 on CUDA)")
    p.add_argument("--held-out-requests", type=int, help="requests per held-out scenario (default: 32 CPU, 200 CUDA)")
    p.add_argument(
        "--out", type=_profile_file, help="the profile file to write (default: in the user's profile folder)"
    )
    p.add_argument(
        "--from", dest="from_runs", nargs="+", type=_folder, metavar="RUN_DIR", help="fit `planner run` output folders"
    )
    p.add_argument(
        "--from-vllm",
        nargs="+",
        type=_given("a vLLM result or scrape file", Path),
        metavar="FILE",
        help="fit vLLM's own files: bench serve result JSONs, /metrics scrapes (or a folder of them)",
    )
    p.add_argument("--scenario", type=_scenario_file, help="with --from-vllm: the model, GPU and engine settings")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")


def _size_args(p: argparse.ArgumentParser) -> None:
    _scenario_args(p)
    p.add_argument("--out", type=_folder, help="write report.md, report.html, sizing.json and the figures here")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("--workers", type=int, help="worker processes (default: all cores)")
    p.add_argument(
        "--ray",
        type=_given("a Ray cluster's address (host:port, or auto)"),
        metavar="ADDRESS",
        help="run the candidates on this Ray cluster (needs the ray extra)",
    )
    p.add_argument(
        "--intervals",
        type=int,
        metavar="N",
        help="N workload seeds x coefficient draws for the recommendation and runner-ups: 90%% intervals",
    )


def _compare_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", type=_run_output, help="a run's output folder (or its summary.json)")
    p.add_argument("b", type=_run_output)
    p.add_argument("--json", action="store_true")


def _parser(argv: list[str]) -> argparse.ArgumentParser:
    """The command line's parser. A command named first gets only its own subparser (all eight cost ~1% of a
    short `planner simulate`); anything else (--help, a mistyped command) gets all of them, to list them."""
    parser = argparse.ArgumentParser(prog="planner", description="Capacity planner for LLM inference.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in [argv[0]] if argv and argv[0] in COMMANDS else COMMANDS:
        _module, _function, help_text, add_arguments = COMMANDS[name]
        add_arguments(sub.add_parser(name, help=help_text))
    return parser


# Every command's path arguments: argparse's dest -> (how a message names it, a folder the command opens files in).
# Checked before any command runs (planner.paths), so a path no file system can take is one message naming the
# argument, whatever the command.
PATH_ARGUMENTS = {
    "scenario": ("the scenario file", False),
    "files": ("the scenario file", False),
    "scenarios": ("the scenario file", False),
    "out": ("--out", True),  # calibrate's is the profile file (the names beside it are checked there)
    "calibration": ("--calibration", False),
    "from_runs": ("--from", True),
    "from_vllm": ("--from-vllm", False),
    "model_path": ("--model-path", True),
    "a": ("the first run", True),  # a run's folder, or its summary.json
    "b": ("the second run", True),
}


def _check_path_arguments(args: argparse.Namespace) -> None:
    from planner.paths import shown, too_long

    for dest, (label, folder) in PATH_ARGUMENTS.items():
        values = getattr(args, dest, None)
        for value in values if isinstance(values, list) else [values]:
            if value is None or (dest == "calibration" and value == "auto"):
                continue
            is_file = (dest == "out" and args.command == "calibrate") or str(value).endswith(".json")
            reason = too_long(value, folder=folder and not is_file)
            if reason is not None:
                if dest == "scenario" and args.command == "size":
                    label = "the sizing file"
                raise PlannerError(f"{label} {shown(str(value))}: {reason}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser(argv).parse_args(argv)
    try:
        _check_path_arguments(args)
        module, function, _help, _arguments = COMMANDS[args.command]
        return getattr(import_module(module), function)(args)
    except (PlannerError, WorkloadError) as e:  # WorkloadError: a trace file that cannot supply the requests
        print(f"planner: error: {one_line(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader (head, less) went away: not an error of ours
        sys.stderr.close()
        return 0
    finally:
        from planner.outputs.out_lock import release_out_dirs

        release_out_dirs()  # the command's --out is written (or abandoned): another process may write there now


# command -> (module, function, help, its arguments): a command's module is imported only when it runs (the CLI
# starts fast)
COMMANDS = {
    "validate": ("planner.commands.validate", "cmd_validate", "check scenario files", _validate_args),
    "catalog": (
        "planner.commands.catalog", "cmd_catalog", "list the GPU and model catalogs, or show one entry", _catalog_args
    ),
    "memory": (
        "planner.commands.memory", "cmd_memory", "the memory model: weights, activations, KV blocks", _memory_args
    ),
    "simulate": (
        "planner.commands.simulate", "cmd_simulate", "predict throughput and latency with the simulator",
        _simulate_args,
    ),
    "run": (
        "planner.commands.run", "cmd_run", "run the scenario on the live engine (needs the engine extra)", _run_args
    ),
    "calibrate": (
        "planner.calibration.command", "cmd_calibrate",
        "fit the simulator's cost model to the engine at hand, then validate it", _calibrate_args,
    ),
    "size": ("planner.sizing.cli", "run_size", "the cheapest hardware and engine settings that meet the SLOs", _size_args),
    "compare": ("planner.commands.compare", "cmd_compare", "two runs' summaries side by side", _compare_args),
}  # fmt: skip

if __name__ == "__main__":
    sys.exit(main())
