"""The one stable mapping from job to logical scheduler shard."""

from __future__ import annotations

import zlib
from datetime import datetime
from uuid import UUID

SHARD_COUNT = 256


def shard_of(job_id: UUID) -> int:
    """crc32 of the UUID's bytes mod 256: stable across processes, versions and languages."""
    return zlib.crc32(job_id.bytes) % SHARD_COUNT


def due_minute(at: datetime) -> datetime:
    """The minute bucket of due_index: one scheduler reads a shard's minute as one range scan."""
    return at.replace(second=0, microsecond=0)
