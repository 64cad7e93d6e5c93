"""A token bucket per client key: `rps` tokens a second, up to `burst` saved up."""

from __future__ import annotations

from tokenrace.gateway.config import RateLimitConfig


class TokenBucket:
    __slots__ = ("rate", "capacity", "tokens", "stamp")

    def __init__(self, config: RateLimitConfig, now: float) -> None:
        self.rate = config.rps
        self.capacity = float(config.capacity)
        self.tokens = self.capacity
        self.stamp = now

    def take(self, now: float) -> float | None:
        """Take one token. Returns None when allowed, else the seconds until one is available."""
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) / self.rate
