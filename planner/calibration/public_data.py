"""The public operator timings the shipped profiles are fitted to: Vidur's profiling data (microsoft/vidur,
`data/profiling/`, MIT licence), reduced to a compact copy that ships in the package.

Vidur measured, with its torch-profiler tracer (the GPU kernels' durations under each operator, summed: whole
microseconds, no host launch gaps) on one transformer layer, the time of the linear layers, norms, rotary embedding, activation and residual add against the number of tokens in the batch and
the tensor-parallel degree, on A100-80GB, A40 and H100; and NCCL all-reduce against the message size.
`derive` keeps the median of each operator on a geometric grid of batch sizes (the fit needs the shape of
the curve, not every multiple of 8) and the in-node all-reduce medians in half-octave bins of size, merged
below a few MB until each bin pools MIN_SIZES_PER_BIN measured sizes (why: `ALL_REDUCE_NOISE`):
`python -m planner.calibration.public_data /path/to/vidur` rewrites `planner/calibrations/vidur/*.csv`.
Attention is not in these files (Vidur keeps its attention profiles outside its git history).
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from planner.calibration.shipped import DATA_DIR
from sim.config import GpuSpec

OPERATORS_CSV = DATA_DIR / "operators.csv"
ALL_REDUCE_CSV = DATA_DIR / "all_reduce.csv"

# Vidur's folder names -> our catalog's GPU names. Vidur's H100 sits in DGX H100 nodes (its network
# profiles say so): the SXM part.
GPU_NAMES = {"a100": "a100-80gb", "a40": "a40", "h100": "h100-sxm"}

# Layers per model (the models' config.json num_hidden_layers): Vidur's rows are per layer.
NUM_LAYERS = {
    "Qwen-72B": 80,
    "CodeLlama-34b-Instruct-hf": 48,
    "internlm-20b": 60,
    "Llama-2-70b-hf": 80,
    "Llama-2-7b-hf": 32,
    "Meta-Llama-3-70B": 80,
    "Meta-Llama-3-8B": 32,
    "phi-2": 32,
}

# One transformer layer's operators, in order; `emb` (the embedding gather) runs once per step.
LAYER_OPERATORS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)
LINEAR_OPERATORS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
SHAPE_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp")

TOKEN_GRID = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
SIZE_GRID_PER_OCTAVE = 2
# ALL_REDUCE_NOISE: why the all-reduce bins pool many sizes. Vidur times an all-reduce as the NCCL kernel's
# duration on rank 0 (Kineto; vidur/profiling/collectives/collectives_wrapper.py: 11 eager
# torch.distributed.all_reduce calls back to back, median kernel, 3 runs per size). An NCCL kernel starts
# when its own rank launches it and ends when every peer's data has arrived, so it spins while a later
# peer is still launching (NVIDIA/nccl#1025, NVIDIA/nccl-tests#330: the rank that launches first shows the
# longer kernel). Back-to-back eager launches are host-bound below a few MB, so each run lands in one of
# two states: rank 0 launched last (the all-reduce itself) or first (plus up to one launch interval of
# waiting, a ceiling that is the same at 2, 4 and 8 GPUs of a node: the host, not the link). Which state
# a run lands in does not depend on the size: the runs of ONE size differ by up to its median, and
# neighbouring sizes jump between the states. Above ~4 MB the kernel outlasts the launch interval and the
# runs agree within a few percent. One size's median is therefore a coin toss between the states, not a
# property of that size; a bin of MIN_SIZES_PER_BIN sizes (48 runs) has a median that is. The figures:
# `python -m planner.fidelity`, "All-reduce" (from the p10/p90/run_spread columns written here).
MIN_SIZES_PER_BIN = 16
# Setups whose all-reduce the profiles use: every worker in one NVSwitch node, as vLLM's tensor parallel.
ALL_REDUCE_SETUPS = {"a100-80gb": "a100_dgx", "h100-sxm": "h100_dgx"}


@dataclass(frozen=True)
class OperatorRow:
    """One (GPU, model, tensor-parallel degree, batch size): median milliseconds per operator."""

    gpu: str
    model: str
    tensor_parallel_size: int
    num_tokens: int
    num_layers: int
    n_head: int
    n_kv_head: int
    n_embd: int
    n_expanded_embd: int
    vocab_size: int
    use_gated_mlp: bool
    ms: dict[str, float]  # operator -> median ms (LAYER_OPERATORS and "emb")

    @property
    def layer_ms(self) -> float:
        return sum(self.ms[op] for op in LAYER_OPERATORS)

    @property
    def linear_ms(self) -> float:
        return sum(self.ms[op] for op in LINEAR_OPERATORS)


@dataclass(frozen=True)
class AllReduceRow:
    setup: str
    num_workers: int
    size_bytes: int
    ms: float  # median over the bin's sizes of each size's median
    num_sizes: int = 1  # measured sizes pooled in the bin
    p10_ms: float = float("nan")  # spread of the pooled sizes' medians
    p90_ms: float = float("nan")
    run_spread: float = float("nan")  # median over the pooled sizes of (max - min) / median of their runs
    fastest_p10_ms: float = float("nan")  # 10th percentile over the pooled sizes of each size's fastest run


def gpu_spec(name: str) -> GpuSpec:
    """The spec sheet of a profiled GPU, from the catalog."""
    from planner.catalog import catalog_gpu

    return catalog_gpu(name)


def derive(vidur_dir: Path, out_dir: Path = DATA_DIR) -> tuple[int, int]:
    """Write the compact operators.csv and all_reduce.csv from Vidur's `data/profiling` folder."""
    import shutil
    import statistics  # 20 ms of imports: only here, never at the CLI's start-up

    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(vidur_dir / "LICENSE", out_dir / "LICENSE")  # MIT: the notice travels with the data
    ops = ("emb", *LAYER_OPERATORS)
    header = ["gpu", "model", "tensor_parallel_size", "num_tokens", "num_layers", *SHAPE_COLUMNS, *ops]
    out_rows = []
    for path in sorted((vidur_dir / "compute").glob("*/*/*/mlp.csv")):
        gpu, model = GPU_NAMES[path.parts[-4]], path.parts[-2]
        groups: dict[tuple[int, int], list[dict]] = defaultdict(list)
        with path.open(newline="") as f:
            for r in csv.DictReader(f):
                groups[int(r["num_tensor_parallel_workers"]), int(r["num_tokens"])].append(r)
        for (tp, tokens), rs in sorted(groups.items()):
            if tokens not in TOKEN_GRID:
                continue
            shape = [rs[0][c] for c in SHAPE_COLUMNS]
            # Repeated measurements of the same point: the median of their medians. An operator the model
            # does not have (phi-2's parallel block has no post-attention norm) takes 0 ms.
            medians = [
                statistics.median(float(r[f"time_stats.{op}.median"]) for r in rs)
                if f"time_stats.{op}.median" in rs[0]
                else 0.0
                for op in ops
            ]
            out_rows.append([gpu, model, tp, tokens, NUM_LAYERS[model], *shape, *(f"{m:.6g}" for m in medians)])
    with (out_dir / "operators.csv").open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(out_rows)

    ar_rows = []
    for path in sorted((vidur_dir / "network").glob("*/all_reduce.csv")):
        setup = path.parts[-2]
        by_point: dict[tuple[int, int], list[tuple[float, float, float]]] = defaultdict(list)
        with path.open(newline="") as f:
            for r in csv.DictReader(f):
                if int(r["devices_per_node"]) != int(r["num_workers"]):
                    continue  # across nodes: not how one engine's tensor parallel runs
                stat = {k: float(r[f"time_stats.all_reduce.{k}"]) for k in ("median", "min", "max")}
                by_point[int(r["num_workers"]), int(r["size"])].append(
                    (stat["median"], (stat["max"] - stat["min"]) / stat["median"], stat["min"])
                )
        for workers in sorted({w for w, _ in by_point}):
            for points in _all_reduce_bins(sorted((s, p) for (w, s), p in by_point.items() if w == workers)):
                medians = [m for _, stats in points for m, _, _ in stats]
                size = int(statistics.median_low(s for s, stats in points for _ in stats))
                deciles = statistics.quantiles(medians, n=10) if len(medians) > 1 else medians * 9
                spread = statistics.median(sp for _, stats in points for _, sp, _ in stats)
                # each size's fastest run: the low state where any of its runs landed in it (ALL_REDUCE_NOISE)
                fastest = [min(f for _, _, f in stats) for _, stats in points]
                fastest_p10 = statistics.quantiles(fastest, n=10)[0] if len(fastest) > 1 else fastest[0]
                ar_rows.append(
                    [setup, workers, size, f"{statistics.median(medians):.6g}", len(points)]
                    + [f"{deciles[0]:.6g}", f"{deciles[-1]:.6g}", f"{spread:.3g}", f"{fastest_p10:.6g}"]
                )
    with (out_dir / "all_reduce.csv").open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(
            [
                "setup",
                "num_workers",
                "size_bytes",
                "median_ms",
                "num_sizes",
                "p10_ms",
                "p90_ms",
                "run_spread",
                "fastest_p10_ms",
            ]
        )
        w.writerows(ar_rows)
    return len(out_rows), len(ar_rows)


