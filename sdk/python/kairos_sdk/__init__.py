"""Kairos tenant SDK: run workers for your pools and verify HTTP deliveries.

    from kairos_sdk import Worker

    async def send_email(execution):
        ...                     # execution.payload, execution.idempotency_key, execution.attempt
        return {"sent": True}   # becomes the execution's result

    Worker("emails", send_email, concurrency=20).run_forever()

Modules: ``client`` (typed gRPC client of the worker protocol), ``worker`` (lease, run, report),
``reporter`` (batched outcomes), ``heartbeat`` (lease extension, LEASE_LOST cancels the handler),
``command`` (run a command per execution), ``signature`` (the ``Kairos-Signature`` header).
``_proto`` holds the generated gRPC modules.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from kairos_sdk.client import Answer, Execution, WorkerClient
from kairos_sdk.command import command_handler
from kairos_sdk.signature import verify as verify_signature
from kairos_sdk.worker import NonRetryable, Worker

try:
    __version__ = _version("kairos-sdk")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "Answer",
    "Execution",
    "NonRetryable",
    "Worker",
    "WorkerClient",
    "__version__",
    "command_handler",
    "verify_signature",
]
