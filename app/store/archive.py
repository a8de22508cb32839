"""The history archive format: gzipped JSON lines, one archived execution per line.

An archive is the object ``history/<yyyy>/<mm>/<dd>/<finished>-<id>.jsonl.gz`` in the object store
(app.store.objects), dated by the oldest ``finished_at`` in it. Each line is

    {"v": 1, "execution": {<every column of the executions row>},
     "attempts": [{<every column of an attempts row>}, ...]}

with UUIDs as strings, instants as RFC 3339 in UTC and JSONB columns as JSON. It reads with
``zcat FILE | jq`` and loads back with ``kairos history restore``. One archive may repeat rows of
another (a batch whose commit failed after its upload is archived again), never miss one: the rows
leave the database only in the transaction that wrote their archive.
"""

from __future__ import annotations

import gzip
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import msgspec

from app.errors import InvalidInput

PREFIX = "history"
VERSION = 1
SUFFIX = ".jsonl.gz"
Row = dict[str, Any]


@dataclass(frozen=True)
class Archived:
    """What one archive holds."""

    executions: list[Row]
    attempts: list[Row]


def key_for(executions: Sequence[Row]) -> str:
    """Where a batch goes: dated by its oldest finished_at, unique by a random suffix."""
    oldest: datetime = min(e["finished_at"] for e in executions).astimezone(timezone.utc)
    stamp = oldest.strftime("%Y%m%dT%H%M%SZ")
    return f"{PREFIX}/{oldest:%Y/%m/%d}/{stamp}-{uuid.uuid4().hex[:12]}{SUFFIX}"


def encode(executions: Sequence[Row], attempts: Sequence[Row]) -> bytes:
    by_execution: dict[Any, list[Row]] = defaultdict(list)
    for a in attempts:
        by_execution[a["execution_id"]].append(a)
    encoder = msgspec.json.Encoder()
    lines = [encoder.encode({"v": VERSION, "execution": e,
                             "attempts": sorted(by_execution.get(e["execution_id"], ()), key=lambda a: a["attempt"])})
             for e in executions]
    return gzip.compress(b"\n".join(lines) + b"\n", compresslevel=6)


def decode(data: bytes, name: str = "archive") -> Archived:
    """The rows of an archive; InvalidInput (naming ``name``) when it is not one."""
    try:
        text = gzip.decompress(data)
    except (OSError, EOFError) as exc:
        raise InvalidInput(name, f"is not a gzipped history archive ({exc})") from None
    decoder = msgspec.json.Decoder()
    executions: list[Row] = []
    attempts: list[Row] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise InvalidInput(name, f"line {number} is not JSON ({exc})") from None
        if (not isinstance(record, dict) or record.get("v") != VERSION or not isinstance(record.get("execution"), dict)
                or not isinstance(record.get("attempts"), list)):
            raise InvalidInput(name, f"line {number} is not a version-{VERSION} archived execution")
        executions.append(record["execution"])
        attempts += record["attempts"]
    return Archived(executions, attempts)
