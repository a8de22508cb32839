"""Structured logs: one JSON object per line on stderr, credentials redacted (see the package's docstring)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

import msgspec

# Record attributes that are not fields; uvicorn's color_message repeats msg with terminal escapes.
_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",
}
# Extra fields that would carry a credential: written as "[redacted]" whoever passes them.
SECRET_FIELDS = frozenset(
    {"authorization", "api_key", "key", "signing_secret", "secret", "token", "password", "worker_key"}
)
REDACTED = "[redacted]"


def _redacted(fields: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    return {k: (REDACTED if k.lower() in SECRET_FIELDS else v) for k, v in fields}


# Field names that need no redaction, whatever their case: a row of only these is written as it is.
_SAFE_FIELDS = frozenset(
    {"execution_id", "job_id", "tenant_id", "attempt", "outcome", "lag_ms", "delay_s", "error", "queue", "pool"}
    | {"method", "path", "status", "duration_ms"}  # the API's request line
)


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return _redacted((k, v) for k, v in record.__dict__.items() if k not in _RESERVED and not k.startswith("_"))


class TextFormatter(logging.Formatter):
    """Human-readable lines (`kairos up`'s own output) that still carry the structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        return f"{line} {fields}" if fields else line


class JsonFormatter(logging.Formatter):
    """One JSON object per record. Cheap on purpose: the executor writes a line per outcome and the API
    one per request, so at a herd's 10,000+/s every microsecond here is a share of a core (msgspec
    encodes, the second's timestamp prefix is cached: 6.7 us a line, from 11.6)."""

    def __init__(self, service: str = "kairos") -> None:
        super().__init__()
        self.service = service
        self.pid = os.getpid()
        encoder = msgspec.json.Encoder(enc_hook=str)  # UUIDs and datetimes natively, anything else as str()
        self._encode, self._encode_lines = encoder.encode, encoder.encode_lines
        self._second = -1
        self._prefix = ""

    def format(self, record: logging.LogRecord) -> str:
        exc = self.formatException(record.exc_info) if record.exc_info else None
        return self.line(record.created, record.levelname, record.name, record.getMessage(), _extras(record), exc)

    def _head(self, created: float, level: str, logger: str, message: str) -> dict[str, Any]:
        second = int(created)
        if second != self._second:
            self._second, self._prefix = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return {
            "ts": f"{self._prefix}.{int((created - second) * 1000):03d}Z",
            "level": level.lower(),
            "logger": logger,
            "msg": message,
            "service": self.service,
            "pid": self.pid,
        }

    def line(
        self, created: float, level: str, logger: str, message: str, fields: Mapping[str, Any], exc: str | None = None
    ) -> str:
        """One record's JSON object from its parts (``fields`` already redacted)."""
        out = self._head(created, level, logger, message)
        out.update(fields)
        if exc is not None:
            out["exc"] = exc
        return self._encode(out).decode()

    def lines(self, created: float, level: str, logger: str, message: str, rows: Iterable[Mapping[str, Any]]) -> str:
        """A record per row, one JSON object a line, each ended by a newline: what :meth:`line` writes
        for each (``rows`` redacted here), encoded in one call."""
        head = self._head(created, level, logger, message)
        objects = []
        for row in rows:
            out = head.copy()
            out.update(row if _SAFE_FIELDS.issuperset(row) else _redacted(row.items()))
            objects.append(out)
        return self._encode_lines(objects).decode()


def _json_handlers(logger: logging.Logger, level: int) -> list[logging.StreamHandler[Any]] | None:
    """The handlers a record of ``logger`` at ``level`` reaches, when each is a plain JSON stream
    handler and nothing filters on the way (so :func:`log_many` may write the lines itself)."""
    found: list[logging.StreamHandler[Any]] = []
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        for h in current.handlers:
            if type(h) is not logging.StreamHandler or not isinstance(h.formatter, JsonFormatter) or h.filters:
                return None
            if level >= h.level:
                found.append(h)
        if not current.propagate:
            break
        current = current.parent
    return found


def log_many(logger: logging.Logger, level: int, message: str, rows: Iterable[Mapping[str, Any]]) -> None:
    """A record per row (its extra fields), as ``logger.log(level, message, extra=row)`` would write
    each, but in one write per handler: the executor's outcome lines of a whole batch."""
    if not logger.isEnabledFor(level):
        return
    handlers = _json_handlers(logger, level)
    if handlers is None:  # a test's capture handler, the text format: one record at a time
        for row in rows:
            logger.log(level, message, extra=dict(row))
        return
    if not handlers:
        return
    rows = list(rows)
    created, name, levelname = time.time(), logger.name, logging.getLevelName(level)
    for h in handlers:
        formatter = h.formatter
        assert isinstance(formatter, JsonFormatter)
        text = formatter.lines(created, levelname, name, message, rows)
        if h.terminator != "\n":  # a newline in JSON text only ends a line: strings escape theirs
            text = text.replace("\n", h.terminator)
        h.acquire()
        try:
            h.stream.write(text)
            h.flush()
        finally:
            h.release()


# Loggers of libraries that configure their own output unless told not to: their records are
# routed to the root handler (propagate, no handlers of their own).
_ROUTED = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi", "litestar", "grpc", "asyncio", "py.warnings")


def setup_logging(level: str = "INFO", fmt: str = "json", process: str = "kairos") -> None:
    # Nothing reads the caller's file and line, thread or process name from a record: not computing
    # them halves what a record costs (the formatter writes the pid itself).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(process))
    else:
        handler.setFormatter(TextFormatter(f"%(asctime)s {process} %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in _ROUTED:
        routed = logging.getLogger(name)
        routed.handlers[:] = []
        routed.propagate = True
    for noisy in ("uvicorn.access", "httpx", "httpcore", "grpc", "pgserver"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, exc, tb)
        return
    logging.getLogger("kairos").critical("uncaught exception", exc_info=(kind, exc, tb))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is not None:
        logging.getLogger("kairos").critical(
            "uncaught exception in a thread",
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
            extra={"thread_name": getattr(args.thread, "name", None)},
        )
