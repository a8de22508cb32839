"""The parts of a settings field (app.config): the parsers that turn a variable's text into its value,
the choices some of them take, and ``setting``, the dataclass field that names its variable."""

from __future__ import annotations

import base64
import ipaddress
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from app.errors import KairosError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

ISOLATION_LEVELS = ("SERIALIZABLE", "REPEATABLE READ", "READ COMMITTED")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("json", "text")
# Payload limits (KAIROS_PAYLOAD_INLINE_BYTES, KAIROS_PAYLOAD_MAX_BYTES): inline in the job row up to the
# first, in the object store up to the second (app/store/payloads.py).
PAYLOAD_INLINE_BYTES_DEFAULT = 64 * 1024
PAYLOAD_MAX_BYTES_DEFAULT = 4 * 1024 * 1024


# -- parsers: each turns the variable's text into the field's value or raises ValueError ---------------


@dataclass(frozen=True)
class Parser:
    allowed: str  # completes "KAIROS_X must be ...", e.g. "an integer 1-65535"
    parse: Callable[[str], Any]
    hidden: bool = False  # a bad value is not echoed back (key material)


def integer(low: int, high: int | None = None, note: str = "") -> Parser:
    def parse(raw: str) -> int:
        value = int(raw.strip())
        if value < low or (high is not None and value > high):
            raise ValueError(raw)
        return value

    bounds = f"{low}-{high}" if high is not None else f">= {low}"
    return Parser(f"an integer {bounds}{note}", parse)


def number(*, minimum: float = 0.0, exclusive: bool = False) -> Parser:
    def parse(raw: str) -> float:
        value = float(raw.strip())
        if not math.isfinite(value) or value < minimum or (exclusive and value == minimum):
            raise ValueError(raw)
        return value

    return Parser(f"a number {'>' if exclusive else '>='} {minimum:g}", parse)


def choice(options: tuple[str, ...], *, upper: bool, empty: Any = MISSING) -> Parser:
    """One of ``options``; case-insensitive, ``_`` for a space; ``empty`` (if given) for the empty value."""

    def parse(raw: str) -> Any:
        if raw.strip() == "" and empty is not MISSING:
            return empty
        value = " ".join(raw.replace("_", " ").split())
        value = value.upper() if upper else value.lower()
        if value not in options:
            raise ValueError(raw)
        return value

    allowed = "one of " + ", ".join(options) + (" or empty" if empty is not MISSING else "")
    return Parser(allowed, parse)


def text(*, required: bool = True) -> Parser:
    def parse(raw: str) -> str:
        if required and not raw.strip():
            raise ValueError(raw)
        return raw

    return Parser("a non-empty string" if required else "a string", parse)


def _database_url(raw: str) -> str:
    if raw and not re.match(r"(postgres|postgresql|cockroachdb)(\+\w+)?://", raw):
        raise ValueError(raw)
    return raw


def _directory(raw: str) -> Path:
    if not raw.strip():
        raise ValueError(raw)
    return Path(raw).resolve()


def _csv(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _flag(raw: str) -> bool:
    if raw.strip() not in ("", "0", "1"):
        raise ValueError(raw)
    return raw.strip() == "1"


def _ports(raw: str) -> tuple[int, ...]:
    ports = tuple(int(p) for p in _csv(raw))  # ValueError when one is no integer
    if any(not 1 <= p <= 65535 for p in ports):
        raise ValueError(raw)
    return ports


def _proxies(raw: str) -> tuple[str, ...]:
    entries = _csv(raw)
    for entry in entries:
        if entry != "*":
            ipaddress.ip_network(entry, strict=False)  # ValueError when it is neither an address nor a network
    return entries


DATABASE_URL = Parser("empty or a postgresql://, postgres:// or cockroachdb:// URL", _database_url)
DIRECTORY = Parser("a directory path", _directory)
CSV = Parser("a comma-separated list", _csv)
FLAG = Parser("1, 0 or empty", _flag)
PORTS = Parser("empty or a comma-separated list of ports (1-65535)", _ports)
PROXIES = Parser("empty or a comma-separated list of IP addresses or networks (CIDR), or *", _proxies)


def _secret(raw: str) -> str:
    if raw.strip() and len(raw.strip()) < 16:
        raise ValueError(raw)
    return raw.strip()


SECRET = Parser("empty or a string of at least 16 characters", _secret)


class FernetKeys(tuple[str, ...]):
    """KAIROS_SECRET_KEY's keys; its repr never shows them."""

    def __repr__(self) -> str:
        return f"<{len(self)} key(s)>"


def _fernet_keys(raw: str) -> FernetKeys:
    keys = _csv(raw)
    for key in keys:  # what cryptography's Fernet(key) accepts: 32 bytes, URL-safe base64
        if len(key) != 44 or len(base64.urlsafe_b64decode(key.encode())) != 32:
            raise ValueError(raw)
    return FernetKeys(keys)


FERNET_KEYS = Parser(
    "empty or a comma-separated list of Fernet keys (44 characters of URL-safe base64 each; "
    "`kairos db new-secret-key` prints one)",
    _fernet_keys,
    hidden=True,
)


# -- fields --------------------------------------------------------------------------------------------

SECTIONS = {
    "server": "Server (api, scheduler, executor, `kairos up`, operator commands)",
    "scheduler": "Scheduler tuning (`app/scheduler/`)",
    "internal": "Internal",
    "worker": "Worker side (`kairos worker`)",
}


def setting(
    variable: str,
    default: Any,
    parser: Parser,
    doc: str,
    *,
    section: str = "server",
    shown: str | None = None,
    factory: Callable[[], Any] | None = None,
) -> Any:
    """A settings field: its variable, parser, the default as the docs show it, and one line of doc."""
    meta = {
        "variable": variable,
        "parser": parser,
        "doc": doc,
        "section": section,
        "shown": shown if shown is not None else (f"`{default}`" if default not in ("", None) else "empty"),
    }
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


class InvalidSetting(KairosError):
    """A KAIROS_* variable has a value the process cannot run with."""

    def __init__(self, variable: str, allowed: str, got: str) -> None:
        self.variable = variable
        super().__init__(f"{variable} must be {allowed}, got {got!r}")


S = TypeVar("S", bound="DataclassInstance")


def read(cls: type[S], variables: Mapping[str, str]) -> S:
    """A settings dataclass with each field whose variable ``variables`` holds parsed; InvalidSetting if bad."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        raw = variables.get(f.metadata["variable"])
        if raw is None:
            continue
        parser: Parser = f.metadata["parser"]
        try:
            values[f.name] = parser.parse(raw)
        except ValueError:
            raise InvalidSetting(
                f.metadata["variable"], parser.allowed, f"{len(raw)} characters, not shown" if parser.hidden else raw
            ) from None
    return cls(**values)
