"""Client CPU of two conversions the executor makes per leased execution: loading its timestamptz
columns, by the session's time zone, and encoding its payload for the Lease answer.
Component probe (one process, no tiers): not the user's path; the figure that counts is loadtest/herd.py.

    .venv/bin/python loadtest/lease_client_probe.py [--values 10000] [--rounds 15]

Time zones: psycopg loads ``--values`` timestamptz values on one connection (on the embedded PostgreSQL
under --home, or on KAIROS_DATABASE_URL's server) with the session in UTC (what every Kairos
connection asks for, app.store.db.SESSION_TIME_ZONE), in the server's own default (pgserver's is
Etc/UTC) and in Europe/Berlin, interleaved, ``--rounds`` times; prints the median CPU per value.

Payloads: the Lease answer's encoding of a small inline payload (``json.dumps`` with separators against
``app.executor.payloads.encode_payload``) and of a 64 KiB payload read from the object store (decoded
and encoded again, against handed on as it was read).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path

import msgspec
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.executor.payloads import encode_payload  # noqa: E402
from app.store import embedded  # noqa: E402
from app.store.payloads import encode  # noqa: E402
from loadtest.lease_bench import libpq, with_database  # noqa: E402

SERVER_DEFAULT = "server default"


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--values", type=int, default=10_000, help="timestamptz values loaded per round")
    p.add_argument("--rounds", type=int, default=15, help="interleaved rounds per time zone")
    p.add_argument("--home", default="/tmp/kairos-lease-client-probe", help="embedded PostgreSQL home")
    return p.parse_args()


def time_zones(url: str, values: int, rounds: int) -> None:
    sql = f"SELECT now() + g * interval '1 second' FROM generate_series(1, {values}) AS g"
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        default = conn.execute("SHOW TimeZone").fetchone()
        print(f"timestamptz: {values:,} values a round, {rounds} rounds; the server's default zone is {default[0]}")
        cpu: dict[str, list[float]] = {}
        for _ in range(rounds):
            for zone in ("UTC", SERVER_DEFAULT, "Europe/Berlin"):
                conn.execute("RESET TimeZone" if zone == SERVER_DEFAULT else f"SET TimeZone = '{zone}'")
                cur = conn.cursor()
                cur.execute(sql)  # the server's work and the transfer: loading happens in fetchall
                started = time.process_time()
                rows = cur.fetchall()
                cpu.setdefault(zone, []).append(time.process_time() - started)
                assert len(rows) == values
        for zone, spent in cpu.items():
            print(f"  {zone:14s} {1e9 * statistics.median(spent) / values:5.0f} ns a value (median)")


def payloads() -> None:
    small = {"to": "a@example.com", "n": 42, "tags": ["x", "y"]}
    big = {"blob": "x" * 64 * 1024, "nested": {"é": [1, 2.5, None, True]}, "n": 7}
    stored = encode(big)  # as the object store holds it
    cases: list[tuple[str, Callable[[], bytes], int]] = [
        ("small, json.dumps with separators", lambda: json.dumps(small, separators=(",", ":")).encode(), 50_000),
        ("small, encode_payload", lambda: encode_payload(small), 50_000),
        (
            "64 KiB stored, decoded and encoded again",
            lambda: json.dumps(json.loads(stored), separators=(",", ":")).encode(),
            500,
        ),
        ("64 KiB stored, as read (msgspec.Raw)", lambda: encode_payload(msgspec.Raw(stored)), 500),
    ]
    print("payload, as the Lease answer encodes it (best of 5):")
    for label, fn, number in cases:
        print(f"  {label:42s} {1e9 * min(timeit.repeat(fn, number=number, repeat=5)) / number:8.0f} ns")


def main() -> None:
    args = parse()
    base = os.environ.get("KAIROS_DATABASE_URL") or embedded.start(Path(args.home) / "pgdata")
    time_zones(with_database(base, "postgres"), args.values, args.rounds)
    payloads()


if __name__ == "__main__":
    main()
