"""Kairos worker SDK: ``Worker(pool, handler).run_forever()``; see ``app.sdk.worker``."""

from app.execution.signing import verify as verify_signature
from app.rpc.client import Execution, WorkerClient
from app.sdk.worker import NonRetryable, Worker

__all__ = ["Execution", "NonRetryable", "Worker", "WorkerClient", "verify_signature"]
