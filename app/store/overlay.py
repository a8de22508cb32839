"""The CockroachDB multi-region overlay: ``sql/cockroach/NNNN_*.sql``, applied by
``kairos db upgrade --cockroach-overlay`` after the migrations.

The migrations are the schema both databases share; the overlay is what only CockroachDB has:
database regions and the survival goal, table localities, due_index's split points, row-level TTL
for execution history. It depends on the deployment (which regions, which is primary, how long
history is kept), so its files are templates, rendered here from an ``OverlayPlan``:

* ``{database}``, ``{primary_region}``, ``{secondary_region}``, ``{region}`` become quoted
  identifiers, ``{ttl_days}`` a number of days;
* a ``-- kairos: <condition>`` line applies to the statement after it: ``each-region`` repeats it
  for every database region but the primary, ``if secondary`` keeps it only with a secondary
  region, ``if retention`` / ``unless retention`` with or without a history retention;
* a statement ends at a line ending in ``;``; whole-line ``--`` comments are not sent.

Every statement is idempotent and runs on its own, outside an explicit transaction (CockroachDB
refuses multi-region DDL inside one), so the whole overlay is applied every time it is asked for.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib.resources.abc import Traversable

from sqlalchemy.exc import DBAPIError

from app import errors
from app.store.db import Database, translate
from app.store.queries import COCKROACH, sql_files
from app.store.seam import Store

log = logging.getLogger(__name__)

# The TTL is the archiver's backstop: it deletes a day after the archiver (KAIROS_RETENTION_DAYS) would.
TTL_GRACE_DAYS = 1
# SURVIVE REGION FAILURE keeps a quorum with one region down: it needs three.
MIN_REGIONS = 3
CONDITIONS = frozenset({"each-region", "if secondary", "if retention", "unless retention"})
_DIRECTIVE = re.compile(r"^--\s*kairos:\s*(.*?)\s*$")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_OVERLAY_FILE = re.compile(r"^\d{4}_.+\.sql$")


@dataclass(frozen=True)
class OverlayPlan:
    """What the templates are rendered with."""

    database: str
    primary_region: str
    regions: tuple[str, ...]  # every region of the database, the primary among them
    secondary_region: str | None = None
    retention_days: int = 0  # KAIROS_RETENTION_DAYS; 0 keeps history forever (no TTL)

    @property
    def ttl_days(self) -> int:
        return self.retention_days + TTL_GRACE_DAYS


@dataclass(frozen=True)
class OverlayStatement:
    source: str  # file name
    condition: str | None
    sql: str


def files() -> list[Traversable]:
    return [f for f in sql_files("cockroach") if _OVERLAY_FILE.match(f.name)]


def parse(source: str, script: str) -> list[OverlayStatement]:
    """The statements of one overlay file, each with the condition written above it."""
    out: list[OverlayStatement] = []
    lines: list[str] = []
    condition: str | None = None
    for raw in script.splitlines():
        line = raw.rstrip()
        directive = _DIRECTIVE.match(line.strip())
        if directive:
            if directive.group(1) not in CONDITIONS:
                raise ValueError(f"{source}: unknown overlay directive {directive.group(1)!r}")
            condition = directive.group(1)
            continue
        if not line.strip() or line.lstrip().startswith("--"):
            continue
        lines.append(line)
        if line.endswith(";"):
            out.append(OverlayStatement(source, condition, "\n".join(lines).rstrip(";").strip()))
            lines, condition = [], None
    if lines:
        raise ValueError(f"{source}: the last statement does not end with ';'")
    return out


def quote_identifier(name: str) -> str:
    """Always quoted: region names such as us-east1 are not plain identifiers."""
    return '"' + name.replace('"', '""') + '"'


def _render(statement: OverlayStatement, values: dict[str, str]) -> str:
    def value(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            raise ValueError(f"{statement.source}: no value for {{{m.group(1)}}}")
        return values[m.group(1)]

    return _PLACEHOLDER.sub(value, statement.sql)


def render(plan: OverlayPlan) -> list[OverlayStatement]:
    """Every statement of the overlay for ``plan``, in order, ready to run."""
    base = {
        "database": quote_identifier(plan.database),
        "primary_region": quote_identifier(plan.primary_region),
        "ttl_days": str(plan.ttl_days),
    }
    if plan.secondary_region:
        base["secondary_region"] = quote_identifier(plan.secondary_region)
    out: list[OverlayStatement] = []
    for f in files():
        for s in parse(f.name, f.read_text()):
            if s.condition == "each-region":
                out.extend(
                    OverlayStatement(s.source, s.condition, _render(s, {**base, "region": quote_identifier(region)}))
                    for region in plan.regions
                    if region != plan.primary_region
                )
                continue
            if (
                (s.condition == "if secondary" and not plan.secondary_region)
                or (s.condition == "if retention" and plan.retention_days <= 0)
                or (s.condition == "unless retention" and plan.retention_days > 0)
            ):
                continue
            out.append(OverlayStatement(s.source, s.condition, _render(s, base)))
    return out


def plan_for(
    database: str, cluster_regions: list[str], primary_region: str, secondary_region: str | None, retention_days: int
) -> OverlayPlan:
    """Check the deployment's choices against the cluster; InvalidInput names what is wrong."""
    if not cluster_regions:
        raise errors.InvalidInput(
            "--cockroach-overlay", "the cluster's nodes have no region (start them with --locality=region=...)"
        )
    known = ", ".join(cluster_regions)
    if not primary_region:
        raise errors.InvalidInput(
            "--primary-region", f"give the primary region (or set KAIROS_PRIMARY_REGION); the cluster has {known}"
        )
    if primary_region not in cluster_regions:
        raise errors.InvalidInput("--primary-region", f"{primary_region!r} is not a cluster region ({known})")
    if secondary_region is not None and (secondary_region not in cluster_regions or secondary_region == primary_region):
        raise errors.InvalidInput(
            "--secondary-region", f"{secondary_region!r} is not a cluster region other than the primary ({known})"
        )
    if len(cluster_regions) < MIN_REGIONS:
        raise errors.InvalidInput(
            "--cockroach-overlay",
            f"SURVIVE REGION FAILURE needs {MIN_REGIONS} regions; the cluster has {len(cluster_regions)} ({known})",
        )
    return OverlayPlan(database, primary_region, tuple(cluster_regions), secondary_region, retention_days)


