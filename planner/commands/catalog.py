"""`planner catalog`: the GPU and model catalogs as tables or JSON, or one entry."""

from __future__ import annotations

import json

from planner.errors import PlannerError
from planner.scenario.rules import did_you_mean


def _catalog_entry(entry) -> dict:
    """A catalog entry as JSON data; models also carry their derived parameter count, GPUs their family."""
    from dataclasses import asdict

    from planner.catalog import gpu_family

    data = asdict(entry)
    if hasattr(entry, "num_params"):
        data["num_params"] = entry.num_params
    elif (family := gpu_family(entry.name)) is not None:
        data["family"] = asdict(family)
    return data


def cmd_catalog(args) -> int:
    from planner.catalog import load_gpu_catalog, load_model_catalog

    catalogs = {"gpu": load_gpu_catalog(), "model": load_model_catalog()}
    if args.name is not None:  # an empty name too: it names no entry, it does not ask for the list
        if args.kind is None:
            raise PlannerError(
                f"say which catalog: planner catalog gpu {args.name} or planner catalog model {args.name}"
            )
        entries = catalogs[args.kind]
        if args.name not in entries:
            hint = did_you_mean(args.name, list(entries))
            raise PlannerError(f"no {args.kind} named {args.name!r} in the catalog{hint}; known: {', '.join(entries)}")
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
        width = max(14, *(len(name) + 2 for name in catalogs["model"]))  # the longest name and a gap
        print(f"{'model':<{width}}{'params':>10}{'layers':>8}{'hidden':>8}{'heads':>7}{'kv heads':>10}{'vocab':>9}")
        for name, m in catalogs["model"].items():
            print(
                f"{name:<{width}}{params_text(m.num_params):>10}{m.num_hidden_layers:>8}{m.hidden_size:>8}"
                f"{m.num_attention_heads:>7}{m.num_key_value_heads:>10}{m.vocab_size:>9}"
            )
    return 0


def params_text(n: int) -> str:
    """A parameter count as the catalog table and the memory report print it: 7.72B, or 15.00M under a billion."""
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"
