"""JSONB as the store reads it (app.store.db.json_loads): what json.loads would give, on both connection paths."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import text

from app.store.db import Database, json_loads
from tests import factories as tf

PAYLOADS: list[Any] = [
    {},
    {"a": [1, 2.5, None, True, "é😀"], "quote": '"\\\n'},
    {"big": 123456789012345678901234567890, "tiny": 1e-300},
    [[[[[]]]]],
]


@pytest.mark.parametrize("raw", ["1e400", "-1e400", "[1e400, 1]", '{"n": 123456789012345678901234567890}', '"x"', "[]"])
def test_values_decode_as_json_loads_reads_them(raw: str) -> None:
    for form in (raw.encode(), memoryview(raw.encode()), raw):
        assert json_loads(form) == json.loads(raw)


def test_invalid_json_still_raises() -> None:
    with pytest.raises(ValueError):
        json_loads(b"[")


async def test_jsonb_numbers_beyond_a_floats_range_read_as_json_loads_reads_their_text(db: Database) -> None:
    # JSONB keeps numbers as numeric and prints them in full: 1e400 as a 401-digit integer (an int for
    # both decoders), 1e400 + 0.5 with its fraction (msgspec refuses it, json.loads reads inf).
    doc = '{"int": 1e400, "frac": 1%s.5, "tiny": 1e-400}' % ("0" * 400)
    async with db.engine.connect() as conn:
        decoded, printed = (
            await conn.execute(text("SELECT CAST(:doc AS JSONB), CAST(CAST(:doc AS JSONB) AS TEXT)"), {"doc": doc})
        ).one()
    assert decoded == json.loads(printed)
    assert decoded["frac"] == float("inf") and decoded["int"] == 10**400 and decoded["tiny"] == 0.0


@pytest.mark.parametrize("payload", PAYLOADS)
async def test_a_leased_payload_reads_back_as_submitted(db: Database, payload: Any) -> None:
    # The executor's lease runs on Database.statement's own psycopg pool, not the engine's.
    tenant = await tf.tenant(db)
    queue = tf.tenant_queue(tenant.tenant_id, "p")
    job = await tf.job(db, tenant.tenant_id, queue=queue, payload=payload)
    await tf.insert_ready(db, [job], [datetime.now(timezone.utc) - timedelta(seconds=1)])
    [leased] = await db.statement(lambda tx: tx.executions.lease(queue, "w", 1, 30))
    assert leased.payload == payload
