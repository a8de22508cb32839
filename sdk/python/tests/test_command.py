"""The command worker: payload on stdin, environment, exit codes, result parsing."""

from __future__ import annotations

import sys
from datetime import datetime, timezone

import pytest

from kairos_sdk import Execution, NonRetryable, command_handler
from kairos_sdk.command import CommandFailed


def _execution(payload: object) -> Execution:
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    return Execution(execution_id="e1", job_id="j1", attempt=2, payload=payload, scheduled_for=at,
                     lease_until=at, idempotency_key="j1:2030", max_attempts=3, timeout_seconds=0)


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


async def test_stdout_json_is_the_result_and_the_environment_names_the_execution(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAIROS_API_KEY", "secret")
    names = ("KAIROS_EXECUTION_ID", "KAIROS_ATTEMPT", "KAIROS_SCHEDULED_FOR", "KAIROS_API_KEY")
    run = command_handler(_python(
        "import json, os, sys; p = json.load(sys.stdin); "
        f"print(json.dumps({{'n': p['n'] + 1, 'env': {{k: os.environ.get(k) for k in {names!r}}}}}))"))
    assert await run(_execution({"n": 1})) == {"n": 2, "env": {
        "KAIROS_EXECUTION_ID": "e1", "KAIROS_ATTEMPT": "2", "KAIROS_SCHEDULED_FOR": "2030-01-02T03:04:05Z",
        "KAIROS_API_KEY": None}}


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


@pytest.mark.skipif(sys.version_info >= (3, 12) or not hasattr(__import__("os"), "pidfd_open"),
                    reason="3.12+ waits for children on the event loop already; pidfd_open is Linux 5.3+")
async def test_before_3_12_children_are_waited_for_on_the_event_loop_not_a_thread_each() -> None:
    import asyncio
    import threading
    import warnings

    run = command_handler(["true"], pidfd_watcher=True)
    before = threading.active_count()
    assert await run(_execution(None)) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert isinstance(asyncio.get_child_watcher(), asyncio.PidfdChildWatcher)
    results = await asyncio.gather(*(run(_execution(None)) for _ in range(8)))
    assert results == [None] * 8 and threading.active_count() == before  # no waitpid thread per child
