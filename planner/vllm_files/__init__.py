"""vLLM's own result files, both ways: `vllm bench serve --save-result --save-detailed` JSON and the server's
Prometheus `/metrics` text (writers for `planner run`/`simulate --out`, readers for `calibrate --from-vllm`)."""
