"""Payloads kept by reference: the ones over ``KAIROS_PAYLOAD_INLINE_BYTES`` live in the object store.

A job's payload up to the inline limit (as compact JSON) sits in ``jobs.payload``. A larger one
(up to ``KAIROS_PAYLOAD_MAX_BYTES``) is put in the object store before the job row is written, under
a key named by its content, ``payloads/<tenant_id>/<sha256>.json``, and the row holds that key in
``jobs.payload_ref`` with ``payload`` NULL (a CHECK keeps exactly one of the two). So:

* a job row that committed always finds its object (the put finished first, durably);
* writing the same payload again (a retried transaction, an Idempotency-Key replay, the same
  payload in many jobs) writes the same object, and an object never changes once written, which is
  also why a process may cache what it read and check it against its name;
* the executions that carry a job's payload to a worker or an HTTP target read it only when their
  row has a reference: inline payloads cost nothing more than before.

Objects are never deleted by Kairos (a job row is never deleted either); see docs/retention.md.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import replace
from typing import Any
from uuid import UUID

from app.config import Settings
from app.domain.jsontext import compact_json
from app.errors import ObjectStoreUnavailable
from app.store.executions import Leased
from app.store.objects import ObjectStore, open_store

PREFIX = "payloads"
CACHE_BYTES_DEFAULT = 64 * 1024 * 1024


def encode(payload: Any) -> bytes:
    """A payload as Kairos sends it: compact JSON."""
    return compact_json(payload).encode()


def key_for(tenant_id: UUID, data: bytes) -> str:
    return f"{PREFIX}/{tenant_id}/{hashlib.sha256(data).hexdigest()}.json"


def _digest_of(ref: str) -> str:
    return ref.rsplit("/", 1)[-1].removesuffix(".json")


class PayloadStore:
    """Puts payloads over the inline limit and reads them back (through a small cache of whole objects)."""

    def __init__(self, objects: ObjectStore, inline_bytes: int, *, cache_bytes: int = CACHE_BYTES_DEFAULT) -> None:
        self.objects = objects
        self.inline_bytes = inline_bytes
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cached = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> PayloadStore:
        return cls(
            open_store(
                settings.archive_url, settings.home, endpoint=settings.archive_endpoint, region=settings.archive_region
            ),
            settings.payload_inline_bytes,
        )

    def oversized(self, payload: Any, text: str | None = None) -> bytes | None:
        """The payload's JSON when it is over the inline limit (to ``put``); None: it stays inline.
        ``text``: the payload's compact JSON when the caller has it already."""
        data = encode(payload) if text is None else text.encode()
        return data if len(data) > self.inline_bytes else None

    async def put(self, tenant_id: UUID, data: bytes) -> str:
        """Put a payload's JSON in the object store; the reference the job row holds."""
        ref = key_for(tenant_id, data)
        if ref not in self._cache:  # content-addressed: what this process put or read is there
            await self.objects.put(ref, data)
            self._remember(ref, data)
        return ref

    async def keep(self, tenant_id: UUID, payload: Any) -> str | None:
        """The reference a payload over the inline limit is kept under (put now); None: it stays inline."""
        data = self.oversized(payload)
        return None if data is None else await self.put(tenant_id, data)

    async def read(self, ref: str) -> bytes:
        """The payload's JSON bytes, checked against the digest in its name."""
        data = self._cache.get(ref)
        if data is not None:
            self._cache.move_to_end(ref)
            return data
        data = await self.objects.get(ref)
        if hashlib.sha256(data).hexdigest() != _digest_of(ref):
            raise ObjectStoreUnavailable(f"payload {ref} does not match its digest (damaged in the object store)")
        self._remember(ref, data)
        return data

    async def load(self, ref: str) -> Any:
        return json.loads(await self.read(ref))

    async def resolve(self, item: Leased) -> Leased:
        """``item`` with its whole payload (a leased execution whose row holds a reference)."""
        if item.payload_ref is None:
            return item
        return replace(item, payload=await self.load(item.payload_ref))

    def _remember(self, ref: str, data: bytes) -> None:
        if len(data) > self.cache_bytes // 4:
            return  # one huge payload must not flush every other
        self._cache[ref] = data
        self._cached += len(data)
        while self._cached > self.cache_bytes:
            _, dropped = self._cache.popitem(last=False)
            self._cached -= len(dropped)
