import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    OK: _ClassVar[Outcome]
    LEASE_LOST: _ClassVar[Outcome]
    RETRY_SCHEDULED: _ClassVar[Outcome]
    DEAD: _ClassVar[Outcome]
OUTCOME_UNSPECIFIED: Outcome
OK: Outcome
LEASE_LOST: Outcome
RETRY_SCHEDULED: Outcome
DEAD: Outcome

class LeaseRequest(_message.Message):
    __slots__ = ("pool", "worker_id", "max", "lease_seconds", "wait_seconds")
    POOL_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    pool: str
    worker_id: str
    max: int
    lease_seconds: float
    wait_seconds: float
    def __init__(self, pool: _Optional[str] = ..., worker_id: _Optional[str] = ..., max: _Optional[int] = ..., lease_seconds: _Optional[float] = ..., wait_seconds: _Optional[float] = ...) -> None: ...

class LeasedExecution(_message.Message):
    __slots__ = ("execution_id", "job_id", "attempt", "payload", "scheduled_for", "lease_until", "idempotency_key", "max_attempts", "timeout_seconds")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_FOR_FIELD_NUMBER: _ClassVar[int]
    LEASE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    job_id: str
    attempt: int
    payload: bytes
    scheduled_for: _timestamp_pb2.Timestamp
    lease_until: _timestamp_pb2.Timestamp
    idempotency_key: str
    max_attempts: int
    timeout_seconds: int
    def __init__(self, execution_id: _Optional[str] = ..., job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., payload: _Optional[bytes] = ..., scheduled_for: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lease_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., max_attempts: _Optional[int] = ..., timeout_seconds: _Optional[int] = ...) -> None: ...

class LeaseResponse(_message.Message):
    __slots__ = ("executions",)
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    executions: _containers.RepeatedCompositeFieldContainer[LeasedExecution]
    def __init__(self, executions: _Optional[_Iterable[_Union[LeasedExecution, _Mapping]]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("execution_id", "attempt", "lease_seconds")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    attempt: int
    lease_seconds: float
    def __init__(self, execution_id: _Optional[str] = ..., attempt: _Optional[int] = ..., lease_seconds: _Optional[float] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("outcome", "lease_until", "message")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    LEASE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    outcome: Outcome
    lease_until: _timestamp_pb2.Timestamp
    message: str
    def __init__(self, outcome: _Optional[_Union[Outcome, str]] = ..., lease_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class CompleteRequest(_message.Message):
    __slots__ = ("execution_id", "attempt", "result")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    attempt: int
    result: bytes
    def __init__(self, execution_id: _Optional[str] = ..., attempt: _Optional[int] = ..., result: _Optional[bytes] = ...) -> None: ...

class CompleteResponse(_message.Message):
    __slots__ = ("outcome", "message")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    outcome: Outcome
    message: str
    def __init__(self, outcome: _Optional[_Union[Outcome, str]] = ..., message: _Optional[str] = ...) -> None: ...

class FailRequest(_message.Message):
    __slots__ = ("execution_id", "attempt", "error", "retryable")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    attempt: int
    error: str
    retryable: bool
    def __init__(self, execution_id: _Optional[str] = ..., attempt: _Optional[int] = ..., error: _Optional[str] = ..., retryable: _Optional[bool] = ...) -> None: ...

class FailResponse(_message.Message):
    __slots__ = ("outcome", "retry_at", "message")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RETRY_AT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    outcome: Outcome
    retry_at: _timestamp_pb2.Timestamp
    message: str
    def __init__(self, outcome: _Optional[_Union[Outcome, str]] = ..., retry_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class CompleteManyRequest(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[CompleteRequest]
    def __init__(self, items: _Optional[_Iterable[_Union[CompleteRequest, _Mapping]]] = ...) -> None: ...

class CompleteManyItem(_message.Message):
    __slots__ = ("execution_id", "attempt", "outcome", "message")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    attempt: int
    outcome: Outcome
    message: str
    def __init__(self, execution_id: _Optional[str] = ..., attempt: _Optional[int] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., message: _Optional[str] = ...) -> None: ...

class CompleteManyResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CompleteManyItem]
    def __init__(self, results: _Optional[_Iterable[_Union[CompleteManyItem, _Mapping]]] = ...) -> None: ...

class FailManyRequest(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[FailRequest]
    def __init__(self, items: _Optional[_Iterable[_Union[FailRequest, _Mapping]]] = ...) -> None: ...

class FailManyItem(_message.Message):
    __slots__ = ("execution_id", "attempt", "outcome", "retry_at", "message")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RETRY_AT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    attempt: int
    outcome: Outcome
    retry_at: _timestamp_pb2.Timestamp
    message: str
    def __init__(self, execution_id: _Optional[str] = ..., attempt: _Optional[int] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., retry_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class FailManyResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[FailManyItem]
    def __init__(self, results: _Optional[_Iterable[_Union[FailManyItem, _Mapping]]] = ...) -> None: ...
