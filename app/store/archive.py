"""The history archive format: gzipped JSON lines, one archived execution per line.

An archive is the object ``history/<yyyy>/<mm>/<dd>/<finished>-<id>.jsonl.gz`` in the object store
(app.store.objects), dated by the oldest ``finished_at`` in it. Each line is

    {"v": 1, "execution": {<every column of the executions row>},
     "attempts": [{<every column of an attempts row>}, ...]}

with UUIDs as strings, instants as RFC 3339 in UTC and JSONB columns as JSON. The last line is

    {"v": 1, "mac": "hmac-sha256:<hex>"}

the HMAC-SHA256 of every line before it (their bytes, each with its newline), under a key derived
from the installation's secret key (KAIROS_SECRET_KEY, app.store.sealing). It reads with
``zcat FILE | jq`` and loads back with ``kairos history restore``, which checks the MAC before it
restores anything: an archive edited by hand, or written by another installation, is refused
whole. A verified archive must still hold only finished executions (succeeded, dead, cancelled,
skipped), no lease, only the columns history keeps and attempts that ended: restore never makes
live work, whoever wrote the file. One archive may repeat rows of another (a batch whose commit
failed after its upload is archived again), never miss one: the rows leave the database only in
the transaction that wrote their archive.
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
from app.store import sealing

PREFIX = "history"
VERSION = 1
SUFFIX = ".jsonl.gz"
Row = dict[str, Any]

# The columns history keeps (every column of the tables; tests/integration/test_retention.py checks an archived
# row against them). A restore refuses any other key rather than dropping it unseen.
EXECUTION_COLUMNS = frozenset(
    {
        "execution_id",
        "job_id",
        "tenant_id",
        "queue",
        "scheduled_for",
        "attempt",
        "max_attempts",
        "state",
        "ready_at",
        "dispatched_at",
        "lease_owner",
        "lease_until",
        "started_at",
        "finished_at",
        "error",
        "result",
        "skip_reason",
        "payload",
        "backoff_s",
        "max_backoff_s",
        "trigger",
        "traceparent",
        "restored_at",
    }
)
ATTEMPT_COLUMNS = frozenset(
    {
        "execution_id",
        "attempt",
        "tenant_id",
        "worker_id",
        "leased_at",
        "lease_until",
        "finished_at",
        "outcome",
        "error",
        "result",
        "sent_at",
        "scheduled_for",
    }
)
FINAL_STATES = frozenset({"succeeded", "dead", "cancelled", "skipped"})


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


def encode(executions: Sequence[Row], attempts: Sequence[Row], keyring: sealing.Keyring | None = None) -> bytes:
    """The archive of these rows, its MAC line last (``keyring``: the installation's, by default)."""
    by_execution: dict[Any, list[Row]] = defaultdict(list)
    for a in attempts:
        by_execution[a["execution_id"]].append(a)
    encoder = msgspec.json.Encoder()
    body = b"".join(
        encoder.encode(
            {
                "v": VERSION,
                "execution": e,
                "attempts": sorted(by_execution.get(e["execution_id"], ()), key=lambda a: a["attempt"]),
            }
        )
        + b"\n"
        for e in executions
    )
    mac = (keyring or sealing.current()).mac(body)
    return gzip.compress(body + encoder.encode({"v": VERSION, "mac": mac}) + b"\n", compresslevel=6)


# Removed jobs (deleteAfterCompletionSeconds) are archived apart from execution history, one line per job.
JOBS_PREFIX = "jobs"


def jobs_key_for(removed_at: datetime) -> str:
    """Where a batch of removed jobs goes: dated by its removal, unique by a random suffix."""
    at = removed_at.astimezone(timezone.utc)
    return f"{JOBS_PREFIX}/{at:%Y/%m/%d}/{at:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:12]}{SUFFIX}"


def encode_jobs(
    jobs: Sequence[Row], executions: Sequence[Row], attempts: Sequence[Row], keyring: sealing.Keyring | None = None
) -> bytes:
    """The archive of removed jobs: per line ``{"v": 1, "job": {...every column...}, "executions":
    [{"execution": {...}, "attempts": [...]}, ...]}``, the MAC line last (as ``encode``'s). A record of
    what was removed, read with ``zcat | jq``; ``kairos history restore`` refuses it (a removed job is
    not restored)."""
    by_execution: dict[Any, list[Row]] = defaultdict(list)
    for a in attempts:
        by_execution[a["execution_id"]].append(a)
    by_job: dict[Any, list[Row]] = defaultdict(list)
    for e in sorted(executions, key=lambda e: e["scheduled_for"]):
        by_job[e["job_id"]].append(
            {"execution": e, "attempts": sorted(by_execution.get(e["execution_id"], ()), key=lambda a: a["attempt"])}
        )
    encoder = msgspec.json.Encoder()
    body = b"".join(
        encoder.encode({"v": VERSION, "job": j, "executions": by_job.get(j["job_id"], [])}) + b"\n" for j in jobs
    )
    mac = (keyring or sealing.current()).mac(body)
    return gzip.compress(body + encoder.encode({"v": VERSION, "mac": mac}) + b"\n", compresslevel=6)


def decode(data: bytes, name: str = "archive", keyring: sealing.Keyring | None = None) -> Archived:
    """The rows of an archive, once its MAC is verified and every row checked; InvalidInput (naming
    ``name``) when it is not an archive, its MAC does not match, or a row is not history."""
    try:
        text = gzip.decompress(data)
    except (OSError, EOFError) as exc:
        raise InvalidInput(name, f"is not a gzipped history archive ({exc})") from None
    body, mac = _signed_body(text, name)
    if not (keyring or sealing.current()).mac_matches(body, mac):
        raise InvalidInput(
            name,
            "its MAC does not match: the archive was changed after it was written, or another "
            "installation (another KAIROS_SECRET_KEY) wrote it; nothing was restored",
        )
    decoder = msgspec.json.Decoder()
    executions: list[Row] = []
    attempts: list[Row] = []
    for number, line in enumerate(body.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise InvalidInput(name, f"line {number} is not JSON ({exc})") from None
        if (
            not isinstance(record, dict)
            or record.get("v") != VERSION
            or not isinstance(record.get("execution"), dict)
            or not isinstance(record.get("attempts"), list)
        ):
            raise InvalidInput(name, f"line {number} is not a version-{VERSION} archived execution")
        executions.append(_history_execution(record["execution"], name, number))
        attempts += [_history_attempt(a, name, number) for a in record["attempts"]]
    return Archived(executions, attempts)


def _signed_body(text: bytes, name: str) -> tuple[bytes, str]:
    """(the lines the MAC covers, the MAC) of a decompressed archive; InvalidInput when it carries none."""
    trimmed = text.rstrip(b"\n")
    cut = trimmed.rfind(b"\n") + 1
    try:
        last = msgspec.json.decode(trimmed[cut:])
    except msgspec.DecodeError:
        last = None
    if not isinstance(last, dict) or not isinstance(last.get("mac"), str):
        raise InvalidInput(
            name,
            "carries no MAC line: only archives this installation wrote (and signed) can be "
            "restored; nothing was restored",
        )
    return text[:cut], last["mac"]


def _history_execution(row: Any, name: str, number: int) -> Row:
    """An archived execution as history keeps it: finished, no lease, no column history does not have."""
    if extra := set(row) - EXECUTION_COLUMNS:
        raise InvalidInput(name, f"line {number}: {', '.join(sorted(extra))} is not a column of execution history")
    if row.get("state") not in FINAL_STATES or row.get("finished_at") is None:
        raise InvalidInput(
            name,
            f"line {number}: state {row.get('state')!r} is not a final state (history holds "
            f"finished executions only: {', '.join(sorted(FINAL_STATES))})",
        )
    if row.get("lease_owner") is not None or row.get("lease_until") is not None:
        raise InvalidInput(name, f"line {number}: a finished execution holds no lease")
    return dict(row)


def _history_attempt(row: Any, name: str, number: int) -> Row:
    if not isinstance(row, dict) or set(row) - ATTEMPT_COLUMNS:
        raise InvalidInput(name, f"line {number}: an attempt holds only the columns of attempts")
    if row.get("outcome") == "running":
        raise InvalidInput(name, f"line {number}: an attempt still running is not history")
    return dict(row)
