"""Run a command per execution: the language-neutral worker behind ``kairos worker -- COMMAND...``.

The payload is written to the command's stdin as JSON; KAIROS_EXECUTION_ID, KAIROS_JOB_ID,
KAIROS_ATTEMPT, KAIROS_SCHEDULED_FOR and KAIROS_IDEMPOTENCY_KEY are in its environment. Exit 0
completes the execution (stdout, parsed as JSON when it is JSON, becomes the result); any other
exit fails it with the last lines of stderr as the error. Exit 75 (EX_TEMPFAIL) is retryable
like any failure; exit 65 (EX_DATAERR) dead-letters at once. A lost lease kills the command.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from kairos_sdk.client import Execution
from kairos_sdk.worker import NonRetryable

STDERR_LINES = 20
RESULT_BYTES = 16 * 1024
EX_DATAERR = 65


class CommandFailed(Exception):
    """The command exited non-zero."""


def _watch_children_by_pidfd() -> None:
    """Before Python 3.12 asyncio waits for each child in a thread of its own (ThreadedChildWatcher):
    a thread start and a blocking waitpid per execution, a third of a command worker's time when the
    command is short. A pidfd watcher (Linux 5.3+) waits on the event loop instead, as 3.12 does."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # an older kernel, or a sandbox that refuses pidfd_open
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        watcher = asyncio.PidfdChildWatcher()
        watcher.attach_loop(asyncio.get_running_loop())
        asyncio.set_child_watcher(watcher)


def command_handler(argv: Sequence[str], *, pidfd_watcher: bool = False):
    """The handler that runs ``argv`` per execution. ``pidfd_watcher``: before Python 3.12, make the
    process's asyncio child watcher a pidfd one on the handler's event loop (what ``kairos worker``,
    a process of its own, does; it replaces the process-wide watcher, so an application that runs
    subprocesses on other event loops should leave it off)."""
    argv = list(argv)
    if not argv:
        raise ValueError("a command is required")
    watched = not pidfd_watcher

    async def run(execution: Execution) -> Any:
        nonlocal watched
        if not watched:  # once, from the worker's event loop
            watched = True
            _watch_children_by_pidfd()
        env = dict(os.environ)
        env.pop("KAIROS_API_KEY", None)  # the command does not need the worker's credential
        env.update({
            "KAIROS_EXECUTION_ID": execution.execution_id, "KAIROS_JOB_ID": execution.job_id,
            "KAIROS_ATTEMPT": str(execution.attempt),
            "KAIROS_SCHEDULED_FOR": execution.scheduled_for.isoformat().replace("+00:00", "Z"),
            "KAIROS_IDEMPOTENCY_KEY": execution.idempotency_key,
        })
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, start_new_session=True)
        try:
            out, err = await proc.communicate(json.dumps(execution.payload).encode())
        except BaseException:
            if proc.returncode is None:
                try:
                    os.killpg(proc.pid, 9)
                except ProcessLookupError:
                    pass
                await proc.wait()
            raise
        if proc.returncode == 0:
            text = out[-RESULT_BYTES:].decode("utf-8", "replace").strip()
            if not text:
                return None
            try:
                return json.loads(text)
            except ValueError:
                return {"stdout": text}
        tail = "\n".join(err.decode("utf-8", "replace").rstrip().splitlines()[-STDERR_LINES:])
        message = f"exit status {proc.returncode}" + (f": {tail}" if tail else "")
        if proc.returncode == EX_DATAERR:
            raise NonRetryable(message)
        raise CommandFailed(message)

    return run
