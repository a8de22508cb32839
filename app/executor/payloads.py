"""Leased executions whose job payload is kept in the object store get it before they are handed on.

Both consumers of leases call this only for a batch in which some row has ``payload_ref`` (an inline
payload costs nothing here): the gRPC Lease (``app.rpc.servicer``) for its whole answer, the HTTP
pool (``app.executor.http_pool``) per delivery. A payload that cannot be read fails its attempt with
the reason (retried with backoff, so an object that stays missing ends in the dead letters saying
why). One Lease answer carries at most ``budget_bytes`` of referenced payloads (always at least one
execution): the rest are handed back unspent, ready for the next call, so a worker asking for 100
executions of 4 MiB payloads never gets a 400 MiB message.

A payload leaves as JSON encoded once (``encode_payload``), compact, for a worker (the Lease answer)
and an HTTP target (the request body) alike. One read from the object store is the compact JSON
Kairos wrote there, checked against its digest: it is handed on as those very bytes (``msgspec.Raw``),
never decoded and encoded again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import msgspec

from app import errors
from app.executor.batching import Deferral, Outcomes
from app.store import executions as ex
from app.store.payloads import PayloadStore

log = logging.getLogger(__name__)

LEASE_PAYLOAD_BUDGET_BYTES_DEFAULT = 32 * 1024 * 1024

# A leased payload as the bytes a worker or an HTTP target gets: compact JSON from msgspec (0.16-0.20 us for
# a small payload against 3.4-4.6 us for ``json.dumps`` with separators, which builds an encoder per call;
# text as UTF-8 rather than \u escapes), a ``msgspec.Raw`` (a payload read from the object store) as its bytes.
encode_payload: Callable[[Any], bytes] = msgspec.json.Encoder().encode


async def resolve_leased(
    payloads: PayloadStore | None,
    got: Sequence[ex.Leased],
    outcomes: Outcomes,
    *,
    budget_bytes: int = LEASE_PAYLOAD_BUDGET_BYTES_DEFAULT,
) -> list[ex.Leased]:
    """``got`` with every referenced payload read, less those that could not be read (failed) or did not
    fit in ``budget_bytes`` (handed back)."""
    out: list[ex.Leased] = []
    failed: list[ex.Failure] = []
    handed_back: list[Deferral] = []
    spent = 0
    for item in got:
        if item.payload_ref is None:
            out.append(item)
            continue
        if out and spent >= budget_bytes:
            handed_back.append(Deferral(item.execution_id, item.attempt, 0.0))
            continue
        try:
            if payloads is None:
                raise errors.ObjectStoreUnavailable("this process has no object store configured")
            data = await payloads.read(item.payload_ref)
            out.append(replace(item, payload=msgspec.Raw(data)))  # its JSON as stored: encode_payload sends it as is
            spent += len(data)
        except (errors.ObjectStoreUnavailable, errors.ObjectNotFound) as exc:
            log.error(
                "payload unavailable",
                extra={"execution_id": item.execution_id, "payload_ref": item.payload_ref, "error": exc.detail},
            )
            failed.append(ex.Failure(item.execution_id, item.attempt, f"payload unavailable: {exc.detail}"))
    if failed:
        await outcomes.fail_batch(failed)
    if handed_back:
        await asyncio.gather(*(outcomes.defer(d) for d in handed_back))
    return out
