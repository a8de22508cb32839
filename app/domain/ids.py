"""Random (version 4) UUIDs for new jobs, drawn from a pool of OS randomness.

``uuid.uuid4()`` reads 16 bytes with one ``os.urandom`` system call per id: on the submit path of a
1,000-job batch that call was 6 % of the API's CPU (py-spy; docs/performance.md, "Submit").
Here one call fills 256 ids' worth; the bytes are the same CSPRNG's. A forked child starts with an
empty pool, so two processes never hand out the same bytes.
"""

from __future__ import annotations

import os
from uuid import UUID

_IDS_PER_READ = 256
_pool = b""
_offset = 0


def _forget_pool() -> None:
    global _pool, _offset
    _pool, _offset = b"", 0


os.register_at_fork(after_in_child=_forget_pool)


def random_uuid() -> UUID:
    """A version-4 UUID, as ``uuid.uuid4()`` makes one."""
    global _pool, _offset  # noqa: PLW0603 - a per-process pool of random bytes, the hot path of every id
    if _offset >= len(_pool):
        _pool, _offset = os.urandom(16 * _IDS_PER_READ), 0
    chunk = _pool[_offset : _offset + 16]
    _offset += 16
    return UUID(bytes=chunk, version=4)
