"""Run the Locust scenarios headless against a throwaway `kairos up --demo`, then stop everything.

    .venv/bin/python loadtest/run_locust.py [-u 20] [-r 5] [-t 90s] [--shape mixed|herd] [--tenants 4]

1. a fresh KAIROS_HOME in a temporary directory (embedded PostgreSQL) and two free loopback
   ports (KAIROS_API_PORT, KAIROS_GRPC_PORT);
2. `kairos up --demo` in its own session (the demo also serves POST /demo/echo, the jobs' HTTP
   target, and allow-lists 127.0.0.1 for HTTP egress), then a wait for /readyz;
3. `locust -f loadtest/locustfile.py --headless` for a bounded time with the same KAIROS_* settings,
   so the locustfile creates its tenants with `kairos tenants create` on the same database; the
   start-lag report prints when Locust quits; Locust's CSV files go to --csv-dir when given;
4. Locust is stopped (SIGINT, then SIGKILL) if it outlives its time limit, then `kairos up` (SIGINT,
   then SIGKILL of its process group) also on Ctrl-C or errors, and the temporary home is removed
   unless --keep-home.

The exit code is Locust's: 0 when every request succeeded and every due job started.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seconds(value: str) -> float:
    """Locust's -t syntax: 90, 90s, 2m, 1m30s."""
    m = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?", value.strip())
    if not m or not any(m.groups()):
        raise argparse.ArgumentTypeError(f"not a duration: {value!r}")
    h, mi, s = (int(g or 0) for g in m.groups())
    return h * 3600 + mi * 60 + s


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-u", "--users", type=int, default=20)
    p.add_argument("-r", "--spawn-rate", type=float, default=5.0)
    p.add_argument(
        "-t",
        "--run-time",
        type=seconds,
        default=None,
        help="bound of the Locust run (default 90s; herd: until T + hold, at most 150s)",
    )
    p.add_argument("--shape", choices=("mixed", "herd"), default="mixed")
    p.add_argument("--tenants", type=int, default=4, help="tenants the locustfile creates")
    p.add_argument("--herd-jobs", type=int, default=20, help="herd: jobs each user submits for T")
    p.add_argument("--csv-dir", type=Path, help="keep Locust's --csv files here")
    p.add_argument("--json", type=Path, help="write the start-lag report as JSON here")
    p.add_argument("--keep-home", action="store_true", help="keep the temporary KAIROS_HOME (logs, database)")
    p.add_argument("--ready-timeout", type=float, default=120.0)
    return p.parse_args()


def wait_ready(api: str, up: subprocess.Popen, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if up.poll() is not None:
            raise RuntimeError(f"kairos up exited with {up.returncode}:\n{tail(log_path)}")
        try:
            if httpx.get(f"{api}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"kairos up was not ready within {timeout_s:.0f} s:\n{tail(log_path)}")


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop(proc: subprocess.Popen | None, grace_s: float, *, group: bool) -> None:
    """SIGINT, wait up to grace_s, then SIGKILL (the whole process group when group)."""
    if proc is None or proc.poll() is not None:
        return
    try:
        if group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        try:
            if group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except ProcessLookupError:
            pass
        proc.wait()
    except ProcessLookupError:
        pass


def main() -> int:
    a = parse()
    run_time = a.run_time if a.run_time is not None else (150.0 if a.shape == "herd" else 90.0)
    home = Path(tempfile.mkdtemp(prefix="kairos-locust-"))
    api_port, grpc_port = free_port(), free_port()
    api = f"http://127.0.0.1:{api_port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.update(
        {
            "KAIROS_HOME": str(home),
            "KAIROS_API_PORT": str(api_port),
            "KAIROS_GRPC_PORT": str(grpc_port),
            "KAIROS_LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }
    )
    up_log = home / "up.log"
    up: subprocess.Popen | None = None
    locust: subprocess.Popen | None = None
    code = 1

    def on_sigterm(signum: int, frame: object) -> None:
        if locust is not None and locust.poll() is None:
            locust.send_signal(signal.SIGINT)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        print(f"starting kairos up --demo (KAIROS_HOME {home}, API {api}, gRPC 127.0.0.1:{grpc_port})", flush=True)
        with open(up_log, "wb") as sink:
            up = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "up", "--demo"],
                cwd=ROOT,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        t0 = time.monotonic()
        wait_ready(api, up, up_log, a.ready_timeout)
        print(
            f"kairos is ready after {time.monotonic() - t0:.1f} s; locust: {a.users} users at {a.spawn_rate}/s, "
            f"shape {a.shape}, at most {run_time:.0f} s",
            flush=True,
        )
        locust_env = {
            **env,
            "KAIROS_LOCUST_SHAPE": a.shape,
            "KAIROS_LOCUST_TENANTS": str(a.tenants),
            "KAIROS_LOCUST_HERD_JOBS": str(a.herd_jobs),
        }
        if a.json:
            locust_env["KAIROS_LOCUST_REPORT_JSON"] = str(a.json.resolve())
        cmd = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(HERE / "locustfile.py"),
            "--headless",
            "-H",
            api,
            "-u",
            str(a.users),
            "-r",
            str(a.spawn_rate),
            "-t",
            f"{int(run_time)}s",
            "--stop-timeout",
            "5",
            "--only-summary",
            "--loglevel",
            "INFO",
        ]
        if a.csv_dir:
            a.csv_dir.mkdir(parents=True, exist_ok=True)
            cmd += ["--csv", str(a.csv_dir.resolve() / "kairos")]
        locust = subprocess.Popen(cmd, cwd=ROOT, env=locust_env)
        # Bounded: the run time, the tenants' set-up, the report's grace period and listing, then a margin.
        try:
            code = locust.wait(timeout=run_time + 120)
        except subprocess.TimeoutExpired:
            print("locust outlived its time limit; stopping it", file=sys.stderr)
            stop(locust, 15, group=False)
            code = 1
    except KeyboardInterrupt:
        # Ctrl-C reached Locust too (same process group; SIGTERM is forwarded): it prints its
        # statistics and the report, so give it time before killing it.
        print("interrupted; stopping", file=sys.stderr)
        try:
            if locust is not None:
                locust.wait(timeout=40)
        except subprocess.TimeoutExpired:
            pass
        code = 130
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = 1
    finally:
        stop(locust, 5, group=False)
        stop(up, 40, group=True)
        if a.keep_home:
            print(f"kept KAIROS_HOME {home} (logs under logs/, up.log)")
        else:
            shutil.rmtree(home, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
