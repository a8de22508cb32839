"""Kairos exceptions.

One root whose docstring is its default message; everything else is a one-liner under it.
They are translated to HTTP problem bodies in ``app.api.problems`` and to gRPC results in
``app.rpc.servicer`` and nowhere else.
"""

from __future__ import annotations

from typing import Literal


class KairosError(Exception):
    """Kairos failed to handle the request."""

    def __init__(self, detail: str | None = None) -> None:
        self.detail = detail or (self.__doc__ or "").strip()
        super().__init__(self.detail)


class InvalidInput(KairosError):
    """The request is invalid."""

    def __init__(self, field: str, detail: str) -> None:
        self.field = field
        super().__init__(f"{field}: {detail}")
        self.detail = detail


def refuse_nul(value: str, field: str) -> None:
    """InvalidInput when ``value`` holds NUL, which PostgreSQL text cannot store."""
    if "\x00" in value:
        raise InvalidInput(field, "must not contain the NUL character (U+0000)")


class InvalidSchedule(InvalidInput):
    """The schedule is invalid."""


class InvalidParameter(InvalidInput):
    """A query, path or header parameter of the request is invalid."""


class MalformedBody(InvalidInput):
    """The request body is not JSON."""


class Unauthorized(KairosError):
    """A valid API key is required: send 'Authorization: Bearer <key>'."""


class Forbidden(KairosError):
    """The credential does not cover this resource."""


class JobNotFound(KairosError):
    """No such job."""


class ExecutionNotFound(KairosError):
    """No such execution."""


class TenantNotFound(KairosError):
    """No such tenant."""


class IdempotencyConflict(KairosError):
    """This Idempotency-Key was already used with a different request body."""


class InvalidStateTransition(KairosError):
    """The job is not in a state that allows this."""


class PreconditionFailed(KairosError):
    """The job's version is not the one If-Match names."""


class InvalidExecutionState(InvalidStateTransition):
    """The execution is not in a state that allows this."""


# A tenant quota as the API names it (a 429 problem's ``quota``; docs/quotas.md).
Quota = Literal[
    "maxActiveJobs", "maxSubmitPerSecond", "maxManualRunsPerSecond", "maxManualInFlight", "bulkReplayPerWindow"
]


class TenantQuotaExceeded(KairosError):
    """The tenant's quota is exhausted; try again later."""

    def __init__(
        self,
        detail: str | None = None,
        *,
        quota: Quota | None = None,
        limit: int | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(detail)
        self.quota = quota  # which one, as the API spells it
        self.limit = limit
        self.retry_after_s = retry_after_s  # the Retry-After header's seconds


class AuthenticationThrottled(KairosError):
    """Too many failed authentication attempts from this address; try again later."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__()
        self.retry_after_s = retry_after_s


class EgressRefused(KairosError):
    """The target address is not allowed by the egress policy."""


class TargetUnresolved(KairosError):
    """The target's host name does not resolve (retried with backoff: DNS may answer later)."""


class DatabaseUnavailable(KairosError):
    """The database is unreachable."""


class ObjectStoreUnavailable(KairosError):
    """The object store (history archives, large payloads) did not answer."""


class ObjectNotFound(KairosError):
    """No such object in the object store."""


class CommitAmbiguous(DatabaseUnavailable):
    """The database could not tell whether the commit landed; retry with the same Idempotency-Key."""


class TransactionRetriesExhausted(KairosError):
    """The transaction kept conflicting with concurrent ones and was given up."""


class StoreError(KairosError):
    """The database failed the request."""

    def __init__(self, detail: str | None = None, *, sqlstate: str | None = None) -> None:
        super().__init__(detail)
        self.sqlstate = sqlstate


class StoreConflict(StoreError):
    """A concurrent change conflicts with this one; try again."""


class StoreRejected(StoreError):
    """The database refused a value in the request."""


class StoreFailure(StoreError):
    """The database failed the request."""
