"""The seeded workload: when each request arrives and how long its prompt and its reply are.

The simulator and the live engine build their requests from the same `Workload`, so a prediction and a
measurement see identical requests. Each source of randomness has its own stream, a child of
`SeedSequence(cfg.seed)`, so changing one distribution never changes another's draws.

Decisions a user can see:
- poisson / gamma arrivals follow vLLM's `bench serve` (vllm/benchmarks/serve.py, `get_request`): gaps
  ~ Gamma(shape=burstiness, scale=1/(rate*burstiness)) (poisson: shape 1), arrival i = gap_0 + ... + gap_i
  (the first request arrives after one gap, not at 0), then all arrivals are rescaled so the last one
  lands at num_requests/rate; the mean rate is exact and the shape of the process unchanged.
- constant arrivals: i/rate, the first at 0. trace arrivals: the trace's column, shifted to start at 0;
  with `rate` set, rescaled so the mean gap is 1/rate.
- Rates are of offered load: requests rejected as too long are dropped after arrival times are drawn, so
  the survivors keep their times (as a server answering an error to the others would see them).
- Traces are replayed from row 0 in order (arrival order when the arrival column is read); past the
  last row they wrap around, trace arrivals shifted by one period (span + one mean gap) per wrap.
- A trace's prompt block ids (workload.trace.block_ids_column) are each request's prefix identity: the trace's
  block of `block_tokens` tokens with id h holds the same tokens in every request that has it, so requests share
  exactly the prefixes the trace says (Request.block_content_key maps the engine's blocks onto them). A wrapped
  replay's ids are shifted past every id of the file per wrap: a second pass sends new prompts, not the first
  pass's again.
A trace file's columns are read and checked by sim/trace_file.py, its block ids by sim/trace_blocks.py.
"""

from __future__ import annotations

import numpy as np

from sim.config import ArrivalConfig, TraceConfig, WorkloadConfig
from sim.errors import WorkloadError
from sim.request import Request
from sim.sessions import session_workload
from sim.trace_blocks import read_block_ids
from sim.trace_file import read_trace
from sim.workload_draws import (
    _PREFIX_IDS,
    _REQUEST_IDS,
    _TRACE_BLOCK_IDS,
    ARRIVAL_STREAM,
    NUM_STREAMS,
    OUTPUT_STREAM,
    PROMPT_STREAM,
    TOKEN_STREAM,
    TRACE_ROW_STREAM,
    Clipped,
    Workload,
    draw_lengths,
    read_only,
)


def generate_workload(cfg: WorkloadConfig, max_model_len: int, vocab_size: int | None = None) -> Workload:
    """Draw `cfg.num_requests` requests; the same config and seed give identical arrays.

    Lengths are rounded to int and clipped to their distribution's [min, max] (a negative draw of
    `normal` becomes min; trace counts are checked by `read_trace` and never negative). A request with
    prompt + output > max_model_len is, by `cfg.too_long`:
    - reject: dropped, no replacement drawn (counted in num_rejected; the workload holds fewer requests).
      A replacement would quietly condition the length distribution on fitting; a real server answers
      such requests with an error, and the report shows how many there were.
    - truncate: its prompt is cut to max_model_len - output, the output kept (counted in num_truncated);
      an output that alone leaves no room for a one-token prompt is clipped to max_model_len - 1.
    Shared prefixes (cfg.shared_prefix) are part of the drawn prompt, never added to it: consecutive
    groups of `group_size` surviving requests share their first min(tokens, prompt length) tokens.
    `vocab_size` is only recorded, as the default of `prompt_token_ids`.
    """
    if cfg.sessions is not None:
        return session_workload(cfg, max_model_len, vocab_size)
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(cfg.seed).spawn(NUM_STREAMS)]
    n = cfg.num_requests
    trace = _trace_columns(cfg)
    rows = _trace_rows(cfg.trace, trace, n, rngs[TRACE_ROW_STREAM]) if trace else None
    arrival_s = _arrivals(cfg.arrival, n, rngs[ARRIVAL_STREAM], trace.get("arrival"), cfg.trace)
    prompt, prompt_clip = draw_lengths(cfg.prompt_tokens, n, rngs[PROMPT_STREAM], trace.get("prompt"), rows)
    output, output_clip = draw_lengths(cfg.output_tokens, n, rngs[OUTPUT_STREAM], trace.get("output"), rows)
    clipped = tuple(
        Clipped(name, *clip)
        for name, clip in (("prompt_tokens", prompt_clip), ("output_tokens", output_clip))
        if clip is not None
    )

    positions = np.arange(n)  # the requests kept: their positions in the replay
    too_long = prompt + output > max_model_len
    num_too_long = int(too_long.sum())
    if cfg.too_long == "reject":
        keep = ~too_long
        prompt, output = prompt[keep], output[keep]
        arrival_s = None if arrival_s is None else arrival_s[keep]
        positions = positions[keep]
    else:
        output = np.minimum(output, max_model_len - 1)
        prompt = np.minimum(prompt, max_model_len - output)

    if cfg.shared_prefix is None:
        prefix_group, prefix_tokens = np.full(len(prompt), -1, np.int64), np.zeros(len(prompt), np.int64)
    else:
        prefix_group = np.arange(len(prompt), dtype=np.int64) // cfg.shared_prefix.group_size
        prefix_tokens = np.minimum(prompt, cfg.shared_prefix.tokens)
    block_ids = (
        _request_block_ids(trace["blocks"], positions, prompt, cfg.trace.block_tokens) if "blocks" in trace else None
    )
    return Workload(
        arrival_s=read_only(arrival_s),
        prompt_tokens=read_only(prompt),
        output_tokens=read_only(output),
        prefix_group=read_only(prefix_group),
        prefix_tokens=read_only(prefix_tokens),
        num_rejected=num_too_long if cfg.too_long == "reject" else 0,
        num_truncated=num_too_long if cfg.too_long == "truncate" else 0,
        seed=cfg.seed,
        vocab_size=vocab_size,
        concurrency=cfg.arrival.concurrency,
        think_time_s=cfg.arrival.think_time_s,
        clipped=clipped,
        block_ids=block_ids,
        block_tokens=cfg.trace.block_tokens if block_ids is not None else 0,
    )


