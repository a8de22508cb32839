"""Array parameters: every statement over arrays (``unnest``) takes PostgreSQL array literals built here.

``CAST(:x AS UUID[])`` parses the literal on the server, PostgreSQL and CockroachDB alike. It is
exactly the text psycopg would send for a list, built in a fraction of the time: psycopg's generic
list dumper was the largest CPU cost of a dispatch batch.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any


def plain(values: Iterable[Any]) -> str:
    """Array literal of values whose text form needs no quoting: ints, floats, bools, UUIDs, datetimes."""
    return "{" + ",".join("NULL" if v is None else v.isoformat() if isinstance(v, datetime) else str(v)
                          for v in values) + "}"


def texts(values: Iterable[str | None]) -> str:
    """Array literal of strings (quoted and escaped) or NULLs."""
    return "{" + ",".join("NULL" if v is None else '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
                          for v in values) + "}"
