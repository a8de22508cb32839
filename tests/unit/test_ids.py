"""Job ids: version-4 UUIDs, unique, and never shared with a forked child."""

from __future__ import annotations

import os
import uuid

from app.domain.ids import random_uuid


def test_ids_are_version_4_and_unique_across_many_pool_refills() -> None:
    ids = [random_uuid() for _ in range(5_000)]
    assert len(set(ids)) == len(ids)
    assert all(i.version == 4 and i.variant == uuid.RFC_4122 for i in ids)


def test_a_forked_child_does_not_reuse_the_parents_pool() -> None:
    random_uuid()  # the pool now holds unread ids
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id and leave at once
        os.write(write, random_uuid().bytes)
        os._exit(0)
    os.close(write)
    child = uuid.UUID(bytes=os.read(read, 16))
    os.close(read)
    os.waitpid(pid, 0)
    assert child != random_uuid()
