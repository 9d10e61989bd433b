"""What the prefix cache saved: prompt tokens looked up at admission and those found computed (vLLM's
PrefixCacheStats, vllm/v1/metrics/stats.py: `queries` and `hits` in tokens, whose ratio its logger prints as the
prefix cache hit rate; here counted once per request, at its first admission, as vLLM's `num_cached_tokens`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PrefixCacheCounts:
    """Tokens over every replica's first admissions (a preempted request's return is not counted again)."""

    num_requests: int = 0
    queried_tokens: int = 0  # the prompts' tokens at admission
    hit_tokens: int = 0  # of those, found in the GPU prefix cache

    def admitted(self, num_tokens: int, num_hit_tokens: int) -> None:
        self.num_requests += 1
        self.queried_tokens += num_tokens
        self.hit_tokens += num_hit_tokens

    def to_dict(self) -> dict:
        rate = self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0
        return {
            "num_requests": self.num_requests,
            "queried_tokens": self.queried_tokens,
            "hit_tokens": self.hit_tokens,
            "hit_rate": rate,
        }


def prefix_cache_line(d: dict) -> str:
    return (
        f"Prefix cache: {d['hit_rate'] * 100:.1f}% of prompt tokens found computed"
        f" ({d['hit_tokens']:,} of {d['queried_tokens']:,} over {d['num_requests']:,} admissions)"
    )
