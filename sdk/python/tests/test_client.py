"""The typed client over the fake executor, and the runtime floors the generated modules need."""

from __future__ import annotations

import re
import tomllib
from datetime import datetime, timezone
from pathlib import Path

from fake_executor import Served

from kairos_sdk import WorkerClient
from kairos_sdk._proto import worker_pb2, worker_pb2_grpc

SDK = Path(__file__).resolve().parents[1]


async def test_lease_and_report_map_protos_to_typed_values(served: Served) -> None:
    eid = served.executor.add({"to": "a@example.com"}, timeout_seconds=9)
    async with WorkerClient(served.addr, "k") as client:
        [e] = await client.lease("emails", "w1", 5, wait_seconds=1)
        assert (e.execution_id, e.attempt, e.payload, e.timeout_seconds) == (eid, 1, {"to": "a@example.com"}, 9)
        assert e.scheduled_for.tzinfo is timezone.utc and e.lease_until > e.scheduled_for
        beat = await client.heartbeat(eid, 1, 30)
        assert beat.outcome == "ok" and beat.at is not None and beat.at > datetime.now(timezone.utc)
        assert (await client.fail(eid, 1, "boom", retryable=False)).outcome == "dead"
        served.executor.lost.add(eid)
        assert (await client.complete(eid, 1, {"r": 1})).lease_lost
        assert [a.outcome for a in await client.complete_many([(eid, 1, None)])] == ["lease_lost"]
        assert await client.lease("emails", "w1", 5, wait_seconds=0) == []
    assert served.executor.keys[0] == "Bearer k"


async def test_empty_payloads_are_a_fresh_dict_each(served: Served) -> None:
    # {} skips the decoder; each execution still gets its own dict, so a handler mutating one cannot touch another.
    served.executor.add({})
    served.executor.add({})
    served.executor.add([1, {}])
    async with WorkerClient(served.addr, "k") as client:
        got = await client.lease("emails", "w1", 5, wait_seconds=1)
    assert [e.payload for e in got] == [{}, {}, [1, {}]]
    got[0].payload["x"] = 1
    assert got[1].payload == {}


def _floor(requirement: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.search(r">=([\d.]+)", requirement).group(1).split("."))


def test_the_promised_floors_are_what_the_generated_modules_check() -> None:
    deps = {
        re.split(r"[<>=]", d)[0]: d
        for d in tomllib.loads((SDK / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    assert set(deps) == {"grpcio", "protobuf"}  # a tenant's worker needs nothing else
    grpc_generated = tuple(int(x) for x in worker_pb2_grpc.GRPC_GENERATED_VERSION.split("."))
    assert _floor(deps["grpcio"]) == grpc_generated
    source = Path(worker_pb2.__file__).read_text()
    major, minor, patch = (
        int(x)
        for x in re.search(r"ValidateProtobufRuntimeVersion\(\s*\S+,\s*(\d+),\s*(\d+),\s*(\d+),", source).groups()
    )
    assert _floor(deps["protobuf"]) == (major, minor, patch)
    assert f"<{major + 1}" in deps["protobuf"]  # the generated code refuses another major version
