"""An exception nothing caught in a thread is logged, with the thread's name, not lost."""

from __future__ import annotations

import logging
import threading

import pytest

from app import observability


def test_an_uncaught_exception_in_a_thread_is_logged_with_the_threads_name(caplog: pytest.LogCaptureFixture) -> None:
    thread = threading.Thread(name="reader-7")
    caplog.set_level(logging.CRITICAL, logger="kairos")
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        args = threading.ExceptHookArgs((RuntimeError, exc, exc.__traceback__, thread))
    observability._log_uncaught_in_thread(args)
    [record] = [r for r in caplog.records if r.name == "kairos"]
    assert record.getMessage() == "uncaught exception in a thread"
    assert record.thread_name == "reader-7"  # type: ignore[attr-defined]
    assert record.exc_info is not None and str(record.exc_info[1]) == "boom"
