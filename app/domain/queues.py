"""Ready-queue keys: which queue an execution waits in, and who may lease or settle it.

Every execution row carries a ``queue`` key of one of three forms:

* ``@http`` (:data:`HTTP_QUEUE`): http targets, consumed by the executor's own pool.
* ``tenant:<tenant_id>:<pool>``: a tenant's private pool, served by that tenant's worker keys.
* ``shared:<pool>``: a shared pool, served by worker keys issued for that pool; jobs of every
  tenant granted the pool land in the same queue.

A *scope* is what a worker credential may touch: the exact key of a shared pool, or the prefix
``tenant:<tenant_id>:`` covering all of a tenant's pools (ExecutionCompleteMany matches on it).
"""

from __future__ import annotations

from uuid import UUID

HTTP_QUEUE = "@http"
_TENANT = "tenant:"
_SHARED = "shared:"


def tenant_queue(tenant_id: UUID, pool: str) -> str:
    """The queue of a tenant's private pool."""
    return f"{_TENANT}{tenant_id}:{pool}"


def shared_queue(pool: str) -> str:
    """The queue of a shared pool."""
    return f"{_SHARED}{pool}"


def tenant_scope(tenant_id: UUID) -> str:
    """The prefix covering every private pool of a tenant."""
    return tenant_queue(tenant_id, "")


def is_shared(queue: str) -> bool:
    return queue.startswith(_SHARED)
