"""Pool names and ready-queue keys: which queue an execution waits in, and who may lease or settle it.

A queue target's ``ref`` names a pool in one of two namespaces, told apart by its spelling alone:

* ``emails``: the submitting tenant's own pool ``emails``, served by that tenant's keys. It exists
  by being used; no operator action, and no shared pool of any name, can change where it goes.
* ``shared/emails``: the shared pool ``emails``, created by an operator (``kairos pools create``),
  served by worker keys issued for it, and targetable only by the tenants granted it.

Pool names themselves (``POOL_NAME``) cannot contain ``/``, so the two never overlap.

Every execution row carries a ``queue`` key of one of three forms:

* ``@http`` (:data:`HTTP_QUEUE`): http targets, consumed by the executor's own pool.
* ``tenant:<tenant_id>:<pool>``: a tenant's private pool, served by that tenant's worker keys.
* ``shared:<pool>``: a shared pool; jobs of every tenant granted the pool land in the same queue.

A *scope* is what a worker credential may touch: the exact key of a shared pool, or the prefix
``tenant:<tenant_id>:`` covering all of a tenant's pools (ExecutionCompleteMany matches on it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from uuid import UUID

HTTP_QUEUE = "@http"
_TENANT = "tenant:"
_SHARED = "shared:"

POOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
POOL_NAME_HELP = "1-63 of A-Z a-z 0-9 . _ - starting with a letter or digit"
# How a queue target (and a worker's Lease) names a shared pool rather than one of the tenant's own.
SHARED_PREFIX = "shared/"
POOL_REF_HELP = (
    f"a pool is NAME (the tenant's own pool) or {SHARED_PREFIX}NAME (a shared pool), NAME being {POOL_NAME_HELP}"
)


@dataclass(frozen=True, slots=True)
class PoolRef:
    """A pool as a queue target or a Lease names it."""

    name: str
    shared: bool

    def __str__(self) -> str:
        return f"{SHARED_PREFIX}{self.name}" if self.shared else self.name


def is_pool_name(name: str) -> bool:
    return POOL_NAME.fullmatch(name) is not None


def parse_pool_ref(ref: str) -> PoolRef | None:
    """``emails`` -> the tenant's own pool, ``shared/emails`` -> the shared pool; None if neither."""
    shared = ref.startswith(SHARED_PREFIX)
    name = ref[len(SHARED_PREFIX) :] if shared else ref
    return PoolRef(name, shared) if is_pool_name(name) else None


def shared_ref(name: str) -> str:
    """The ref that targets shared pool ``name``."""
    return f"{SHARED_PREFIX}{name}"


def queue_of(ref: PoolRef, tenant_id: UUID) -> str:
    """The ready queue a pool ref names for jobs of ``tenant_id``."""
    return shared_queue(ref.name) if ref.shared else tenant_queue(tenant_id, ref.name)


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


def pool_of_queue(queue: str) -> str:
    """The ref a queue key stands for: ``shared/<pool>``, the tenant's ``<pool>``, or ``@http``."""
    if queue.startswith(_SHARED):
        return shared_ref(queue[len(_SHARED) :])
    if queue.startswith(_TENANT):
        return queue.split(":", 2)[-1]
    return queue
