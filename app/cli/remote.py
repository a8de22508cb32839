"""What the commands that call the REST API share: the group options, the client, the argument
types, and the output (rich tables for people, one JSON document on stdout for scripts).

Bad input is refused before any request, with one line and exit code 2 (``app.cli.runtime.fail``
or a click usage error); what the API refuses or fails is one line from :mod:`app.cli.client`.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import click
from rich.console import Console

from app.cli.client import API_KEY_ENV, API_URL_ENV, DEFAULT_API_URL, ApiFailure, KairosClient
from app.cli.usage import fail
from app.errors import InvalidInput

if TYPE_CHECKING:
    from rich.progress import Progress

P = ParamSpec("P")
R = TypeVar("R")
_META = "kairos.api"

stdout = Console(highlight=False, soft_wrap=True)
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


@dataclass(frozen=True)
class ApiOptions:
    url: str | None = None
    key: str | None = None


def api_group(name: str, **attrs: Any) -> Callable[[Callable[..., Any]], click.Group]:
    """A command group taking --api-url and --api-key, which every command under it uses."""

    def decorate(f: Callable[..., Any]) -> click.Group:
        @click.option(
            "--api-url",
            metavar="URL",
            envvar=API_URL_ENV,
            default=DEFAULT_API_URL,
            show_default=True,
            help=f"REST API base URL (env {API_URL_ENV}).",
        )
        @click.option(
            "--api-key", metavar="KEY", envvar=API_KEY_ENV, default=None, help=f"Tenant API key (env {API_KEY_ENV})."
        )
        @functools.wraps(f)
        def callback(api_url: str | None, api_key: str | None, **kwargs: Any) -> Any:
            click.get_current_context().meta[_META] = ApiOptions(api_url, api_key)
            return f(**kwargs)

        return click.group(name, cls=click.Group, **attrs)(callback)

    return decorate


@contextmanager
def connected() -> Iterator[KairosClient]:
    """The client for the current command; an ApiFailure inside becomes one line and its exit code."""
    options: ApiOptions = click.get_current_context().meta.get(_META, ApiOptions())
    try:
        with KairosClient(options.url or DEFAULT_API_URL, options.key) as client:
            yield client
    except ApiFailure as exc:
        sys.stderr.write(f"error: {exc.message}\n")
        sys.exit(exc.exit_code)


def pass_api(f: Callable[Concatenate[KairosClient, P], R]) -> Callable[P, R]:
    """Call the command with a connected client as its first argument."""

    @functools.wraps(f)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with connected() as client:
            return f(client, *args, **kwargs)

    return run


json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")


def emit(document: Any, as_json: bool, render: Callable[[], None]) -> None:
    """``document`` as JSON for scripts, else ``render()`` for people."""
    if as_json:
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        render()


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None) -> None:
    from rich.table import Table

    grid = Table(*columns, title=title, title_justify="left", header_style="bold", box=None, pad_edge=False)
    for row in rows:
        grid.add_row(*("-" if cell is None or cell == "" else str(cell) for cell in row))
    # Piped, a table keeps whole ids and times instead of folding them into 80 columns.
    console = stdout if stdout.is_terminal else Console(highlight=False, width=1000, file=sys.stdout)
    console.print(grid)


def fields(pairs: Sequence[tuple[str, Any]]) -> None:
    """A record as aligned ``name  value`` lines."""
    width = max(len(name) for name, _ in pairs)
    for name, value in pairs:
        stdout.print(f"{name.ljust(width)}  {'-' if value is None or value == '' else value}", markup=False)


def progress() -> Progress:
    """A progress bar on stderr (stdout stays one document); drawn only on a terminal."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=stderr,
        transient=True,
        disable=not stderr.is_terminal,
    )


def when(value: str | None) -> str:
    """An API timestamp, shortened for a table: 2027-03-14 07:00:00Z."""
    if not value:
        return "-"
    return value.replace("T", " ").split(".")[0].removesuffix("+00:00").removesuffix("Z") + "Z"


# -- argument types ------------------------------------------------------------------------------------

if TYPE_CHECKING:
    ParamType = click.ParamType[Any, Any]
else:
    ParamType = click.ParamType  # not subscriptable at run time before click 8.3


class Identifier(ParamType):
    """A job or execution id: a UUID, checked before any request."""

    def __init__(self, what: str) -> None:
        self.name = f"{what} id"
        self.what = what

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return str(uuid.UUID(str(value)))
        except ValueError:
            self.fail(f"{value!r} is not a {self.what} id (a UUID)", param, ctx)


JOB_ID = Identifier("job")
EXECUTION_ID = Identifier("execution")

_DURATION = re.compile(
    r"^(?:(?P<d>\d+(?:\.\d+)?)d)?(?:(?P<h>\d+(?:\.\d+)?)h)?(?:(?P<m>\d+(?:\.\d+)?)m)?"
    r"(?:(?P<s>\d+(?:\.\d+)?)s?)?$"
)
_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> float:
    """90s, 5m, 1h30m, 2d or plain seconds; ValueError otherwise."""
    match = _DURATION.match(text.strip().lower())
    if not text.strip() or match is None or not any(match.groupdict().values()):
        raise ValueError(f"{text!r} is not a duration such as 90s, 5m, 1h30m or 2d")
    return sum(float(v) * _UNIT_S[k] for k, v in match.groupdict().items() if v)


class Duration(ParamType):
    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = Duration()


def parse_instant(text: str) -> datetime:
    """ISO 8601 with an offset (Z or +hh:mm); InvalidInput otherwise."""
    from app.domain.jobs import parse_instant as parse

    return parse(text, "time")


class Instant(ParamType):
    """An ISO 8601 instant with an offset, e.g. 2027-03-14T09:00:00Z."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            return parse_instant(str(value))
        except InvalidInput as exc:
            self.fail(exc.detail, param, ctx)


INSTANT = Instant()


def read_text(path: str) -> str:
    """A UTF-8 file the command was given (``-``: stdin); unreadable input is one line and exit 2."""
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as source:
                text = source.read()
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}")
    except UnicodeDecodeError:
        fail(f"{path} is not UTF-8 text")
    return text


def utc_iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def ago(seconds: float) -> datetime:
    return datetime.now(timezone.utc) - timedelta(seconds=seconds)


class JsonValue(ParamType):
    """A JSON text (``@path`` reads it from a file), decoded before any request."""

    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        text = value
        if value.startswith("@"):
            try:
                with open(value[1:], encoding="utf-8") as source:
                    text = source.read()
            except OSError as exc:
                self.fail(f"cannot read {value[1:]}: {exc.strerror}", param, ctx)
        try:
            return json.loads(text)
        except ValueError as exc:
            self.fail(f"is not JSON ({exc})", param, ctx)


JSON_VALUE = JsonValue()