def prompt_token_ids(
    workload: Workload, index: int, vocab_size: int | None = None, seed: int | None = None
) -> list[int]:
    """Random token ids in [0, vocab_size) for request `index`'s prompt (the live engine's input).

    The shared-prefix part comes from (seed, prefix group), the rest from (seed, index), so the requests
    of one group really begin with the same tokens and every id depends on nothing else. vocab_size and
    seed default to the ones the workload was generated with.
    """
    vocab_size = vocab_size or workload.vocab_size
    if vocab_size is None:
        raise ValueError("prompt_token_ids needs a vocab_size (none was given to generate_workload)")
    seed = workload.seed if seed is None else seed
    if workload.block_ids is not None:
        return _trace_token_ids(workload, index, vocab_size, seed)
    num_prefix = int(workload.prefix_tokens[index])
    num_rest = int(workload.prompt_tokens[index]) - num_prefix
    rest = _token_rng(seed, _REQUEST_IDS, int(index)).integers(0, vocab_size, num_rest)
    if num_prefix == 0:
        return rest.tolist()
    prefix = _token_rng(seed, _PREFIX_IDS, int(workload.prefix_group[index])).integers(0, vocab_size, num_prefix)
    return prefix.tolist() + rest.tolist()


def _trace_columns(cfg: WorkloadConfig) -> dict[str, np.ndarray]:
    """The trace columns this config draws from, by role (arrival, prompt, output), rows in arrival
    order when the arrival column is among them. Only those are read: a trace may lack the others."""
    trace = cfg.trace
    kinds = {"arrival": cfg.arrival.process, "prompt": cfg.prompt_tokens.dist, "output": cfg.output_tokens.dist}
    roles = [role for role, kind in kinds.items() if kind == "trace"]
    if not roles:
        return {}
    if trace is None or ("arrival" in roles and trace.arrival_column is None):
        raise WorkloadError("a 'trace' arrival process or length needs workload.trace (with an arrival_column)")
    names = {"arrival": trace.arrival_column, "prompt": trace.prompt_column, "output": trace.output_column}
    table = read_trace(trace.path, [names[role] for role in roles], names["arrival"] if "arrival" in roles else None)
    columns = {role: table[names[role]] for role in roles}
    if len(columns[roles[0]]) == 0:
        raise WorkloadError(f"trace file {trace.path} has no rows")
    if trace.arrival_unit == "ms" and "arrival" in columns:
        columns["arrival"] = columns["arrival"] / 1000.0
    if trace.block_ids_column is not None:
        blocks = read_block_ids(trace.path, trace.block_ids_column, trace.prompt_column, trace.block_tokens)
        columns["blocks"] = np.empty(len(blocks), dtype=object)
        columns["blocks"][:] = blocks
    if "arrival" in columns:
        order = np.argsort(columns["arrival"], kind="stable")
        columns = {role: values[order] for role, values in columns.items()}
    return columns


