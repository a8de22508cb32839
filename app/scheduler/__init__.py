"""The scheduler tier: turns "due at T" into "ready now".

Model
-----
Jobs hash onto 256 logical shards (``app.domain.shards.shard_of``). Each scheduler process runs
three duties around one in-memory ownership map and one heap:

``ShardLeaser`` (leases.py)
    Holds a fair share of the shards through rows in ``shard_leases`` (owner, lease_until,
    revision) on the database clock; live processes announce themselves in
    ``scheduler_members`` and split 256 evenly. Taking a shard bumps its revision, which is the
    fencing token of every dispatch for that shard. Shards are handed back on graceful shutdown
    and taken over by the survivors once a dead process's lease expires.

``DueLoader`` (loader.py)
    Range-scans ``due_index`` of the owned shards (current and next minute, plus any overdue
    backlog, bounded per tick) into the ``DueHeap`` (heap.py), tagging every entry with the
    revision it was loaded under. Entries of lost shards are dropped.

``Dispatcher`` (dispatcher.py)
    Pops due entries, fairly across tenants and within their dispatch-rate quotas, and
    dispatches them in batches: one transaction per batch re-checks (owner, revision) of each
    entry's shard, deletes the due rows, inserts executions (UNIQUE (job_id, scheduled_for)
    makes a re-dispatch a no-op), applies overlap and misfire policies, and materialises each
    cron job's next occurrence.

Guarantees: an occurrence is dispatched at most once (the unique key) and at least once (its
due row is deleted only in the transaction that records its execution, skipped or ready); a
process that lost a shard cannot dispatch for it (the fence); dispatch never depends on a lock
or on LISTEN/NOTIFY, only on guarded statements and unique constraints.

``service.serve`` runs the three duties as named, supervised tasks (``kairos scheduler``).
"""
