"""A webhook receiver for the HTTP benchmarks: uvicorn serving a bare ASGI app, in its own processes.

    .venv/bin/python loadtest/receiver.py --ports 8101,8102 --out DIR [--processes 2] [--slow 8102:5.0]

Binds every port on 127.0.0.1 before forking, so each of ``--processes`` uvicorn processes accepts on
all of them (the kernel spreads connections). Every request is answered 200 with an empty body, after
``--slow``'s delay for that port, and written as one line to ``DIR/receipts-<pid>.tsv``:

    receipt time (epoch s)  port  Kairos-Execution-Id  Kairos-Job-Id  Kairos-Attempt  Kairos-Scheduled-For

The receipt time is taken when the request's headers have arrived, before anything else is done. Lines are
flushed every ``--flush-s`` and at exit (SIGTERM), so the bench can count deliveries while they arrive.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

HEADERS = (b"kairos-execution-id", b"kairos-job-id", b"kairos-attempt", b"kairos-scheduled-for")
OK = {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]}
DONE = {"type": "http.response.body", "body": b""}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ports", required=True, help="comma-separated ports to listen on (127.0.0.1)")
    p.add_argument("--out", required=True, help="folder for receipts-<pid>.tsv")
    p.add_argument("--processes", type=int, default=1)
    p.add_argument(
        "--slow",
        action="append",
        default=[],
        metavar="PORT:SECONDS",
        help="answer requests to PORT after SECONDS (repeatable)",
    )
    p.add_argument("--flush-s", type=float, default=0.25)
    return p.parse_args(argv)


class Receipts:
    def __init__(self, path: Path) -> None:
        self.file = path.open("a", buffering=1 << 20)
        self.lines: list[str] = []

    def add(self, port: int, scope_headers: list[tuple[bytes, bytes]]) -> None:
        got = dict.fromkeys(HEADERS, b"-")
        for name, value in scope_headers:
            if name in got:
                got[name] = value
        self.lines.append(f"{time.time():.6f}\t{port}\t" + "\t".join(got[h].decode("latin-1") for h in HEADERS))

    def flush(self) -> None:
        if self.lines:
            self.file.write("\n".join(self.lines) + "\n")
            self.lines = []
        self.file.flush()


def make_app(receipts: Receipts, delays: dict[int, float]) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        port = scope["server"][1] if scope.get("server") else 0
        receipts.add(port, scope["headers"])
        more = True
        while more:  # read the body whole before answering (a real receiver would)
            message = await receive()
            more = message.get("more_body", False)
        delay = delays.get(port)
        if delay:
            await asyncio.sleep(delay)
        await send(OK)
        await send(DONE)

    return app


async def serve(sockets: list[socket.socket], out: Path, delays: dict[int, float], flush_s: float) -> None:
    import uvicorn

    receipts = Receipts(out / f"receipts-{os.getpid()}.tsv")
    config = uvicorn.Config(
        make_app(receipts, delays),
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level="warning",
        backlog=4096,
        timeout_keep_alive=60,
    )
    server = uvicorn.Server(config)

    async def flusher() -> None:
        while True:
            await asyncio.sleep(flush_s)
            receipts.flush()

    task = asyncio.create_task(flusher())
    try:
        await server.serve(sockets=sockets)
    finally:
        task.cancel()
        receipts.flush()


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    delays = {int(p): float(s) for p, _, s in (x.partition(":") for x in args.slow)}
    sockets = []
    for port in (int(p) for p in args.ports.split(",") if p):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(4096)
        sock.set_inheritable(True)
        sockets.append(sock)
    children = []
    for _ in range(max(1, args.processes) - 1):
        pid = os.fork()
        if pid == 0:
            children = []
            break
        children.append(pid)

    try:
        import uvloop

        uvloop.run(serve(sockets, out, delays, args.flush_s))
    except KeyboardInterrupt:
        pass
    for pid in children:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
