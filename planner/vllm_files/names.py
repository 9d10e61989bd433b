"""vLLM's metric names and histogram bucket boundaries, as its Prometheus logger declares them
(vllm/v1/metrics/loggers.py, `PrometheusStatLogger.__init__`), and the keys of a bench-serve result
(vllm/benchmarks/serve.py: `benchmark()`'s result and `main`'s result_json; the per-request lists are dropped
without --save-detailed).

The readers do not require these exact boundaries (they changed between vLLM versions); the writers use them so
that a dashboard or tool built for vLLM reads our files the same way."""

from __future__ import annotations

TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
# vllm:inter_token_latency_seconds and vllm:request_time_per_output_token_seconds share these
ITL_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
# request_latency_buckets: e2e, queue, inference, prefill and decode time per request
REQUEST_LATENCY_BUCKETS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
)  # fmt: skip

TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"  # every gap between two tokens of a request
TPOT = "vllm:request_time_per_output_token_seconds"  # one per request: its mean gap
E2E = "vllm:e2e_request_latency_seconds"
QUEUE = "vllm:request_queue_time_seconds"
INFERENCE = "vllm:request_inference_time_seconds"
PREFILL = "vllm:request_prefill_time_seconds"
DECODE = "vllm:request_decode_time_seconds"
PROMPT_TOKENS = "vllm:request_prompt_tokens"
GENERATION_TOKENS = "vllm:request_generation_tokens"
CACHE_CONFIG_INFO = "vllm:cache_config_info"
START_TIME = "process_start_time_seconds"  # prometheus_client's process collector: when the server started
RUNNING, WAITING, KV_USAGE = "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"

# What makes a JSON a bench-serve result (its summary keys) and its per-request lists (--save-detailed).
BENCH_SUMMARY_KEYS = ("duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput")
BENCH_DETAILED_KEYS = ("input_lens", "output_lens", "ttfts", "itls")
BENCH_STATS = ("ttft", "tpot", "itl", "e2el")
BENCH_PERCENTILES = (50, 90, 99)


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to max_value: vLLM's token-count buckets (loggers.py, build_1_2_5_buckets)."""
    out, scale = [], 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_value:
                return out
            out.append(mantissa * scale)
        scale *= 10
