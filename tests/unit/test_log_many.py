"""observability.log_many: a batch's records in one write, exactly as one record each would read."""

from __future__ import annotations

import io
import json
import logging
import uuid

import pytest

from app import observability


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


@pytest.fixture
def json_logger() -> tuple[logging.Logger, CountingStream]:
    stream = CountingStream()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(observability.JsonFormatter("executor"))
    logger = logging.getLogger("test.log_many")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    yield logger, stream, handler
    logger.handlers[:] = []


def test_a_batch_is_one_write_of_the_lines_one_record_each_would_write(json_logger) -> None:
    logger, stream, handler = json_logger
    logger.handlers[:] = [handler]  # only the JSON stream (pytest attaches its capture handlers during a test)
    rows = [
        {"execution_id": "e1", "attempt": 1, "outcome": "succeeded"},
        {"execution_id": "e2", "attempt": 2, "outcome": "lease_lost", "token": "s3cret"},
        # Ids as UUIDs (the executor's outcome rows), and a credential whose name is not lower case.
        {"execution_id": uuid.UUID(int=3), "tenant_id": uuid.UUID(int=4), "lag_ms": 1.5, "Authorization": "k"},
    ]
    observability.log_many(logger, logging.INFO, "execution outcome", rows)
    assert stream.writes == 1
    batched = [json.loads(line) for line in stream.getvalue().splitlines()]
    stream.seek(0), stream.truncate()
    for row in rows:
        logger.info("execution outcome", extra=row)
    single = [json.loads(line) for line in stream.getvalue().splitlines()]
    drop = ("ts",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in batched] == [
        {k: v for k, v in r.items() if k not in drop} for r in single
    ]
    assert batched[1]["token"] == observability.REDACTED and batched[0]["service"] == "executor"
    assert batched[2]["Authorization"] == observability.REDACTED
    assert batched[2]["execution_id"] == str(uuid.UUID(int=3)) and batched[2]["tenant_id"] == str(uuid.UUID(int=4))


def test_a_handler_with_another_terminator_ends_each_line_with_it(json_logger) -> None:
    logger, stream, handler = json_logger
    handler.terminator = "\r\n"
    logger.handlers[:] = [handler]
    observability.log_many(logger, logging.INFO, "execution outcome", [{"error": "two\nlines"}, {"n": 2}])
    text = stream.getvalue()
    assert text.count("\r\n") == 2 and text.endswith("\r\n")
    assert [json.loads(line)["error" if i == 0 else "n"] for i, line in enumerate(text.split("\r\n")[:2])] == [
        "two\nlines",
        2,
    ]


def test_below_the_level_nothing_is_written_and_another_handler_gets_one_record_per_row(json_logger) -> None:
    logger, stream, handler = json_logger
    logger.handlers[:] = [handler]
    observability.log_many(logger, logging.DEBUG, "quiet", [{"n": 1}])
    assert stream.getvalue() == ""

    class Keep(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    keep = Keep()
    logger.handlers[:] = [handler, keep]  # not only JSON streams: the usual way, a record per row
    observability.log_many(logger, logging.INFO, "execution outcome", [{"n": 1}, {"n": 2}])
    assert [r.n for r in keep.records] == [1, 2] and stream.writes == 2
