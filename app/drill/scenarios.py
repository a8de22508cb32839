"""The drills: region failover, a killed scheduler, a stalled worker. Each returns a ``Report``.

Every drill follows one script: start what it needs in a temporary directory (PostgreSQL nodes,
Kairos processes, SDK workers), check the starting state (who owns the shards), let work flow
through the REST API (recurring jobs, a steady stream, a herd due just before the fault), inject
the fault, measure how long until the survivors own the work again, keep the flow going for
``observe_s``, stop submitting, let what is owed drain, and count. ``Harness`` stops and deletes
everything it started when the drill ends, fails, times out or is interrupted.

The drills live in private modules beside this one: ``_harness`` (options, harness, a site, polling),
``_flow`` (the traffic and its count), ``_failovers`` (region-failover, db-failover) and
``_process_faults`` (scheduler-kill, worker-stall); the Patroni mode of region-failover is
app/drill/patroni_failover.py.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from app.drill._failovers import database_failover, region_failover
from app.drill._harness import FAILOVERS, DrillOptions
from app.drill._process_faults import scheduler_kill, worker_stall
from app.drill.measure import Report

__all__ = [
    "DRILLS",
    "FAILOVERS",
    "DrillOptions",
    "database_failover",
    "region_failover",
    "scheduler_kill",
    "worker_stall",
]

DRILLS: dict[str, Callable[[DrillOptions], Coroutine[Any, Any, Report]]] = {
    "region-failover": region_failover,
    "db-failover": database_failover,
    "scheduler-kill": scheduler_kill,
    "worker-stall": worker_stall,
}
