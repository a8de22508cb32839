"""``WorkerSettings``: what ``kairos worker`` reads (re-exported by app.config, which loads it)."""

from __future__ import annotations

from dataclasses import dataclass

from app._config_fields import LOG_FORMATS, LOG_LEVELS, choice, integer, setting, text


@dataclass(frozen=True)
class WorkerSettings:
    """What ``kairos worker`` reads (the tenant side; kairos_sdk reads KAIROS_GRPC_ADDR and KAIROS_API_KEY
    itself as well). The executor's address is ``executor_addr``."""

    grpc_addr: str = setting(
        "KAIROS_GRPC_ADDR",
        "",
        text(),
        section="worker",
        shown="`KAIROS_GRPC_HOST:KAIROS_GRPC_PORT`",
        doc="executor address, `host:port`; wins over `KAIROS_GRPC_HOST` and "
        "`KAIROS_GRPC_PORT` (and `kairos worker --addr` over all three)",
    )
    grpc_host: str = setting(
        "KAIROS_GRPC_HOST",
        "127.0.0.1",
        text(),
        section="worker",
        doc="executor host when `KAIROS_GRPC_ADDR` is empty (the executor listens on it)",
    )
    grpc_port: int = setting(
        "KAIROS_GRPC_PORT",
        50051,
        integer(1, 65535),
        section="worker",
        doc="executor port when `KAIROS_GRPC_ADDR` is empty (the executor listens on it)",
    )
    api_key: str = setting(
        "KAIROS_API_KEY",
        "",
        text(required=False),
        section="worker",
        shown="none (required by `kairos worker`)",
        doc="a tenant key, or a shared pool's worker key",
    )
    log_level: str = setting(
        "KAIROS_LOG_LEVEL", "INFO", choice(LOG_LEVELS, upper=True), section="worker", doc="log level, as for the server"
    )
    log_format: str = setting(
        "KAIROS_LOG_FORMAT",
        "json",
        choice(LOG_FORMATS, upper=False),
        section="worker",
        doc="`json` or `text`, as for the server",
    )

    @property
    def executor_addr(self) -> str:
        """KAIROS_GRPC_ADDR, else KAIROS_GRPC_HOST:KAIROS_GRPC_PORT (so one environment serves both sides)."""
        if self.grpc_addr:
            return self.grpc_addr
        host = f"[{self.grpc_host}]" if ":" in self.grpc_host and not self.grpc_host.startswith("[") else self.grpc_host
        return f"{host}:{self.grpc_port}"
