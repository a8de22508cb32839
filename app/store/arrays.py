"""Array parameters: every statement over arrays (``unnest``) takes PostgreSQL array literals built here.

``CAST(:x AS UUID[])`` parses the literal on the server, PostgreSQL and CockroachDB alike. It is
exactly the text psycopg would send for a list, built in a fraction of the time: psycopg's generic
list dumper was the largest CPU cost of a dispatch batch. The common columns (no NULLs, one type,
strings that need no escaping) take a path that stays in C: ``str.join`` over ``map``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

_NULL = "NULL"


def plain(values: Iterable[Any]) -> str:
    """Array literal of values whose text form needs no quoting: ints, floats, bools, UUIDs, datetimes."""
    items = list(values)
    if not items:
        return "{}"
    kinds = set(map(type, items))  # in C: a generator testing each item's type cost as much as the join
    if len(kinds) == 1:
        kind = kinds.pop()
        if kind is type(None):  # an optional column nobody set: common on the submit path
            return "{" + ",".join([_NULL] * len(items)) + "}"
        if kind is datetime:  # a herd's jobs share their instants: each distinct one printed once (equal
            # instants in other zones print as the first of them: the same instant to the database)
            text = {v: v.isoformat() for v in set(items)}
            return "{" + ",".join(map(text.__getitem__, items)) + "}"
        return "{" + ",".join(map(str, items)) + "}"
    return (
        "{"
        + ",".join(_NULL if v is None else v.isoformat() if isinstance(v, datetime) else str(v) for v in items)
        + "}"
    )


def texts(values: Iterable[str | None]) -> str:
    """Array literal of strings (quoted and escaped) or NULLs."""
    items = list(values)
    if not items:
        return "{}"
    if items[0] is None and items.count(None) == len(items):
        return "{" + ",".join([_NULL] * len(items)) + "}"
    if None not in items:
        strings = cast(list[str], items)
        flat = "".join(strings)  # raises TypeError on a non-string, as the quoting below would
        if "\\" not in flat and '"' not in flat:
            return '{"' + '","'.join(strings) + '"}'
    return (
        "{"
        + ",".join(_NULL if v is None else '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in items)
        + "}"
    )
