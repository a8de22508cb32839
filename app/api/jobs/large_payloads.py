"""The API's side of payloads kept by reference (app.store.payloads; docs/retention.md).

Submits put each payload over ``KAIROS_PAYLOAD_INLINE_BYTES`` in the object store before the job is
written, so a job that was accepted always finds its payload. ``GET /v1/jobs/{jobId}`` and the
answer of a PATCH carry the whole payload; lists and the other actions answer ``payload: null``
with ``payloadRef`` set, so a page of jobs never reads megabytes from the object store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

import msgspec

from app.api.jobs.submit import Submission
from app.store.jobs import Job
from app.store.payloads import PayloadStore


async def keep_large(payloads: PayloadStore, subs: Sequence[Submission]) -> list[Submission]:
    """``subs`` with every payload over the inline limit put in the object store and replaced by its reference."""
    large = [
        (i, data)
        for i, s in enumerate(subs)
        if (data := payloads.oversized(s.job.payload, s.job.payload_json)) is not None
    ]
    if not large:
        return list(subs)
    refs = await asyncio.gather(*(payloads.put(subs[i].tenant_id, data) for i, data in large))
    out = list(subs)
    for (i, _), ref in zip(large, refs, strict=True):
        job = msgspec.structs.replace(out[i].job, payload=None, payload_json=None)
        out[i] = replace(out[i], job=job, payload_ref=ref)
    return out


async def whole(payloads: PayloadStore, job: Job) -> Job:
    """``job`` with its payload read back from the object store when the row holds a reference."""
    if job.payload_ref is None:
        return job
    return msgspec.structs.replace(job, payload=await payloads.load(job.payload_ref))
