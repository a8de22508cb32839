"""Request bodies: strict JSON decoding, and the one translation of what fails to decode into errors.

Every request body is decoded by msgspec in strict mode, straight from its bytes: a number is a
JSON number (``"90"`` is not 90, and an integer field takes no fraction), a boolean is ``true`` or
``false``. What does not decode is refused in one shape, whichever route it came to:

* a body that is not JSON is ``MalformedBody`` (400), with no field to point at;
* JSON that breaks the schema is ``InvalidInput`` (422) whose field is a JSON Pointer (RFC 6901)
  into the body, such as ``/schedule/delaySeconds``; an enum's problem lists the values it takes,
  a range's states its limit, a missing or unknown field is pointed at by its own name;
* JSON nested too deeply to decode (about 1,000 levels of arrays and objects, where the decoder's
  recursion stops) is ``InvalidInput`` (422) pointing at the free-form field that holds it, such
  as ``/payload``; a payload may nest ``MAX_PAYLOAD_DEPTH`` (64) levels, which the job's own
  validation checks on what did decode.

Litestar decodes handler ``data`` through :class:`StrictBody`, the app's DTO (``create_app``), so a
route declaring ``JSONBody[...]`` gets exactly this while /schema still documents its body type;
routes that parse a body themselves (optional bodies, batch items) call :func:`decode`. Litestar's
own ``ValidationException`` (query, path and header parameters) goes through
:func:`from_validation_exception`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any, ClassVar, TypeVar

import msgspec
from litestar.dto import AbstractDTO, DTOFieldDefinition
from litestar.exceptions import ValidationException
from litestar.typing import FieldDefinition

from app import errors
from app.domain.jobs import MAX_PAYLOAD_DEPTH

T = TypeVar("T")

# msgspec's ValidationError reads "<what> - at `$.jobs[3].name`"; at the root there is no " - at".
_AT = re.compile(r"^(?P<what>.*?)(?: - at `(?P<path>\$[^`]*)`)?$", re.DOTALL)
# A key of an object that breaks its type: "<what> - at `key` in `$.labels`".
_KEY_AT = re.compile(r"^(?P<what>.*?) - at `key` in `(?P<path>\$[^`]*)`$", re.DOTALL)
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[([^\]]*)\]")
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]*)`$")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>[^`]*)`$")
_ENUM = re.compile(r"^Invalid enum value (?P<value>.*)$")
_RANGE = re.compile(r"^Expected `(?:int|float)` (?:>=|>|<=|<) \S+$")
_LENGTH = re.compile(r"^Expected `(?P<kind>str|object|array)` of length (?P<op>>=|<=) (?P<n>\d+)$")
_PATTERN = re.compile(r"^Expected `str` matching regex ")
_UNITS = {"str": "characters", "object": "members", "array": "items"}


def pointer(steps: Iterable[str | int]) -> str:
    """The JSON Pointer (RFC 6901) of a path of object keys and array indexes ("" is the whole body)."""
    return "".join("/" + str(step).replace("~", "~0").replace("/", "~1") for step in steps)


def pointer_of_path(path: str) -> str:
    """``retry.maxAttempts`` (the domain's dotted field names) as ``/retry/maxAttempts``."""
    return pointer(path.split(".")) if path else ""


def _steps(path: str | None) -> list[str | int]:
    """``$.jobs[3].name`` as ["jobs", 3, "name"]; a dict key msgspec leaves out (``[...]``) ends it."""
    steps: list[str | int] = []
    for key, index, _dict_key in _STEP.findall((path or "$")[1:]):
        if key:
            steps.append(key)
        elif index:
            steps.append(int(index))
        else:
            break  # "[...]": a key of a dict, not named; point at the dict
    return steps


def _unwrap(t: msgspec.inspect.Type) -> list[msgspec.inspect.Type]:
    """The alternatives a field's type allows: Annotated metadata removed, unions spread."""
    if isinstance(t, msgspec.inspect.Metadata):
        return _unwrap(t.type)
    if isinstance(t, msgspec.inspect.UnionType):
        return [inner for member in t.types for inner in _unwrap(member)]
    return [t]


def _type_at(type_: Any, steps: Sequence[str | int]) -> msgspec.inspect.Type | None:
    """The declared type at ``steps`` inside ``type_``, where it can be told."""
    current: msgspec.inspect.Type = msgspec.inspect.type_info(type_)
    for step in steps:
        following = None
        for t in _unwrap(current):
            if isinstance(t, msgspec.inspect.StructType) and isinstance(step, str):
                following = next((f.type for f in t.fields if f.encode_name == step), None)
            elif isinstance(
                t, (msgspec.inspect.ListType, msgspec.inspect.SetType, msgspec.inspect.VarTupleType)
            ) and isinstance(step, int):
                following = t.item_type
            elif isinstance(t, msgspec.inspect.DictType):
                following = t.value_type
            if following is not None:
                break
        if following is None:
            return None
        current = following
    return current


def _allowed(t: msgspec.inspect.Type | None) -> list[Any]:
    values: list[Any] = []
    for member in _unwrap(t) if t is not None else []:
        if isinstance(member, msgspec.inspect.LiteralType):
            values.extend(member.values)
        elif isinstance(member, msgspec.inspect.EnumType):
            values.extend(item.value for item in member.cls)
    return values


def _fields(t: msgspec.inspect.Type | None) -> list[str]:
    for member in _unwrap(t) if t is not None else []:
        if isinstance(member, msgspec.inspect.StructType):
            return [f.encode_name for f in member.fields]
    return []


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _range(t: msgspec.inspect.Type | None) -> str | None:
    """A numeric field's range as a refusal words it ("must be between 1 and 100"), from its declared
    bounds (app.api.wire); None when ``t`` declares none. A ``low_name`` in the field's Meta ``extra``
    names the low end instead of its number."""
    low_name: str | None = None
    members = [t] if t is not None else []
    while members:
        member = members.pop(0)
        if isinstance(member, msgspec.inspect.Metadata):
            low_name = (member.extra or {}).get("low_name", low_name)
            members.insert(0, member.type)
        elif isinstance(member, msgspec.inspect.UnionType):
            members[:0] = member.types
        elif isinstance(member, (msgspec.inspect.IntType, msgspec.inspect.FloatType)):
            low = member.gt if member.gt is not None else member.ge
            if low is not None and member.le is not None:
                exclusive = " (exclusive)" if member.gt is not None else ""
                return f"must be between {low_name or _number(low)}{exclusive} and {_number(member.le)}"
    return None


def _quoted(values: Iterable[Any]) -> str:
    return ", ".join(f"'{v}'" if isinstance(v, str) else str(v) for v in values)


def describe(what: str, steps: list[str | int], type_: Any | None) -> tuple[str, str]:
    """(JSON Pointer, detail) for one schema failure ``what`` (msgspec's words) at ``steps``."""
    if found := _MISSING.match(what):
        return pointer([*steps, found["name"]]), "is required"
    if found := _UNKNOWN.match(what):
        known = _fields(_type_at(type_, steps)) if type_ is not None else []
        detail = "is not a field of this object" + (f"; its fields are {', '.join(known)}" if known else "")
        return pointer([*steps, found["name"]]), detail
    if found := _ENUM.match(what):
        allowed = _allowed(_type_at(type_, steps)) if type_ is not None else []
        if allowed:
            return pointer(steps), f"must be one of {_quoted(allowed)} (got {found['value']})"
    if _RANGE.match(what) and type_ is not None and (bounds := _range(_type_at(type_, steps))) is not None:
        return pointer(steps), bounds
    if type_ is not None and (worded := _worded(what, _type_at(type_, steps))) is not None:
        return pointer(steps), worded
    return pointer(steps), what


def _worded(what: str, t: msgspec.inspect.Type | None) -> str | None:
    """A length's or a pattern's refusal (msgspec's ``what``) in words, for a value of type ``t``."""
    if found := _LENGTH.match(what):
        n, unit = int(found["n"]), _UNITS[found["kind"]]
        if found["op"] == ">=":
            return "must not be empty" if n == 1 else f"must have at least {n} {unit}"
        return f"must have at most {n} {unit}"
    if _PATTERN.match(what):
        return _says(t)
    return None


def _key_type(t: msgspec.inspect.Type | None) -> msgspec.inspect.Type | None:
    """The type of the keys of the object type ``t``."""
    for member in _unwrap(t) if t is not None else []:
        if isinstance(member, msgspec.inspect.DictType):
            return member.key_type
    return None


def _says(t: msgspec.inspect.Type | None) -> str | None:
    """What a string field's pattern requires, in words: the ``says`` of its Meta ``extra`` (app.api.wire)."""
    members = [t] if t is not None else []
    while members:
        member = members.pop(0)
        if isinstance(member, msgspec.inspect.Metadata):
            if says := (member.extra or {}).get("says"):
                return str(says)
            members.insert(0, member.type)
        elif isinstance(member, msgspec.inspect.UnionType):
            members[:0] = member.types
    return None


_UNNAMED_KEY = "[...]"


def _culprit_key(document: Any, type_: Any, steps: list[str | int]) -> str | None:
    """Which key of the object at ``steps`` in ``document`` (decoded without a schema) holds the value that
    breaks ``type_``: msgspec names a dict's keys ``[...]``. Each key is tried alone, in order."""
    container: Any = document
    for step in steps:
        try:
            container = container[step]
        except (KeyError, IndexError, TypeError):
            return None
    if not isinstance(container, dict):
        return None

    def alone(key: str) -> Any:
        def rebuilt(node: Any, rest: list[str | int]) -> Any:
            if not rest:
                return {key: node[key]}
            copy = list(node) if isinstance(node, list) else dict(node)
            copy[rest[0]] = rebuilt(node[rest[0]], rest[1:])  # type: ignore[index]
            return copy

        return rebuilt(document, steps)

    for key in container:
        try:
            msgspec.convert(alone(key), type_, strict=True)
        except msgspec.ValidationError as exc:
            if _KEY_AT.match(str(exc)):
                return str(key)
            found = _AT.match(str(exc))
            if found and found["path"] and _UNNAMED_KEY in found["path"]:
                return str(key)
    return None


def invalid_input(exc: msgspec.ValidationError, type_: Any, document: Any = None) -> errors.InvalidInput:
    """The InvalidInput for msgspec's ValidationError decoding ``type_``: its field a JSON Pointer.
    ``document``: the body decoded without a schema, to name the key of a bad value in a client's object
    (labels, headers), which msgspec leaves unnamed."""
    if keyed := _KEY_AT.match(str(exc)):
        steps = _steps(keyed["path"])
        key = _culprit_key(document, type_, steps) if document is not None else None
        detail = _worded(keyed["what"], _key_type(_type_at(type_, steps))) or f"has a key that {keyed['what']}"
        return errors.InvalidInput(pointer([*steps, key] if key is not None else steps), detail)
    found = _AT.match(str(exc))
    assert found is not None  # the pattern matches any text
    steps = _steps(found["path"])
    path = found["path"] or ""
    if (
        document is not None
        and _UNNAMED_KEY in path
        and path.count(_UNNAMED_KEY) == 1
        and path.endswith(_UNNAMED_KEY)
        and (key := _culprit_key(document, type_, steps)) is not None
    ):
        steps = [*steps, key]
    field, detail = describe(found["what"], steps, type_)
    return errors.InvalidInput(field, detail)


# Tokens of JSON text: a string (escapes included), or one structural character.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{},:]')


def deepest_path(raw: bytes, limit: int) -> list[str | int] | None:
    """The path to the first array or object nested more than ``limit`` levels deep in ``raw``
    (None: none is). Only called once decoding failed, so it may be slow; it stops at the first."""
    path: list[str | int] = []
    containers: list[bytes] = []  # b"{" or b"[" per open level, beside ``path``
    key: str | int | None = None
    for token in _TOKEN.finditer(raw):
        text = token.group()
        if text in (b"{", b"["):
            if containers:
                path.append(key if key is not None else 0)
            containers.append(text)
            if len(containers) > limit:
                return path
            key = 0 if text == b"[" else None
        elif text in (b"}", b"]"):
            if containers:
                containers.pop()
                key = path.pop() if path else None
        elif text == b",":
            key = key + 1 if containers and containers[-1] == b"[" and isinstance(key, int) else None
        elif text != b":" and containers and containers[-1] == b"{" and key is None:
            try:
                key = msgspec.json.decode(text)
            except msgspec.DecodeError:
                key = text.decode(errors="replace").strip('"')
    return None


def _free_form(type_: Any, steps: list[str | int]) -> list[str | int]:
    """``steps`` cut at the first value the schema leaves free (``Any``, a raw item): the field. Where
    the schema has no such place, the deepest place it has."""
    for end in range(len(steps) + 1):
        declared = _type_at(type_, steps[:end])
        if declared is None:
            return steps[: max(end - 1, 0)]
        if isinstance(declared, (msgspec.inspect.AnyType, msgspec.inspect.RawType)):
            return steps[:end]
    return steps


def too_deep(raw: bytes, type_: Any) -> errors.InvalidInput:
    """The InvalidInput for a body the decoder gave up on for its depth, naming the field it is in
    (``type_``'s fields name it: the declared type, or the shape a free-form body has)."""
    steps = deepest_path(raw, MAX_PAYLOAD_DEPTH) or []
    return errors.InvalidInput(
        pointer(_free_form(type_, steps)), f"nests more than {MAX_PAYLOAD_DEPTH} levels of arrays and objects"
    )


def malformed(exc: msgspec.DecodeError) -> errors.MalformedBody:
    return errors.MalformedBody("", f"is not JSON: {exc}")


def decode(raw: bytes, type_: type[T] | Any, *, empty: Callable[[], T] | None = None, shape: Any = None) -> T:
    """``raw`` decoded strictly as ``type_``; ``empty()`` for a body with nothing in it, when given.

    ``shape``: the type whose fields name what nests too deeply when ``type_`` leaves it open (a
    merge patch decoded as ``Any`` is shaped like a job; a batch's raw items are jobs too)."""
    if empty is not None and not raw.strip():
        return empty()
    try:
        return msgspec.json.decode(raw, type=type_, strict=True)
    except msgspec.ValidationError as exc:
        # Decoding stops at the first value that breaks the schema, which may come before the text
        # stops being JSON ('{"nmae": 1' is an unknown field first): JSON or not decides 400 or 422.
        try:
            document = msgspec.json.decode(raw)
        except msgspec.DecodeError as not_json:
            raise malformed(not_json) from None
        except RecursionError:
            raise too_deep(raw, shape or type_) from None
        raise invalid_input(exc, type_, document) from None
    except msgspec.DecodeError as exc:
        raise malformed(exc) from None
    except RecursionError:
        raise too_deep(raw, shape or type_) from None


def from_validation_exception(exc: ValidationException) -> errors.InvalidInput:
    """Litestar's refusal of a request's parameters (or of a body it decoded itself) in our terms:
    the first problem it lists, as InvalidParameter naming the parameter, or for the body as
    InvalidInput with a JSON Pointer (MalformedBody when the body is missing)."""
    first = exc.extra[0] if isinstance(exc.extra, list) and exc.extra else {}
    if not isinstance(first, dict):
        first = {}
    key = str(first.get("key") or "")
    what = str(first.get("message") or exc.detail)
    if first.get("source") == "body" or key == "data" or key.startswith("data."):
        if key == "data" and (what == "'data'" or what.startswith("Object missing required field `data`")):
            # The body is missing: StrictBody decodes every body there is itself.
            return errors.MalformedBody("", "is empty; this request needs a JSON body")
        path = key.removeprefix("data").removeprefix(".")
        field, detail = describe(what, _steps("$." + path if path else "$"), None)
        return errors.InvalidInput(field, detail)
    if what.startswith("Missing required"):
        what = "is required"
    return errors.InvalidParameter(key or "query", what)


class StrictBody(AbstractDTO[T]):
    """The app's DTO: every handler's ``data`` decoded by :func:`decode` from the raw bytes (msgspec
    strict mode), and documented in /schema as Litestar documents the declared type.

    Litestar converts a body it decodes itself non-strictly (``"90"`` becomes 90.0); a DTO is its
    hook for decoding the bytes instead. Only ``data`` is handled: set ``return_dto=None`` beside
    it, responses are encoded as usual.
    """

    _types: ClassVar[dict[str, Any]] = {}  # handler id -> the declared type of its data

    @classmethod
    def generate_field_definitions(cls, model_type: type[Any]) -> Generator[DTOFieldDefinition, None, None]:
        yield from ()  # no transfer model: the declared type is decoded as it is

    @classmethod
    def detect_nested_field(cls, field_definition: FieldDefinition) -> bool:
        return False

    @classmethod
    def create_for_field_definition(
        cls, field_definition: FieldDefinition, handler_id: str, backend_cls: Any = None
    ) -> None:
        if field_definition.name == "data":
            cls._types[handler_id] = field_definition.annotation

    @classmethod
    def create_openapi_schema(cls, field_definition: FieldDefinition, handler_id: str, schema_creator: Any) -> Any:
        return schema_creator.for_field_definition(field_definition)

    def decode_bytes(self, value: bytes) -> Any:
        return decode(value, self._types[self.asgi_connection.route_handler.handler_id])

    def decode_builtins(self, value: dict[str, Any]) -> Any:
        type_ = self._types[self.asgi_connection.route_handler.handler_id]
        try:
            return msgspec.convert(value, type_, strict=True)
        except msgspec.ValidationError as exc:
            raise invalid_input(exc, type_, value) from None
        except RecursionError:
            raise errors.InvalidInput("", "nests too deeply to decode") from None
