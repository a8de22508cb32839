"""ReadyDepth: what ``kairos_ready_queue_depth`` reads, refreshed by one count every few seconds.

The gauge is observed at scrape time, which cannot wait for the database, so this duty keeps the
last count per queue (ExecutionCountReadyByQueue: executions ready and due, grouped by queue) and
the gauge reads that. A queue seen once stays in the readings, at 0 when it drains, so a scaler
reading the series sees it fall to 0 instead of disappearing; the HTTP queue is always there.
While the database does not answer, the readings are withdrawn rather than left stale.

The count is the installation's, not this executor's share: every executor reports the same
numbers, so dashboards and autoscalers aggregate with ``max``, not ``sum``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

from app.domain import queues
from app.duties import run_every
from app.observability import Reading
from app.store import Database

log = logging.getLogger(__name__)

READY_DEPTH_INTERVAL_S_DEFAULT = 5.0


@dataclass(frozen=True)
class ReadyDepthConfig:
    # How often the count runs (a scrape in between reads the last one).
    interval_s: float = READY_DEPTH_INTERVAL_S_DEFAULT
    isolation: str = "READ COMMITTED"


def pool_labels(queue: str) -> dict[str, str]:
    """The gauge's attributes for a queue key: its pool, its kind, and the tenant of a private pool."""
    if queue == queues.HTTP_QUEUE:
        return {"pool": queue, "kind": "http"}
    if queues.is_shared(queue):
        return {"pool": queue.split(":", 1)[1], "kind": "shared"}
    _, tenant_id, pool = queue.split(":", 2)  # tenant:<tenant_id>:<pool>
    return {"pool": pool, "kind": "tenant", "tenant": tenant_id}


@dataclass
class ReadyDepth:
    db: Database
    config: ReadyDepthConfig = ReadyDepthConfig()
    depths: dict[str, int] | None = field(default=None)

    async def run_once(self) -> dict[str, int]:
        counted = await self.db.transaction(
            lambda tx: tx.executions.count_ready_by_queue(), isolation=self.config.isolation
        )
        depths = dict.fromkeys(self.depths or {}, 0) | {queues.HTTP_QUEUE: 0} | counted
        self.depths = depths
        return depths

    def withdraw(self) -> None:
        self.depths = None

    def readings(self) -> Iterator[Reading]:
        for queue, depth in (self.depths or {}).items():
            yield float(depth), pool_labels(queue)

    async def run(self, stop: asyncio.Event) -> None:
        await run_every("ready-depth", self.config.interval_s, stop, self.run_once, on_error=self.withdraw)
