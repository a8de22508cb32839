"""Retry timing: pure functions of their inputs."""

from __future__ import annotations

import random

# The delay is drawn from [(1 - JITTER) * d, d]: retries of a burst spread out, and no retry
# ever comes later than the documented formula.
JITTER = 0.2


def retry_delay_s(attempt: int, backoff_s: float, max_backoff_s: float, *, rng: random.Random | None = None) -> float:
    """min(max_backoff, backoff * 2^(attempt-1)), less up to 20% jitter. ``attempt`` counts from 1."""
    if attempt < 1:
        raise ValueError("attempt counts from 1")
    nominal = min(max_backoff_s, backoff_s * 2.0 ** min(attempt - 1, 62))  # 2.0: powers of two are exact floats
    u = (rng or random).random()
    return nominal * (1 - JITTER * u)