def _all_reduce_bins(points: list[tuple[int, list]]) -> list[list[tuple[int, list]]]:
    """(size, stats) points sorted by size, grouped into half-octave bins of size; from the smallest size up,
    a bin with fewer than MIN_SIZES_PER_BIN sizes takes in the next bin (ALL_REDUCE_NOISE), and a short
    remainder at the top joins the last bin."""
    smallest = points[0][0]
    half_octaves: dict[int, list] = defaultdict(list)
    for size, stats in points:
        half_octaves[round(SIZE_GRID_PER_OCTAVE * math.log2(size / smallest))].append((size, stats))
    bins: list[list] = []
    current: list = []
    for k in sorted(half_octaves):
        current += half_octaves[k]
        if len(current) >= MIN_SIZES_PER_BIN:
            bins.append(current)
            current = []
    if current:
        if bins:
            bins[-1] += current
        else:
            bins.append(current)
    return bins


def load_operators(path: Path = OPERATORS_CSV) -> list[OperatorRow]:
    rows = []
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            rows.append(
                OperatorRow(
                    gpu=r["gpu"],
                    model=r["model"],
                    tensor_parallel_size=int(r["tensor_parallel_size"]),
                    num_tokens=int(r["num_tokens"]),
                    num_layers=int(r["num_layers"]),
                    **{c: int(r[c]) for c in SHAPE_COLUMNS if c != "use_gated_mlp"},
                    use_gated_mlp=r["use_gated_mlp"] == "True",
                    ms={op: float(r[op]) for op in ("emb", *LAYER_OPERATORS)},
                )
            )
    return rows


def load_all_reduce(path: Path = ALL_REDUCE_CSV) -> list[AllReduceRow]:
    with path.open(newline="") as f:
        return [
            AllReduceRow(
                r["setup"],
                int(r["num_workers"]),
                int(r["size_bytes"]),
                float(r["median_ms"]),
                int(r.get("num_sizes") or 1),
                *(float(r.get(k) or "nan") for k in ("p10_ms", "p90_ms", "run_spread", "fastest_p10_ms")),
            )
            for r in csv.DictReader(f)
        ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vidur_dir", type=Path, help="Vidur's data/profiling folder (compute/, network/)")
    args = parser.parse_args(argv)
    n_ops, n_ar = derive(args.vidur_dir)
    print(f"wrote {n_ops} operator rows and {n_ar} all-reduce rows to {DATA_DIR}")


if __name__ == "__main__":
    main()
