"""Settings, read once from KAIROS_* environment variables."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def _env(name: str, default: str) -> str:
    return os.environ.get(f"KAIROS_{name}", default)


def _csv(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


@dataclass(frozen=True)
class Settings:
    """Every knob Kairos has. Field names map to KAIROS_<NAME> (upper case)."""

    home: Path = field(default_factory=lambda: Path(_env("HOME", ".kairos")).resolve())
    # Empty: start (or join) the embedded PostgreSQL under home/pgdata.
    database_url: str = field(default_factory=lambda: _env("DATABASE_URL", ""))
    # SERIALIZABLE matches CockroachDB's default; the retry helper absorbs 40001.
    db_isolation: str = field(default_factory=lambda: _env("DB_ISOLATION", "SERIALIZABLE"))
    db_pool_size: int = field(default_factory=lambda: int(_env("DB_POOL_SIZE", "10")))
    api_host: str = field(default_factory=lambda: _env("API_HOST", "127.0.0.1"))
    api_port: int = field(default_factory=lambda: int(_env("API_PORT", "8080")))
    # API processes sharing the port (SO_REUSEPORT); one per CPU by default.
    api_workers: int = field(default_factory=lambda: int(_env("API_WORKERS", str(os.cpu_count() or 1))))
    grpc_host: str = field(default_factory=lambda: _env("GRPC_HOST", "127.0.0.1"))
    grpc_port: int = field(default_factory=lambda: int(_env("GRPC_PORT", "50051")))
    # Scheduler (shard leases, loader, dispatcher).
    shard_count: int = 256
    lease_ttl_s: float = field(default_factory=lambda: float(_env("LEASE_TTL_S", "10")))
    loader_interval_s: float = field(default_factory=lambda: float(_env("LOADER_INTERVAL_S", "1")))
    # Executor.
    http_egress_allow: tuple[str, ...] = field(
        default_factory=lambda: _csv(_env("HTTP_EGRESS_ALLOW", ""))
    )
    http_concurrency: int = field(default_factory=lambda: int(_env("HTTP_CONCURRENCY", "64")))
    # Job limits.
    max_payload_bytes: int = 64 * 1024
    max_schedule_horizon_days: int = field(
        default_factory=lambda: int(_env("MAX_SCHEDULE_HORIZON_DAYS", "3660"))
    )
    # `kairos up --demo`: the API also serves POST /demo/echo, the demo job's target.
    demo: bool = field(default_factory=lambda: _env("DEMO", "") == "1")
    log_level: str = field(default_factory=lambda: _env("LOG_LEVEL", "INFO"))
    log_format: str = field(default_factory=lambda: _env("LOG_FORMAT", "json"))

    @property
    def pgdata(self) -> Path:
        return self.home / "pgdata"

    @property
    def api_url(self) -> str:
        return f"http://{self.api_host}:{self.api_port}"

    @property
    def grpc_addr(self) -> str:
        return f"{self.grpc_host}:{self.grpc_port}"


def load() -> Settings:
    return Settings()
