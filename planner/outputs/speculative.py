"""The terminal's line for speculative decoding: what vLLM's SpecDecodingLogging prints (mean acceptance length,
per-position acceptance rate, average draft acceptance rate) and the planner's time shares."""

from __future__ import annotations


def spec_decode_line(d: dict) -> str:
    per_pos = ", ".join(f"{rate:.3f}" for rate in d["acceptance_rate_per_pos"])
    return (
        f"Speculative decoding ({d['method']}, k = {d['num_speculative_tokens']}): mean acceptance length"
        f" {d['mean_acceptance_length']:.2f}, per-position acceptance rate {per_pos}, avg draft acceptance rate"
        f" {d['draft_acceptance_rate'] * 100:.1f}%; drafting {d['draft_time_share'] * 100:.1f}% of the step time,"
        f" verifying {d['verify_time_share'] * 100:.1f}% (acceptance: {d['acceptance_source']})"
    )
