"""`kairos history archive --now | list | restore` on a database of this module's own and a local object store.

The archive command runs the executors' batched pruner, which takes from the legacy partitions only
(weekly partitions leave whole, by the scheduler's duty). The module's database keeps its recent
history there, as a database converted while it held history does (tests/support/history.py): the
folder's shared database holds other tests' rows, so its layout can no longer be set.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

from app.store import executions as ex
from app.store.db import Database, create_engine
from tests import factories
from tests.api.conftest import TenantKey, make_tenant, query
from tests.cli.conftest import Kairos
from tests.conftest import fresh_database
from tests.support.history import RECUT_AS_CONVERTED


def finished_long_ago(database_url: str, tenant: TenantKey, count: int) -> list[UUID]:
    """``count`` executions of a new job of ``tenant``, leased once, succeeded, finished 40 days ago."""

    async def work() -> list[UUID]:
        db = Database(create_engine(database_url, pool_size=1))
        try:
            queue = factories.tenant_queue(tenant.tenant_id, "history")
            job_id = await factories.job(db, tenant.tenant_id, queue=queue)
            ids = await factories.ready_executions(db, job_id, count)
            leased = await db.transaction(lambda tx: tx.executions.lease(queue, "w", count, 30))
            await db.transaction(
                lambda tx: tx.executions.complete_many([ex.Success(e.execution_id, e.attempt) for e in leased])
            )
            return ids
        finally:
            await db.close()

    ids = asyncio.run(work())
    query(
        database_url,
        "UPDATE executions SET finished_at = finished_at - interval '40 days' WHERE execution_id = ANY(%s)",
        (ids,),
    )
    return ids


def present(database_url: str, ids: list[UUID]) -> int:
    return query(database_url, "SELECT count(*) FROM executions WHERE execution_id = ANY(%s)", (ids,))[0][0]


@pytest.fixture(scope="module")
def history_database_url(pg_base_url: str, pg_template: str) -> Iterator[str]:
    with fresh_database(pg_base_url, pg_template) as url:
        query(url, RECUT_AS_CONVERTED)
        yield url


@pytest.fixture
def tenant(history_database_url: str) -> TenantKey:
    """A tenant of the module's database (the history commands read no API)."""
    return make_tenant(history_database_url)


@pytest.fixture
def operator_env(history_database_url: str, tmp_path: Path) -> dict[str, str | None]:
    return {
        "KAIROS_DATABASE_URL": history_database_url,
        "KAIROS_HOME": str(tmp_path / "home"),
        "KAIROS_ARCHIVE_URL": None,
        "KAIROS_LOG_LEVEL": "WARNING",
    }


def test_archive_list_and_restore(
    kairos: Kairos, history_database_url: str, tenant: TenantKey, operator_env: dict[str, str | None], tmp_path: Path
) -> None:
    ids = finished_long_ago(history_database_url, tenant, 3)

    archived = kairos("history", "archive", "--now", "--json", env=operator_env)
    assert archived.code == 0, archived.err
    lines = [json.loads(line) for line in archived.out.splitlines()]
    assert sum(line["executions"] for line in lines) >= 3
    assert present(history_database_url, ids) == 0
    keys = [line["archive"] for line in lines]
    assert all((tmp_path / "home" / "objects" / key).is_file() for key in keys)

    listed = kairos("history", "list", env=operator_env)
    assert listed.code == 0 and listed.out.split() == sorted(keys)

    for key in keys:
        restored = kairos("history", "restore", key, "--json", env=operator_env)
        assert restored.code == 0, restored.err
    assert present(history_database_url, ids) == 3
    again = kairos("history", "restore", keys[0], env=operator_env)
    assert again.code == 0 and again.out.startswith("restored 0 of ")

    summary = kairos("history", "archive", "--now", env=operator_env)  # restored rows are held
    assert summary.code == 0 and present(history_database_url, ids) == 3


@pytest.mark.parametrize(
    "args",
    [
        ("history", "archive"),
        ("history", "archive", "--now", "--days", "0"),
        ("history", "restore", "history/2026/01/01/none.jsonl.gz"),
        ("history", "restore", "history/../../outside.jsonl.gz"),
        ("history", "restore", "NOT_AN_ARCHIVE"),
        ("history", "list", "--prefix", "payloads"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_changes_nothing(
    kairos: Kairos,
    history_database_url: str,
    tenant: TenantKey,
    operator_env: dict[str, str | None],
    tmp_path: Path,
    args: tuple[str, ...],
) -> None:
    ids = finished_long_ago(history_database_url, tenant, 1)
    not_gzip = tmp_path / "plain.jsonl"
    not_gzip.write_text('{"v": 1}\n')
    args = tuple(str(not_gzip) if a == "NOT_AN_ARCHIVE" else a for a in args)

    result = kairos(*args, env=operator_env)

    assert result.code == 2, (result.out, result.err)
    assert result.error_line
    assert present(history_database_url, ids) == 1
    assert not (tmp_path / "home" / "objects" / "history").exists()


def test_restore_of_a_hand_edited_archive_exits_2_and_restores_nothing(
    kairos: Kairos, history_database_url: str, tenant: TenantKey, operator_env: dict[str, str | None], tmp_path: Path
) -> None:
    import gzip

    ids = finished_long_ago(history_database_url, tenant, 2)
    archived = kairos("history", "archive", "--now", "--json", env=operator_env)
    assert archived.code == 0, archived.err
    keys = [json.loads(line)["archive"] for line in archived.out.splitlines()]
    assert present(history_database_url, ids) == 0
    original = (tmp_path / "home" / "objects" / keys[0]).read_bytes()
    # A ready execution with a payload of the editor's choosing, in an otherwise untouched archive.
    lines = []
    for line in gzip.decompress(original).splitlines():
        record = json.loads(line)
        if "execution" in record:
            record["execution"].update(state="ready", finished_at=None, payload={"cmd": "anything"})
        lines.append(json.dumps(record))
    forged = tmp_path / "forged.jsonl.gz"
    forged.write_bytes(gzip.compress("\n".join(lines).encode() + b"\n"))

    result = kairos("history", "restore", str(forged), env=operator_env)
    assert result.code == 2, (result.out, result.err)
    assert "MAC" in result.error_line
    assert (
        query(
            history_database_url,
            "SELECT count(*) FROM executions WHERE tenant_id = %s AND state = 'ready'",
            (tenant.tenant_id,),
        )[0][0]
        == 0
    )
    assert present(history_database_url, ids) == 0
