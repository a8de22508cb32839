"""Run a command per execution: the language-neutral worker behind ``kairos worker -- COMMAND...``.

The payload is written to the command's stdin as JSON; KAIROS_EXECUTION_ID, KAIROS_JOB_ID,
KAIROS_ATTEMPT, KAIROS_SCHEDULED_FOR and KAIROS_IDEMPOTENCY_KEY are in its environment. Exit 0
completes the execution (stdout, parsed as JSON when it is JSON, becomes the result); any other
exit fails it with the last lines of stderr as the error. Exit 75 (EX_TEMPFAIL) is retryable
like any failure; exit 65 (EX_DATAERR) dead-letters at once. A lost lease kills the command.

The command's stdin, stdout and stderr are memory files (memfd on Linux, else unnamed temporary
files), not pipes: the payload is in its stdin before it starts, and what it wrote is read once it
has exited. A command therefore never blocks on a full pipe, and its outcome is decided when it
exits, even if a process it started in the background still holds its stdout.

On Linux the command is started with ``posix_spawn`` and its exit awaited on a pidfd in the event
loop; elsewhere (or where pidfds are refused) through asyncio's subprocess support. A worker
spends 76 us of CPU per execution on the first path, 214 us with asyncio and memory files, and
290 us with asyncio and pipes (docs/performance.md, "Worker SDK"): with commands that run for
milliseconds the worker's own spawning cost is what bounds its rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from kairos_sdk.client import Execution
from kairos_sdk.worker import NonRetryable

STDERR_LINES = 20
RESULT_BYTES = 16 * 1024
STDERR_TAIL_BYTES = 64 * 1024  # read from the end of stderr to find its last STDERR_LINES lines
EX_DATAERR = 65


class CommandFailed(Exception):
    """The command exited non-zero."""


def _memory_file(name: str) -> int:
    """A file descriptor of an anonymous read-write file that lives in memory where the OS allows."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create(f"kairos-{name}", os.MFD_CLOEXEC)
    else:
        with tempfile.TemporaryFile() as f:
            fd = os.dup(f.fileno())
    if fd <= 2:  # the worker runs with a standard stream closed: keep clear of the child's 0, 1 and 2
        moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
        os.close(fd)
        fd = moved
    return fd


def _write_all(fd: int, data: bytes) -> None:
    """Write ``data`` to the empty file ``fd`` and rewind it, so the command reads it from the start."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)


def _tail(fd: int, limit: int) -> bytes:
    """The last ``limit`` bytes written to ``fd``."""
    size = os.fstat(fd).st_size
    return os.pread(fd, min(size, limit), max(0, size - limit))


def _pidfds_work() -> bool:
    """Whether this process may use pidfds (Linux 5.3+, and not refused by a sandbox)."""
    if not hasattr(os, "pidfd_open") or not hasattr(os, "posix_spawnp"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return True


async def _exited(pidfd: int) -> None:
    """Wait on the event loop until the process behind ``pidfd`` has exited."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def exited() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(pidfd, exited)
    try:
        await done
    finally:
        loop.remove_reader(pidfd)


def _kill_group(pid: int) -> None:
    """SIGKILL the process group a command leads (it runs in a session of its own)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


async def _run_spawned(argv: list[str], env: dict[str, str], stdio: tuple[int, int, int]) -> int:
    """posix_spawn ``argv`` in a session of its own with ``stdio`` as 0, 1 and 2; its exit code
    (negative: killed by that signal). Cancelled, it kills the process group and reaps the process."""
    actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(stdio)]
    # posix_spawn returns once the child exists (vfork): not a wait, so not a blocking call in the loop.
    pid = os.posix_spawnp(
        argv[0], argv, env, file_actions=actions, setsid=True, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ)
    )
    pidfd = os.pidfd_open(pid)
    try:
        await _exited(pidfd)
    except BaseException:
        _kill_group(pid)
        await _exited(pidfd)
        raise
    finally:
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)  # returns at once: the process has exited
    return os.waitstatus_to_exitcode(status)


async def _run_asyncio(argv: list[str], env: dict[str, str], stdio: tuple[int, int, int]) -> int:
    """The same as _run_spawned through asyncio's subprocess support (any platform)."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=stdio[0], stdout=stdio[1], stderr=stdio[2], env=env, start_new_session=True
    )
    try:
        return await proc.wait()
    except BaseException:
        if proc.returncode is None:
            _kill_group(proc.pid)
            await proc.wait()
        raise


def command_handler(argv: Sequence[str]) -> Callable[[Execution], Awaitable[Any]]:
    """The handler that runs ``argv`` per execution, in the environment of this process as it is now
    (without KAIROS_API_KEY) plus the execution's variables."""
    argv = list(argv)
    if not argv:
        raise ValueError("a command is required")
    spawn = _run_spawned if _pidfds_work() else _run_asyncio

    # The environment as the handler is made (copying os.environ per execution was 4 % of a worker's time).
    base_env = {k: v for k, v in os.environ.items() if k != "KAIROS_API_KEY"}  # the command needs no credential

    async def run(execution: Execution) -> Any:
        env = {
            **base_env,
            "KAIROS_EXECUTION_ID": execution.execution_id,
            "KAIROS_JOB_ID": execution.job_id,
            "KAIROS_ATTEMPT": str(execution.attempt),
            "KAIROS_SCHEDULED_FOR": execution.scheduled_for.isoformat().replace("+00:00", "Z"),
            "KAIROS_IDEMPOTENCY_KEY": execution.idempotency_key,
        }
        stdin, stdout, stderr = _memory_file("stdin"), _memory_file("stdout"), _memory_file("stderr")
        try:
            _write_all(stdin, json.dumps(execution.payload).encode())
            code = await spawn(argv, env, (stdin, stdout, stderr))
            out = _tail(stdout, RESULT_BYTES) if code == 0 else b""
            err = _tail(stderr, STDERR_TAIL_BYTES) if code != 0 else b""
        finally:
            for fd in (stdin, stdout, stderr):
                os.close(fd)
        if code == 0:
            text = out.decode("utf-8", "replace").strip()
            if not text:
                return None
            try:
                return json.loads(text)
            except ValueError:
                return {"stdout": text}
        tail = "\n".join(err.decode("utf-8", "replace").rstrip().splitlines()[-STDERR_LINES:])
        message = f"exit status {code}" + (f": {tail}" if tail else "")
        if code == EX_DATAERR:
            raise NonRetryable(message)
        raise CommandFailed(message)

    return run
