"""The command worker: payload on stdin, environment, exit codes, result parsing."""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kairos_sdk import Execution, NonRetryable, command_handler
from kairos_sdk.command import CommandFailed


def _execution(payload: object) -> Execution:
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    return Execution(
        execution_id="e1",
        job_id="j1",
        attempt=2,
        payload=payload,
        scheduled_for=at,
        lease_until=at,
        idempotency_key="j1:2030",
        max_attempts=3,
        timeout_seconds=0,
    )


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


async def test_stdout_json_is_the_result_and_the_environment_names_the_execution(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KAIROS_API_KEY", "secret")
    names = ("KAIROS_EXECUTION_ID", "KAIROS_ATTEMPT", "KAIROS_SCHEDULED_FOR", "KAIROS_API_KEY")
    run = command_handler(
        _python(
            "import json, os, sys; p = json.load(sys.stdin); "
            f"print(json.dumps({{'n': p['n'] + 1, 'env': {{k: os.environ.get(k) for k in {names!r}}}}}))"
        )
    )
    assert await run(_execution({"n": 1})) == {
        "n": 2,
        "env": {
            "KAIROS_EXECUTION_ID": "e1",
            "KAIROS_ATTEMPT": "2",
            "KAIROS_SCHEDULED_FOR": "2030-01-02T03:04:05Z",
            "KAIROS_API_KEY": None,
        },
    }


async def test_plain_stdout_is_wrapped_and_empty_stdout_is_none() -> None:
    assert await command_handler(_python("print('hello')"))(_execution(None)) == {"stdout": "hello"}
    assert await command_handler(_python("pass"))(_execution(None)) is None


async def test_non_zero_exit_fails_with_stderr_and_65_is_not_retried() -> None:
    with pytest.raises(CommandFailed, match="exit status 3: broken"):
        await command_handler(_python("import sys; sys.stderr.write('broken'); sys.exit(3)"))(_execution(None))
    with pytest.raises(NonRetryable, match="exit status 65"):
        await command_handler(_python("import sys; sys.exit(65)"))(_execution(None))


def test_a_command_is_required() -> None:
    with pytest.raises(ValueError):
        command_handler([])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="posix_spawn and pidfds are the Linux path")
async def test_on_linux_commands_are_spawned_and_waited_for_on_the_event_loop_not_by_asyncio() -> None:
    import asyncio
    import threading

    run = command_handler(_python("import json, sys; print(json.dumps(json.load(sys.stdin)))"))
    before = threading.active_count()
    spawned = 0
    real = __import__("os").posix_spawnp

    def counting(*args: object, **kwargs: object) -> int:
        nonlocal spawned
        spawned += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("os.posix_spawnp", counting)
        results = await asyncio.gather(*(run(_execution({"i": i})) for i in range(8)))
    assert results == [{"i": i} for i in range(8)]
    assert spawned == 8 and threading.active_count() == before  # no waitpid thread per child


async def test_the_asyncio_path_behaves_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    from kairos_sdk import command

    monkeypatch.setattr(command, "_pidfds_work", lambda: False)
    run = command_handler(_python("import json, sys; p = json.load(sys.stdin); print(json.dumps(p['n'] * 2))"))
    assert await run(_execution({"n": 21})) == 42
    with pytest.raises(CommandFailed, match="exit status 3: broken"):
        await command_handler(_python("import sys; sys.stderr.write('broken'); sys.exit(3)"))(_execution(None))


async def test_a_large_payload_and_output_pass_whole_and_the_result_is_the_tail_of_stdout() -> None:
    # Bigger than a pipe's buffer both ways: nothing blocks, and the result is stdout's last 16 KiB.
    payload = {"blob": "x" * 300_000}
    run = command_handler(
        _python(
            "import json, sys; p = json.load(sys.stdin); sys.stdout.write('y' * 200_000 + json.dumps(len(p['blob'])))"
        )
    )
    assert await run(_execution(payload)) == {"stdout": ("y" * 200_000 + "300000")[-16 * 1024 :]}


async def test_the_error_is_the_last_lines_of_stderr_and_no_descriptor_is_left_open() -> None:

    fds = Path("/proc/self/fd")
    before = len(list(fds.iterdir())) if fds.is_dir() else None
    code = "import sys; [print(f'line {i}', file=sys.stderr) for i in range(5000)]; sys.exit(4)"
    with pytest.raises(CommandFailed) as failed:
        await command_handler(_python(code))(_execution(None))
    assert str(failed.value).splitlines() == ["exit status 4: line 4980"] + [f"line {i}" for i in range(4981, 5000)]
    if before is not None:
        assert len(list(fds.iterdir())) == before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the child through /proc")
@pytest.mark.parametrize("spawned", [True, False], ids=["posix_spawn", "asyncio"])
async def test_a_cancelled_command_is_killed_and_reaped(spawned: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import os

    from kairos_sdk import command

    if not spawned:
        monkeypatch.setattr(command, "_pidfds_work", lambda: False)
    run = command_handler(_python("import time; time.sleep(60)"))
    task = asyncio.ensure_future(run(_execution(None)))
    deadline = asyncio.get_running_loop().time() + 10
    children: list[str] = []
    while not children and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
        children = [p.name for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p.name) == os.getpid()]
    assert children
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not any(Path(f"/proc/{pid}").exists() and _parent(pid) == os.getpid() for pid in children)


def _parent(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