async def _server(db: Database) -> tuple[str, str]:
    return await db.transaction(lambda tx: tx.schema.server_version())


async def apply(
    db: Database, *, primary_region: str, secondary_region: str | None = None, retention_days: int = 0
) -> list[str]:
    """Apply the overlay to ``db``'s database; return the statements run.

    Refuses (InvalidInput, nothing changed) anything but CockroachDB reached through the
    cockroachdb:// driver path, and a plan the cluster's regions cannot hold.
    """
    version, database = await _server(db)
    if "cockroachdb" not in version.lower():
        raise errors.InvalidInput("--cockroach-overlay", f"needs CockroachDB; the database is {version.split(',')[0]}")
    if db.dialect != COCKROACH:
        raise errors.InvalidInput(
            "--cockroach-overlay",
            "connect with a cockroachdb:// URL: with postgresql:// Kairos would not use its CockroachDB statements",
        )
    regions = await db.transaction(lambda tx: tx.schema.cluster_regions())
    plan = plan_for(database, regions, primary_region, secondary_region, retention_days)
    statements = render(plan)
    async with db.engine.connect() as conn:
        autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
        store = Store(autocommit)
        for s in statements:
            try:
                await store.schema.run_script(s.sql)
            except DBAPIError as exc:
                raise translate(exc) from exc
            log.info("overlay statement applied", extra={"source": s.source, "statement": s.sql.splitlines()[0]})
    return [s.sql for s in statements]
