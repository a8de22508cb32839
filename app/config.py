"""Settings: every KAIROS_* variable the server reads, parsed and validated here and nowhere else.

Each field of ``Settings`` (and of ``WorkerSettings``, what ``kairos worker`` reads) names its
variable, its parser and a one-line description in its field metadata. ``load()`` reads the
environment once; a bad value raises ``InvalidSetting``, which the CLI prints as one line
(``error: KAIROS_API_PORT must be an integer 1-65535, got 'abc'``) before exiting with code 2.
The tables of docs/configuration.md are rendered from the same metadata:
``python -m app.config_docs --markdown`` prints them, ``--write docs/configuration.md`` updates them.

The tier configs (``DispatcherConfig``, ``LeaserConfig``, ``LoaderConfig``, ...) are built from
``Settings`` by their ``from_settings``; nothing below app/ reads the environment itself. The tenant
SDK (kairos_sdk) is a separate distribution and reads KAIROS_GRPC_ADDR and KAIROS_API_KEY for itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from app._config_fields import (
    CSV,
    DATABASE_URL,
    DIRECTORY,
    FERNET_KEYS,
    FLAG,
    ISOLATION_LEVELS,
    LOG_FORMATS,
    LOG_LEVELS,
    PAYLOAD_INLINE_BYTES_DEFAULT,
    PAYLOAD_MAX_BYTES_DEFAULT,
    PORTS,
    PROXIES,
    SECRET,
    SECTIONS,
    FernetKeys,
    InvalidSetting,
    choice,
    integer,
    number,
    read,
    setting,
    text,
)
from app._config_worker import WorkerSettings

# Named here for their users (app.config_docs, the tests), with what ``kairos worker`` reads.
__all__ = [
    "PAYLOAD_MAX_BYTES_DEFAULT",
    "SECTIONS",
    "InvalidSetting",
    "Settings",
    "WorkerSettings",
    "load",
    "load_worker",
]


@dataclass(frozen=True)
class Settings:
    """Every knob the server has; ``load()`` fills it from the environment."""

    home: Path = setting(  # noqa: RUF009 - setting() is dataclasses.field() with the variable's description
        "KAIROS_HOME",
        ".kairos",
        DIRECTORY,
        factory=lambda: Path(".kairos").resolve(),
        doc="state directory: the embedded database (`pgdata/`), `kairos up`'s child logs (`logs/`), the "
        "demo key (`demo.key`) and, with the embedded database, the key sealing signing secrets (`secret.key`)",
    )
    database_url: str = setting(
        "KAIROS_DATABASE_URL",
        "",
        DATABASE_URL,
        "`postgresql://...` (PostgreSQL >= 15) or `cockroachdb://...`; empty: start or join the embedded "
        "PostgreSQL under `KAIROS_HOME`; every session runs in UTC (`-c timezone=UTC` is added to the URL's "
        "`options`, after its own)",
    )
    read_database_url: str = setting(
        "KAIROS_READ_DATABASE_URL",
        "",
        DATABASE_URL,
        "a read replica (PostgreSQL streaming standby) for reads that tolerate a few seconds of staleness: job "
        "history, attempts, dead-letter lists, `/v1/stats`, `/v1/status` and the dashboard; its transactions are "
        "read-only; empty: those reads go to `KAIROS_DATABASE_URL` (on CockroachDB as follower reads, "
        "[cockroachdb.md](cockroachdb.md))",
    )
    # SERIALIZABLE matches CockroachDB's default; the retry helper absorbs 40001.
    db_isolation: str = setting(
        "KAIROS_DB_ISOLATION",
        "SERIALIZABLE",
        choice(ISOLATION_LEVELS, upper=True),
        "isolation of transactions that do not choose their own (the hot paths run at READ COMMITTED, "
        "see [design.md](design.md))",
    )
    db_pool_size: int = setting(
        "KAIROS_DB_POOL_SIZE", 10, integer(1), "connections per process (and as many again as overflow)"
    )
    db_statement_timeout_s: float = setting(
        "KAIROS_DB_STATEMENT_TIMEOUT_S",
        30.0,
        number(),
        shown="`30`",
        doc="longest a statement may run, and a transaction may sit idle between statements, before the "
        "database ends it (`statement_timeout`, `idle_in_transaction_session_timeout`); a transaction with "
        "no answer for twice this long is abandoned by the process; migrations are exempt; 0: no bound "
        "([operations.md](operations.md))",
    )
    up_liveness_timeout_s: float = setting(
        "KAIROS_UP_LIVENESS_TIMEOUT_S",
        10.0,
        number(exclusive=True),
        shown="`10`",
        doc="`kairos up`: a tier whose `/healthz` has not answered 200 for this long (stopped, or its loop "
        "wedged) is killed and restarted ([operations.md](operations.md))",
    )
    api_host: str = setting("KAIROS_API_HOST", "127.0.0.1", text(), "REST API listen address")
    api_port: int = setting("KAIROS_API_PORT", 8080, integer(1, 65535), "REST API port")
    api_max_header_bytes: int = setting(
        "KAIROS_API_MAX_HEADER_BYTES",
        32768,
        integer(1024, 1024 * 1024),
        "largest request line plus headers the REST API reads; a larger request gets 431 (problem+json) and "
        "the connection is closed",
    )
    api_workers: int = setting(
        "KAIROS_API_WORKERS",
        None,
        integer(1),
        shown="CPU count",
        factory=lambda: os.cpu_count() or 1,
        doc="`kairos api` processes sharing the port (SO_REUSEPORT); with more than 1 the command supervises "
        "them and restarts one that dies",
    )
    grpc_host: str = setting("KAIROS_GRPC_HOST", "127.0.0.1", text(), "worker protocol listen address (executor)")
    grpc_port: int = setting(
        "KAIROS_GRPC_PORT", 50051, integer(0, 65535, " (0 picks a free port)"), "worker protocol port (executor)"
    )
    # Loopback by default, like the other hosts: per-tenant series live there. In a pod the chart sets the
    # pod's address, which the kubelet probes and Prometheus scrapes (with KAIROS_METRICS_TOKEN).
    metrics_host: str = setting(
        "KAIROS_METRICS_HOST",
        "127.0.0.1",
        text(),
        "listen address of the metrics port (`/metrics`, `/healthz`, `/readyz`; see "
        "[observability.md](observability.md)); the Helm chart sets the pod's address",
    )
    metrics_token: str = setting(
        "KAIROS_METRICS_TOKEN",
        "",
        SECRET,
        shown="empty",
        doc="bearer token `/metrics` requires, on the metrics port and on the API port (`Authorization: Bearer "
        "<token>`, compared in constant time; `/healthz` and `/readyz` never need it); empty: none",
    )
    metrics_port: int = setting(
        "KAIROS_METRICS_PORT",
        9464,
        integer(0, 65535, " (0: none)"),
        "metrics port of a scheduler or executor, and of `kairos api` (its supervisor answers for all its "
        "workers; `/metrics` is on the API port too); `kairos up` gives it to the scheduler and the next port "
        "to the executor",
    )
    otlp_endpoint: str = setting(
        "KAIROS_OTLP_ENDPOINT",
        "",
        text(required=False),
        "OTLP/HTTP collector base URL (`http://collector:4318`): metrics are also pushed to "
        "`<url>/v1/metrics`; empty: Prometheus scrapes only",
    )
    otlp_interval_s: float = setting(
        "KAIROS_OTLP_INTERVAL_S",
        15.0,
        number(exclusive=True),
        shown="`15`",
        doc="seconds between OTLP metric exports (with `KAIROS_OTLP_ENDPOINT`)",
    )
    api_metrics_dir: str = setting(
        "KAIROS_API_METRICS_DIR",
        "",
        text(required=False),
        section="internal",
        doc="set by `kairos api` for the worker processes it supervises: the directory of the sockets on which "
        "its tier-wide `/metrics` asks each of them; do not set it",
    )
    lease_ttl_s: float = setting(
        "KAIROS_LEASE_TTL_S",
        10.0,
        number(exclusive=True),
        shown="`10`",
        doc="scheduler shard lease TTL: how long a dead scheduler's shards stay unowned (not the worker "
        "lease, which the worker asks for)",
    )
    loader_interval_s: float = setting(
        "KAIROS_LOADER_INTERVAL_S",
        1.0,
        number(exclusive=True),
        shown="`1`",
        doc="how often the due loader runs its near scan",
    )
    http_egress_allow: tuple[str, ...] = setting(
        "KAIROS_HTTP_EGRESS_ALLOW",
        (),
        CSV,
        shown="empty",
        doc="comma-separated IPs, CIDRs or host names HTTP targets may reach despite the egress policy "
        "([http-delivery.md](http-delivery.md))",
    )
    http_concurrency: int = setting(
        "KAIROS_HTTP_CONCURRENCY", 512, integer(1), "HTTP deliveries in flight per executor"
    )
    http_per_tenant: int = setting(
        "KAIROS_HTTP_PER_TENANT",
        0,
        integer(0),
        doc="HTTP deliveries of one tenant in flight per executor (0: half of KAIROS_HTTP_CONCURRENCY)",
    )
    http_per_origin: int = setting(
        "KAIROS_HTTP_PER_ORIGIN",
        256,
        integer(1),
        doc="ceiling of the adaptive limit of one (tenant, origin)'s HTTP deliveries in flight per executor "
        "([http-delivery.md](http-delivery.md))",
    )
    http_lease_s: float = setting(
        "KAIROS_HTTP_LEASE_S",
        15.0,
        number(minimum=1.0),
        shown="`15`",
        doc="lease of an HTTP delivery, renewed every third of it while the request runs (never past the job's "
        "timeout): how soon another executor retries the deliveries of one that died "
        "([http-delivery.md](http-delivery.md))",
    )
    max_schedule_horizon_days: int = setting(
        "KAIROS_MAX_SCHEDULE_HORIZON_DAYS",
        3660,
        integer(1, 36600),
        "how far ahead a `runAt`, a `startAt`, a cron job's first occurrence or a schedule preview's `from` may lie",
    )
    min_fire_interval_s: int = setting(
        "KAIROS_MIN_FIRE_INTERVAL_S",
        10,
        integer(10, 86400),
        "shortest time a recurring job may leave between two fire times: an `every` shorter than this, or a "
        "cron expression whose closest two fire times are nearer (in wall-clock time), is refused with 422; "
        "cron fires at most once a minute whatever this says, so `* * * * *` passes unless this is above 60",
    )
    herd_warning_threshold: int = setting(
        "KAIROS_HERD_WARNING_THRESHOLD",
        1000,
        integer(1),
        "a new recurring job whose first occurrence lands on a minute where its tenant already has at "
        "least this many occurrences due gets a `warnings` entry suggesting `jitterSeconds`",
    )
    # Data lifecycle (docs/retention.md): the object store, execution-history retention, large payloads.
    archive_url: str = setting(
        "KAIROS_ARCHIVE_URL",
        "",
        text(required=False),
        shown="`KAIROS_HOME/objects`",
        doc="the object store of execution-history archives (`history/`) and of payloads over the inline limit "
        "(`payloads/`): a directory, `file:///path`, `s3://bucket/prefix` (S3 or S3-compatible), `gs://`, "
        "`az://` (these need `pip install 'kairos[objects]'`); every API and executor process must reach the "
        "same store",
    )
    archive_endpoint: str = setting(
        "KAIROS_ARCHIVE_ENDPOINT",
        "",
        text(required=False),
        "endpoint of an S3-compatible store for `KAIROS_ARCHIVE_URL` (`http://127.0.0.1:9000` for MinIO); "
        "empty: AWS, or `AWS_ENDPOINT_URL`; credentials come from the usual `AWS_*` variables or the machine's role",
    )
    archive_region: str = setting(
        "KAIROS_ARCHIVE_REGION",
        "",
        text(required=False),
        "region of the `s3://` bucket; empty: `AWS_REGION` / `AWS_DEFAULT_REGION`",
    )
    retention_days: int = setting(
        "KAIROS_RETENTION_DAYS",
        30,
        integer(0),
        "finished executions (and their attempts) older than this are archived to the object store as gzipped "
        "JSON lines and deleted, by the executors; `0`: keep every execution",
    )
    retention_interval_s: float = setting(
        "KAIROS_RETENTION_INTERVAL_S",
        300.0,
        number(exclusive=True),
        shown="`300`",
        doc="how often an executor looks for history to archive (a full batch is followed at once by the next)",
    )
    retention_batch: int = setting(
        "KAIROS_RETENTION_BATCH",
        1000,
        integer(1, 100_000),
        "executions archived and deleted per transaction (one archive object each)",
    )
    payload_inline_bytes: int = setting(
        "KAIROS_PAYLOAD_INLINE_BYTES",
        PAYLOAD_INLINE_BYTES_DEFAULT,
        integer(1),
        "a payload larger than this (as compact JSON) is kept in the object store and the job row holds its "
        "reference; also the most a dead-letter replay's payload may carry",
    )
    payload_max_bytes: int = setting(
        "KAIROS_PAYLOAD_MAX_BYTES",
        PAYLOAD_MAX_BYTES_DEFAULT,
        integer(1),
        "the largest payload a job may carry (422 naming `/payload` above it); a request body over it plus "
        "64 KiB is refused with 413",
    )
    # `kairos up --demo`: the API also serves POST /demo/echo, the demo job's target.
    demo: bool = setting(
        "KAIROS_DEMO",
        False,
        FLAG,
        shown="empty",
        doc="`1`: the API also serves `POST /demo/echo` (set by `kairos up --demo`)",
    )
    # The operator's read-only view of every tenant's figures (app.api.viewer).
    admin_token: str = setting(
        "KAIROS_ADMIN_TOKEN",
        "",
        SECRET,
        shown="empty",
        doc="operator token for every tenant's figures: `/v1/stats/*`, `/v1/status` and `/dashboard` accept "
        "`Authorization: Bearer <token>` (compared in constant time); empty: no operator access",
    )
    # Failed-authentication throttle per client address (app.api.auth, docs/quotas.md).
    auth_failure_limit: int = setting(
        "KAIROS_AUTH_FAILURE_LIMIT",
        20,
        integer(0, note=" (0: no throttle)"),
        "failed API-key attempts one client address may make in a burst (and then this many per "
        "`KAIROS_AUTH_FAILURE_WINDOW_S`) before the API answers its requests 429 without checking the key "
        "([quotas.md](quotas.md))",
    )
    auth_failure_window_s: float = setting(
        "KAIROS_AUTH_FAILURE_WINDOW_S",
        60.0,
        number(exclusive=True),
        shown="`60`",
        doc="the window of `KAIROS_AUTH_FAILURE_LIMIT`, in seconds",
    )
    trusted_proxies: tuple[str, ...] = setting(
        "KAIROS_TRUSTED_PROXIES",
        (),
        PROXIES,
        shown="empty",
        doc="the reverse proxies or load balancers in front of the API whose `X-Forwarded-For` and "
        "`X-Forwarded-Proto` are believed (addresses or CIDR networks, comma-separated; uvicorn's "
        "`forwarded_allow_ips`); empty: none, not even loopback, and the client address is the TCP peer "
        "([quotas.md](quotas.md))",
    )
    # Regions (docs/regions.md): schedulers outside the primary region stand by.
    region: str = setting(
        "KAIROS_REGION",
        "",
        text(required=False),
        "the region this process runs in (a label such as `eu-west`, shown in logs and `shard_leases.region`); "
        "empty: the primary region",
    )
    primary_region: str = setting(
        "KAIROS_PRIMARY_REGION",
        "",
        text(required=False),
        "the region whose schedulers take the shards; schedulers of other regions stand by and take only shards "
        "whose lease ended `KAIROS_REGION_TAKEOVER_GRACE_S` ago; empty: every scheduler is active",
    )
    region_takeover_grace_s: float = setting(
        "KAIROS_REGION_TAKEOVER_GRACE_S",
        15.0,
        number(),
        shown="`15`",
        doc="how long a shard's lease must have ended before a standby-region scheduler takes it (on top of "
        "`KAIROS_LEASE_TTL_S`), and how long the primary region's schedulers must have been back before a "
        "standby hands the shards back",
    )
    region_failback: bool = setting(
        "KAIROS_REGION_FAILBACK",
        True,
        FLAG,
        shown="`1`",
        doc="`1`: standby-region schedulers hand their shards back once the primary region's have been back "
        "for the grace; `0`: they keep them until they stop (fail back by hand)",
    )
    # Signing secrets at rest (app.store.sealing, docs/http-delivery.md).
    secret_key: FernetKeys = setting(  # noqa: RUF009 - as home above
        "KAIROS_SECRET_KEY",
        FernetKeys(),
        FERNET_KEYS,
        shown="empty: `KAIROS_HOME/secret.key`, generated, with the embedded database; required with "
        "`KAIROS_DATABASE_URL`",
        doc="the keys sealing tenants' HTTP signing secrets in the database: the first seals, any opens (put a "
        "new key first, run `kairos db reseal-secrets`, then drop the old one)",
    )
    signing_secret_overlap_s: float = setting(
        "KAIROS_SIGNING_SECRET_OVERLAP_S",
        86400.0,
        number(),
        shown="`86400` (24 h)",
        doc="how long `kairos tenants rotate-secret` keeps signing with the previous secret as well (its "
        "`--overlap` wins)",
    )
    # Identity tokens for HTTP targets (app.executor.oidc, app.store.oidc_keys, docs/http-delivery.md).
    oidc_issuer: str = setting(
        "KAIROS_OIDC_ISSUER",
        "",
        text(required=False),
        shown="empty: the API's URL (`http://KAIROS_API_HOST:KAIROS_API_PORT`)",
        doc="the `iss` of the identity tokens HTTP targets receive: the public URL under which the API serves "
        "`/.well-known/openid-configuration` (set it to the URL receivers reach in production)",
    )
    oidc_token_ttl_s: int = setting(
        "KAIROS_OIDC_TOKEN_TTL_S",
        900,
        integer(60, 3600),
        shown="`900` (15 min)",
        doc="how long an identity token is valid (`exp - iat`, 60-3600); a token is reused for deliveries of the "
        "same job and audience until a third of that is left",
    )
    oidc_key_algorithm: str = setting(
        "KAIROS_OIDC_KEY_ALGORITHM",
        "ES256",
        choice(("ES256", "RS256"), upper=True),
        doc="`ES256` or `RS256`: the algorithm of keys made from now on (the first key, and each "
        "`kairos db rotate-oidc-key` without `--algorithm`)",
    )
    oidc_key_publish_ahead_s: float = setting(
        "KAIROS_OIDC_KEY_PUBLISH_AHEAD_S",
        900.0,
        number(),
        shown="`900` (15 min)",
        doc="how long a key made by `kairos db rotate-oidc-key` is published before it signs (its `--publish-ahead` "
        "wins), so receivers that cache the key set (`/.well-known/jwks.json` says max-age 300) have it first",
    )
    oidc_key_overlap_s: float = setting(
        "KAIROS_OIDC_KEY_OVERLAP_S",
        86400.0,
        number(),
        shown="`86400` (24 h)",
        doc="how long `kairos db rotate-oidc-key` keeps the replaced key published (its `--overlap` wins; at least "
        "`KAIROS_OIDC_TOKEN_TTL_S`)",
    )
    log_level: str = setting("KAIROS_LOG_LEVEL", "INFO", choice(LOG_LEVELS, upper=True), "log level")
    log_format: str = setting(
        "KAIROS_LOG_FORMAT",
        "json",
        choice(LOG_FORMATS, upper=False),
        "`json` (one object per line on stderr) or `text` (one line per record); `kairos up`'s own output "
        "is always text",
    )

    # Scheduler duties (DispatcherConfig, LeaserConfig, LoaderConfig.from_settings).
    leaser_interval_s: float = setting(
        "KAIROS_LEASER_INTERVAL_S",
        0.0,
        number(),
        section="scheduler",
        shown="`0`",
        doc="time between shard-leaser ticks; 0 means min(`KAIROS_LEASE_TTL_S` / 3, 1 s)",
    )
    loader_near_s: float | None = setting(
        "KAIROS_LOADER_NEAR_S",
        None,
        number(exclusive=True),
        section="scheduler",
        shown="max(5, 3 x `KAIROS_LOADER_INTERVAL_S`)",
        doc="the near scan reads rows due within this many seconds",
    )
    loader_window_interval_s: float = setting(
        "KAIROS_LOADER_WINDOW_INTERVAL_S",
        10.0,
        number(),
        section="scheduler",
        shown="`10`",
        doc="how often the full window scan (up to the end of the next minute) runs",
    )
    loader_max_rows_per_tick: int = setting(
        "KAIROS_LOADER_MAX_ROWS_PER_TICK",
        100_000,
        integer(1),
        section="scheduler",
        shown="`100000`",
        doc="rows the window scan reads per tick (a backlog is read over several ticks)",
    )
    dispatch_batch_size: int = setting(
        "KAIROS_DISPATCH_BATCH_SIZE", 2000, integer(1), section="scheduler", doc="due entries per dispatch transaction"
    )
    dispatch_inflight_batches: int = setting(
        "KAIROS_DISPATCH_INFLIGHT_BATCHES",
        3,
        integer(1),
        section="scheduler",
        doc="dispatch transactions in flight at once (halved under contention, grown back after clean batches)",
    )
    dispatch_ahead_s: float = setting(
        "KAIROS_DISPATCH_AHEAD_S",
        5.0,
        number(),
        section="scheduler",
        shown="`5`",
        doc="how long before its due time an occurrence becomes an execution (ready at the due time), at least",
    )
    dispatch_ahead_max_s: float = setting(
        "KAIROS_DISPATCH_AHEAD_MAX_S",
        30.0,
        number(),
        section="scheduler",
        shown="`30`",
        doc="how long before its due time at most: more than `KAIROS_DISPATCH_AHEAD_S` when what falls due "
        "soon takes longer to dispatch at the rate the scheduler measured (never below that setting)",
    )
    catch_up_per_tenant_per_s: float = setting(
        "KAIROS_CATCH_UP_PER_TENANT_PER_S",
        10.0,
        number(exclusive=True),
        section="scheduler",
        shown="`10`",
        doc="how fast `catch_up` misfires of one tenant become ready",
    )
    dispatch_isolation: str | None = setting(
        "KAIROS_DISPATCH_ISOLATION",
        "READ COMMITTED",
        choice(ISOLATION_LEVELS, upper=True, empty=None),
        section="scheduler",
        doc="isolation of dispatch transactions; empty: `KAIROS_DB_ISOLATION`",
    )

    api_reuse_port: bool = setting(
        "KAIROS_API_REUSE_PORT",
        False,
        FLAG,
        section="internal",
        shown="empty",
        doc="set to `1` by `kairos api` for the worker processes it supervises (they share the port); do not set it",
    )
    supervisor_token: str = setting(
        "KAIROS_SUPERVISOR_TOKEN",
        "",
        text(required=False),
        section="internal",
        shown="empty",
        doc="set by `kairos up` for its children, a new random value per run: `/healthz` and the executor's "
        "gRPC port answer it, so `kairos up` knows the ports it probes are served by its own processes; "
        "do not set it",
    )
    installation_ports: tuple[int, ...] = setting(
        "KAIROS_INSTALLATION_PORTS",
        (),
        PORTS,
        section="internal",
        shown="empty",
        doc="set by `kairos up` and `kairos api` for their children: every port the installation listens on "
        "(API, gRPC, each metrics port, the database), which HTTP targets may never reach, at submit as at "
        "delivery ([http-delivery.md](http-delivery.md)); do not set it",
    )
    up_heartbeat_file: str = setting(
        "KAIROS_UP_HEARTBEAT_FILE",
        "",
        text(required=False),
        section="internal",
        shown="empty",
        doc="set by `kairos up` for its scheduler and executor: a file the process touches every second while "
        "its event loop and watched loops run, the supervisor's liveness check (no port needed); do not set it",
    )

    @property
    def max_payload_bytes(self) -> int:
        """The inline payload limit (what a dead-letter replay's payload may carry)."""
        return self.payload_inline_bytes

    @property
    def pgdata(self) -> Path:
        return self.home / "pgdata"

    @property
    def api_url(self) -> str:
        return f"http://{self.api_host}:{self.api_port}"

    @property
    def issuer(self) -> str:
        """The identity tokens' ``iss``: KAIROS_OIDC_ISSUER, else the API's URL (no trailing slash)."""
        return (self.oidc_issuer or self.api_url).rstrip("/")

    @property
    def grpc_addr(self) -> str:
        return f"{self.grpc_host}:{self.grpc_port}"


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """The server's settings from ``environ`` (default: this process's environment); InvalidSetting if bad."""
    return read(Settings, os.environ if environ is None else environ)


def load_worker(environ: Mapping[str, str] | None = None) -> WorkerSettings:
    """What ``kairos worker`` reads from ``environ`` (default: this process's environment)."""
    return read(WorkerSettings, os.environ if environ is None else environ)
