"""`kairos worker` as a real process against a real gRPC server: where it connects, its idle notice, its help."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import click
import pytest

from app.cli.worker import worker as worker_command
from app.store.db import Database
from tests import factories as tf
from tests.support.polling import poll

ROOT = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def kairos_worker(log: Path, pool: str, *args: str, **variables: str) -> AsyncIterator[Callable[[], list]]:
    """Run `kairos worker --pool POOL ARGS -- cat`; yield a reader of its JSON log records; SIGTERM it after."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.update({"KAIROS_LOG_FORMAT": "json", "PYTHONUNBUFFERED": "1", **variables})
    with open(log, "wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "app.cli",
            "worker",
            "--pool",
            pool,
            *args,
            "--",
            "cat",
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def records() -> list:
        found = []
        for line in log.read_text().splitlines():
            try:
                found.append(json.loads(line))
            except ValueError:
                found.append({"msg": line})  # a traceback or a one-line error
        return found

    try:
        yield records
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, log.read_text()[-3000:]


@pytest.mark.parametrize(
    "where",
    ["KAIROS_GRPC_PORT", "KAIROS_GRPC_HOST and KAIROS_GRPC_PORT", "KAIROS_GRPC_ADDR", "--addr over KAIROS_GRPC_ADDR"],
)
async def test_the_worker_connects_where_the_settings_say(db: Database, addr: str, tmp_path: Path, where: str) -> None:
    host, port = addr.rsplit(":", 1)
    variables, args = {
        "KAIROS_GRPC_PORT": ({"KAIROS_GRPC_PORT": port}, ()),
        "KAIROS_GRPC_HOST and KAIROS_GRPC_PORT": ({"KAIROS_GRPC_HOST": host, "KAIROS_GRPC_PORT": port}, ()),
        "KAIROS_GRPC_ADDR": ({"KAIROS_GRPC_ADDR": addr, "KAIROS_GRPC_PORT": "1"}, ()),
        "--addr over KAIROS_GRPC_ADDR": ({"KAIROS_GRPC_ADDR": "127.0.0.1:1"}, ("--addr", addr)),
    }[where]
    t = await tf.tenant(db)
    job = await tf.job(db, t.tenant_id, queue=tf.tenant_queue(t.tenant_id, "cli"), payload={"n": 1})
    [eid] = await tf.ready_executions(db, job)

    async def succeeded():
        row = await db.transaction(lambda tx: tx.executions.get(t.tenant_id, eid))
        return row.state == "succeeded" and row

    async with kairos_worker(tmp_path / "worker.log", "cli", *args, KAIROS_API_KEY=t.key, **variables) as records:
        row = await poll(succeeded, timeout_s=30, interval_s=0.05, what=f"the execution to succeed ({where})")
        starting = [r for r in records() if r.get("msg") == "worker starting"]
    assert row.result == {"n": 1}  # `cat` echoed the payload
    assert starting[0]["addr"] == addr


async def test_an_idle_worker_logs_that_nothing_was_leased_from_its_pool(
    db: Database, addr: str, tmp_path: Path
) -> None:
    t = await tf.tenant(db)
    expected = (
        "no work leased from pool nobody-targets-this in the last 1 s: is any job targeting queue "
        "nobody-targets-this with this tenant's key?"
    )
    async with kairos_worker(
        tmp_path / "worker.log",
        "nobody-targets-this",
        "--idle-notice-s",
        "1",
        KAIROS_API_KEY=t.key,
        KAIROS_GRPC_ADDR=addr,
    ) as records:

        async def noticed():
            return [r for r in records() if r.get("msg") == expected]

        notices = await poll(noticed, timeout_s=30, interval_s=0.1, what="the idle notice")
    assert notices[0]["level"] == "info" and notices[0]["pool"] == "nobody-targets-this"


def test_every_option_has_help_and_the_epilog_states_the_command_contract() -> None:
    assert [p.name for p in worker_command.params if isinstance(p, click.Option) and not p.help] == []
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "worker", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for needed in (
        "--lease-seconds FLOAT RANGE Lease length",
        "--addr HOST:PORT",
        "--idle-notice-s",
        "stdin the payload as JSON",
        "KAIROS_EXECUTION_ID",
        "KAIROS_JOB_ID",
        "KAIROS_ATTEMPT",
        "KAIROS_SCHEDULED_FOR",
        "KAIROS_IDEMPOTENCY_KEY",
        "65 failed, not retryable",
        "75 failed, retryable (EX_TEMPFAIL)",
        "KAIROS_GRPC_HOST:KAIROS_GRPC_PORT",
    ):
        assert needed in text, needed
