"""The reference arm of the worker-pool herds: the same herd through pgqueuer, on the same PostgreSQL server,
right after Kairos's, so the two are compared in one hour of this machine (``loadtest/herd.py``).

pgqueuer (a plain Postgres queue: ``SELECT ... FOR UPDATE SKIP LOCKED`` in batches, LISTEN/NOTIFY) is what a
team would pick instead of a scheduler for "run this at T". It runs as a user would run it: its own virtualenv
(``.venv-pgqueuer``, made on first use), ``PGQUEUER_WORKERS`` worker processes with ``batch_size`` 100 on
uvloop, each job enqueued with ``execute_after`` so it falls due at T. Its handler only notes when it started:
lag = handler start - T, as Kairos's is lease - T.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from http_herd import herd_module

if TYPE_CHECKING:
    from herd import Run

HERE = Path(__file__).resolve().parent
VENV = HERE.parent / ".venv-pgqueuer"
REQUIREMENTS = ["pgqueuer==1.6.0", "asyncpg>=0.29", "uvloop>=0.19"]
PGQUEUER_WORKERS = 2
PGQUEUER_BATCH = 100


def python() -> Path:
    """The reference virtualenv's interpreter, made and filled the first time."""
    exe = VENV / "bin" / "python"
    marker = VENV / "requirements.txt"
    wanted = "\n".join(REQUIREMENTS)
    if not exe.exists() or not marker.exists() or marker.read_text() != wanted:
        print(f"  [reference] making {VENV.name} ({', '.join(REQUIREMENTS)})")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(exe), "-m", "pip", "install", "-q", *REQUIREMENTS], check=True)
        marker.write_text(wanted)
    return exe


async def pgqueuer_herd(run: Run, name: str, groups: list[tuple[str, int]]) -> dict[str, Any]:
    """The herd of ``groups`` [(group, jobs)] through pgqueuer: lag figures, per group, and CPU per job."""
    h = herd_module()
    exe = python()
    total = sum(n for _, n in groups)
    url = run.server.create(f"{name}_pgq")
    dsn = h.libpq(url)
    script = str(HERE / "pgqueuer_ref.py")
    out = run.tmp / f"{name}-pgqueuer"
    out.mkdir(parents=True, exist_ok=True)
    env = {"PATH": "/usr/bin:/bin"}
    try:
        await asyncio.to_thread(
            subprocess.run, [str(exe), script, "install", dsn], check=True, env=env, capture_output=True, timeout=120
        )
        workers = [
            run.procs.start(
                f"{name}-pgqueuer-worker{i + 1}",
                [str(exe), script, "worker", dsn, str(out / f"starts-{i + 1}.txt"), str(PGQUEUER_BATCH), str(total)],
                env,
            )
            for i in range(PGQUEUER_WORKERS)
        ]
        # Enqueue first, then T: pgqueuer's bulk enqueue is fast (a few seconds for 100,000).
        t_due = math.ceil(time.time() + run.args.lead_min + total / 20_000)
        began = time.time()
        await asyncio.to_thread(
            subprocess.run,
            [str(exe), script, "enqueue", dsn, str(t_due), json.dumps(groups)],
            check=True,
            env=env,
            capture_output=True,
            timeout=600,
        )
        enqueued_s = time.time() - began
        if time.time() >= t_due:
            raise h.ScenarioFailed(f"pgqueuer: enqueue of {total} ended after T")
        print(f"  [{name}] pgqueuer: {total} jobs enqueued in {enqueued_s:.1f} s; T in {t_due - time.time():.1f} s")
        await asyncio.sleep(max(0.0, t_due - 1 - time.time()))
        # Each worker read on its own: one that exits first leaves /proc, and its last reading must stay.
        roots = {f"worker{i}": [w.popen.pid] for i, w in enumerate(workers)}
        pm = run.server.postmaster_pid()
        if pm:
            roots["postgres"] = [pm]
        cpu0 = h.tree_cpu(roots)
        deadline = t_due + h.drain_timeout(run, total)
        last = dict(cpu0)
        while time.time() < deadline and any(w.popen.poll() is None for w in workers):
            last = {k: max(v, last.get(k, 0.0)) for k, v in h.tree_cpu(roots).items()}
            await asyncio.sleep(0.25)
        run.procs.stop(workers)
        used = {k: last[k] - cpu0.get(k, 0.0) for k in last}
        cpu1 = {
            "workers": sum(v for k, v in used.items() if k.startswith("worker")),
            "postgres": used.get("postgres", 0.0),
        }
        starts = [
            (float(at), group)
            for p in out.glob("starts-*.txt")
            for at, _, group in (line.rstrip("\n").partition(" ") for line in p.open())
        ]
    finally:
        run.server.drop(url)
    lags = sorted(at - t_due for at, _ in starts)
    res: dict[str, Any] = {
        "jobs": total,
        "started": len(starts),
        "T": t_due,
        "enqueueS": enqueued_s,
        "workers": PGQUEUER_WORKERS,
        "batch": PGQUEUER_BATCH,
        "startLagS": h.summary(lags),
        "cpuSecondsDuringDrain": {k: round(v, 2) for k, v in cpu1.items()},
    }
    if starts:
        last = max(at for at, _ in starts)
        res["drainPerS"] = len(starts) / (last - t_due) if last > t_due else None
    res["perGroup"] = {g: h.summary(sorted(at - t_due for at, grp in starts if grp == g)) for g, _ in groups}
    return res


def rows(
    run: Run, name: str, kairos: dict[str, Any], ref: dict[str, Any], *, ratio_target: float, small: str | None = None
) -> None:
    """The reference's figures beside Kairos's, and the ratio of their drains against ``ratio_target``."""
    h = herd_module()
    lost = ref["jobs"] - ref["started"]
    run.row(
        name,
        f"pgqueuer ({ref['workers']} workers, batch {ref['batch']}): drain, max start lag",
        "-",
        f"{h.fmt_rate(ref.get('drainPerS'))}, {h.fmt_s(ref['startLagS']['max'])}"
        + (f" ({lost} never started)" if lost else ""),
        None,
    )
    if small is not None:
        p99s = [s["p99"] for g, s in ref["perGroup"].items() if g.startswith(small) and s["p99"] is not None]
        run.row(name, "pgqueuer: small tenants' start lag p99", "-", h.fmt_s(max(p99s) if p99s else None), None)
    cpu = ref["cpuSecondsDuringDrain"]
    if ref["started"]:
        run.row(
            name,
            "pgqueuer: CPU per started job, us: workers / PostgreSQL",
            "-",
            " / ".join(f"{1e6 * cpu.get(k, 0) / ref['started']:.0f}" for k in ("workers", "postgres")),
            None,
        )
    k, r = kairos.get("drainPerS"), ref.get("drainPerS")
    ratio = k / r if k and r else None
    run.row(
        name,
        "Kairos drain / pgqueuer drain",
        f">= {ratio_target:g}x",
        "-" if ratio is None else f"{ratio:.2f}x",
        ratio is not None and ratio >= ratio_target,
    )