def _request_block_ids(
    rows_ids: np.ndarray, positions: np.ndarray, prompt: np.ndarray, block_tokens: int
) -> tuple[tuple[int, ...], ...]:
    """Each request's block ids: its row's (the replay's position modulo the rows), cut to its prompt (a truncated
    one holds fewer blocks), shifted by (largest id + 1) per wrap of the replay, so that a second pass through the
    file shares nothing with the first."""
    num_rows = len(rows_ids)
    stride = 1 + max((max(ids) for ids in rows_ids if ids), default=0)
    out = []
    for position, num_prompt in zip(positions.tolist(), prompt.tolist(), strict=True):
        ids = rows_ids[position % num_rows][: -(-num_prompt // block_tokens)]
        shift = (position // num_rows) * stride
        out.append(tuple(i + shift for i in ids) if shift else ids)
    return tuple(out)


def _trace_token_ids(workload: Workload, index: int, vocab_size: int, seed: int) -> list[int]:
    """A trace request's prompt: each block id's block_tokens tokens drawn from (seed, id), so every request with
    that id holds the same tokens there; the prompt's tokens past its ids from (seed, index)."""
    num_prompt, size = int(workload.prompt_tokens[index]), workload.block_tokens
    ids = workload.block_ids[index]
    tokens = [t for i in ids for t in _token_rng(seed, _TRACE_BLOCK_IDS, i).integers(0, vocab_size, size).tolist()]
    rest = max(num_prompt - len(tokens), 0)
    return tokens[:num_prompt] + _token_rng(seed, _REQUEST_IDS, int(index)).integers(0, vocab_size, rest).tolist()


def _trace_rows(trace: TraceConfig, columns: dict[str, np.ndarray], n: int, rng: np.random.Generator) -> np.ndarray:
    num_rows = len(next(iter(columns.values())))
    if trace.row_order == "sample":
        return rng.integers(0, num_rows, n)
    return np.arange(n) % num_rows


def _arrivals(
    arrival: ArrivalConfig, n: int, rng: np.random.Generator, trace_s: np.ndarray | None, trace: TraceConfig | None
) -> np.ndarray | None:
    process = arrival.process
    if process == "closed":
        return None
    if process == "constant":
        return np.arange(n) / arrival.rate
    if process in ("poisson", "gamma"):
        shape = 1.0 if process == "poisson" else arrival.burstiness
        arrival_s = np.cumsum(rng.gamma(shape, 1.0 / (arrival.rate * shape), n))
        if not arrival_s[-1] > 0:  # a tiny shape: every gap underflowed to 0, one burst (the rescale's limit)
            return np.full(n, n / arrival.rate)
        return arrival_s * (n / arrival.rate / arrival_s[-1])  # vLLM's rescale: the last lands at n/rate
    if process == "trace":
        arrival_s = _replay_arrivals(trace_s, n, arrival.rate)
        if arrival.rate is not None and n > 1 and not arrival_s[-1] > 0:
            raise WorkloadError(
                f"workload.arrival.rate = {arrival.rate:g}: every arrival of trace file {trace.path} is at the same"
                " time (one row, or one time in every row): there are no gaps to scale to a rate; leave rate out"
                " to replay them as one burst"
            )
        return arrival_s
    raise ValueError(f"unknown arrival process {process!r}")


def _replay_arrivals(trace_s: np.ndarray, n: int, rate: float | None) -> np.ndarray:
    trace_s = trace_s - trace_s[0]
    num_rows = len(trace_s)
    period_s = trace_s[-1] * num_rows / (num_rows - 1) if num_rows > 1 else 0.0  # span + one mean gap
    i = np.arange(n)
    arrival_s = trace_s[i % num_rows] + (i // num_rows) * period_s
    if rate is not None and arrival_s[-1] > 0:
        arrival_s *= (n - 1) / (rate * arrival_s[-1])  # mean gap = 1/rate
    return arrival_s


def _token_rng(seed: int, kind: int, i: int) -> np.random.Generator:
    # The same as SeedSequence(seed).spawn(...)[TOKEN_STREAM].spawn(...)[kind].spawn(...)[i], in O(1).
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(TOKEN_STREAM, kind, i)))


def all_prompt_token_ids(workload: Workload) -> list[list[int]]:
    """Every request's prompt token ids (prompt_token_ids), for a live run to draw before it starts: a server
    receives its prompts tokenized (vLLM's API server tokenizes, in another process), so drawing them is no
    part of the engine's steps, and drawn in the loop they cost a step with a new request a few hundred
    microseconds on a CPU that the simulator does not price."""
    return [prompt_token_ids(workload, index) for index in range(len(workload))]


def make_request(workload: Workload, index: int, arrival_s: float, with_token_ids: bool | list[int] = False) -> Request:
    """Request `index` of the workload, arriving at arrival_s; the live engine also needs its token ids:
    `with_token_ids` True draws them, a list gives them (all_prompt_token_ids)."""
    if with_token_ids is True:
        with_token_ids = prompt_token_ids(workload, index)
    return Request(
        request_id=index,
        arrival_s=arrival_s,
        num_prompt_tokens=int(workload.prompt_tokens[index]),
        max_output_tokens=int(workload.output_tokens[index]),
        prompt_token_ids=list(with_token_ids) if with_token_ids else None,
        prefix_group=int(workload.prefix_group[index]),
        prefix_tokens=int(workload.prefix_tokens[index]),
        trace_block_ids=() if workload.block_ids is None else workload.block_ids[index],
        trace_block_tokens=workload.block_tokens,
    )
