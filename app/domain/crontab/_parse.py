"""Reading a crontab file as cronie does (docs/crontab.md, "Reading a file")."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta, timezone
from typing import Any

from app.domain.schedule import DstPolicy, validate_tz
from app.domain.schedule.cron import compile_cron
from app.errors import InvalidInput, InvalidSchedule

UTC = timezone.utc
# The job key H tokens would hash by; crontab lines have none (they are refused), so any constant.
JOB_KEY = "crontab"
# A range longer than this is refused: the simulation walks it minute by minute.
MAX_RANGE = timedelta(days=366)
DEFAULT_DST = DstPolicy()  # Kairos's defaults: gap "shift", repeat "once"

KEYWORDS: Mapping[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Variables that are not the job's environment: the zone of the lines below, and how cron runs them.
ZONE_VARIABLES = ("CRON_TZ", "TZ")
SHELL, MAILTO = "SHELL", "MAILTO"

# load_env: a name (quoted, or up to blanks or '='), blanks, '=', blanks, a value (quoted, or the
# rest with trailing blanks trimmed).
_ENV_LINE = re.compile(
    r"""^\s*(?:'(?P<qname1>[^'=]*)'|"(?P<qname2>[^"=]*)"|(?P<name>[^\s='"][^\s=]*))\s*=\s*
        (?:'(?P<qvalue1>[^']*)'\s*|"(?P<qvalue2>[^"]*)"\s*|(?P<value>(?:[^'"\s].*?)?)\s*)$""",
    re.VERBOSE,
)
_STEP_AFTER_NUMBER = re.compile(r"^[A-Za-z0-9]+/\d+$")


@dataclass(frozen=True)
class CrontabEntry:
    """One job line of a crontab, with the variables set above it."""

    line: int  # 1-based line number in the file
    text: str  # the line as written
    schedule: str  # the time fields as written: five fields, or an @keyword
    fields: str  # the five time fields (@keywords expanded)
    command: str  # up to the first unescaped %, with \\% read as %
    stdin: str | None  # after the first %: what cron writes to the command's standard input
    env: Mapping[str, str]  # variables set above the line (not the zone, SHELL or MAILTO)
    shell: str | None
    mailto: str | None
    tz: str | None  # CRON_TZ or TZ in effect (None: the caller's default zone)
    tz_variable: str | None  # which of them set tz
    repeat: int  # how many identical lines came before this one (each runs in classic cron)

    def zone(self, default: str | None) -> str:
        zone = self.tz or default
        if zone is None:
            raise InvalidInput(f"line {self.line}", "no CRON_TZ or TZ above it: give the zone with --tz")
        return zone

    def payload(self) -> dict[str, Any]:
        """What the job carries: the command line and its environment (and how cron would run it)."""
        body: dict[str, Any] = {"command": self.command, "env": dict(self.env)}
        if self.stdin is not None:
            body["stdin"] = self.stdin
        if self.shell is not None:
            body["shell"] = self.shell
        if self.mailto is not None:
            body["mailto"] = self.mailto
        return body

    def idempotency_key(self, mode: str) -> str:
        """Derived from the line's content (and which identical line it is), so importing the file
        again returns the same jobs; ``mode`` keeps dry-run jobs and real ones apart."""
        normal = " ".join(self.text.split())
        digest = hashlib.sha256(f"crontab-v1\n{mode}\n{normal}\n{self.repeat}".encode()).hexdigest()
        return f"crontab-{digest[:40]}"


def job_body(
    entry: CrontabEntry,
    *,
    tz: str,
    target_type: str,
    target_ref: str,
    name_prefix: str,
    dry_run: bool,
    revision: int = 1,
) -> dict[str, Any]:
    """The POST /v1/jobs:batch item for one line (its idempotencyKey included). A ``revision`` other
    than 1 starts a new set of keys: for lines whose settings changed after their jobs were cancelled."""
    mode = "dry-run" if dry_run else "live"
    summary = " ".join(entry.command.split())
    body: dict[str, Any] = {
        "name": (name_prefix + summary)[:200],
        "target": {"type": target_type, "ref": target_ref},
        "schedule": {"cron": entry.schedule, "tz": tz},
        "payload": entry.payload(),
        "idempotencyKey": entry.idempotency_key(mode if revision == 1 else f"{mode}/r{revision}"),
    }
    if dry_run:
        body["dryRun"] = True
    return body


@dataclass(frozen=True)
class SkippedLine:
    """A line Kairos cannot schedule (``@reboot``), left out of an import that asked to skip such lines."""

    line: int
    text: str  # as written, without surrounding blanks
    reason: str


REBOOT_REASON = "@reboot runs when the machine boots, and Kairos has no boot event; start it from the service manager"


def _line_error(line: int, detail: str) -> InvalidInput:
    return InvalidInput(f"line {line}", detail)


def split_command(raw: str) -> tuple[str, str | None]:
    """cronie's do_command: the command up to the first unescaped %, and the input after it."""
    command: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw) and raw[i + 1] == "%":
            command.append("%")
            i += 2
            continue
        if ch == "%":
            break
        command.append(ch)
        i += 1
    else:
        return "".join(command), None
    rest, data = raw[i + 1 :], []
    j = 0
    while j < len(rest):
        if rest[j] == "\\" and j + 1 < len(rest) and rest[j + 1] == "%":
            data.append("%")
            j += 2
            continue
        data.append("\n" if rest[j] == "%" else rest[j])
        j += 1
    text = "".join(data)
    return "".join(command), text if text.endswith("\n") or not text else text + "\n"


def _env_setting(text: str) -> tuple[str, str] | None:
    match = _ENV_LINE.match(text)
    if match is None:
        return None
    name = match["qname1"] if match["qname1"] is not None else match["qname2"] or match["name"]
    for group in ("qvalue1", "qvalue2", "value"):
        if match[group] is not None:
            return name, match[group]
    return name, ""


def _classic_fields(fields: str, line: int) -> str:
    """Refuse what classic cron would not read, then compile with Kairos's dialect."""
    for label, part in zip(("minute", "hour", "day-of-month", "month", "day-of-week"), fields.split(), strict=True):
        for item in part.split(","):
            if item[:1].upper() == "H":
                raise _line_error(line, f"'{item}' in the {label} field is a Kairos H token, not classic cron")
            if "?" in item or "~" in item:
                raise _line_error(line, f"'{item}' in the {label} field is not classic cron syntax")
            if _STEP_AFTER_NUMBER.match(item):
                raise _line_error(
                    line,
                    f"'{item}' in the {label} field: classic cron takes a step only after * or a range (write a-b/n)",
                )
    try:
        compile_cron(fields, JOB_KEY)
    except InvalidSchedule as exc:
        raise _line_error(line, exc.detail) from None
    return fields


def parse_crontab(text: str, *, skipped: list[SkippedLine] | None = None) -> list[CrontabEntry]:
    """Every job line of a user crontab; InvalidInput("line N", ...) for the first line cron would
    refuse or Kairos cannot schedule. ``@reboot`` lines are refused too, unless ``skipped`` is given:
    then each is appended to it and the rest of the file is read."""
    env: dict[str, str] = {}
    tz: str | None = None
    tz_variable: str | None = None
    shell: str | None = None
    mailto: str | None = None
    seen: Counter[str] = Counter()
    entries: list[CrontabEntry] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if "\x00" in raw:
            raise _line_error(number, "contains the NUL character")
        setting = _env_setting(raw)
        if setting is not None:
            name, value = setting
            if name in ZONE_VARIABLES:
                if name == "TZ":
                    env[name] = value  # also the command's own zone, as cron exports it
                if value:
                    try:
                        validate_tz(value)
                    except InvalidSchedule as exc:
                        raise _line_error(number, f"{name}: {exc.detail}") from None
                # CRON_TZ outranks TZ for scheduling (cronie reads only CRON_TZ); either one
                # set empty clears it.
                if name == "CRON_TZ" or tz_variable != "CRON_TZ":
                    tz, tz_variable = (value, name) if value else (None, None)
            elif name == SHELL:
                shell = value
            elif name == MAILTO:
                mailto = value
            else:
                env[name] = value
            continue
        words = stripped.split()
        if words[0].startswith("@"):
            keyword = words[0].lower()
            if keyword == "@reboot":
                if skipped is None:
                    raise _line_error(number, REBOOT_REASON + " instead (or skip such lines: --skip-unsupported)")
                skipped.append(SkippedLine(number, stripped, REBOOT_REASON))
                continue
            if keyword not in KEYWORDS:
                raise _line_error(
                    number, f"unknown keyword '{words[0]}'; classic cron knows " + ", ".join(KEYWORDS) + " and @reboot"
                )
            schedule, fields, width = words[0], KEYWORDS[keyword], 1
        else:
            if len(words) < 6:
                raise _line_error(
                    number,
                    "expected five time fields and a command (minute hour day-of-month month day-of-week command)",
                )
            schedule = fields = " ".join(words[:5])
            width = 5
        if len(words) <= width:
            raise _line_error(number, "has no command after the time fields")
        _classic_fields(fields, number)
        rest = stripped
        for _ in range(width):
            rest = rest.split(None, 1)[1]
        command, stdin = split_command(rest)
        if not command.strip():
            raise _line_error(number, "has no command before the first %")
        normal = " ".join(stripped.split())
        entries.append(
            CrontabEntry(
                line=number,
                text=raw,
                schedule=schedule,
                fields=fields,
                command=command.strip(),
                stdin=stdin,
                env=dict(env),
                shell=shell,
                mailto=mailto,
                tz=tz,
                tz_variable=tz_variable,
                repeat=seen[normal],
            )
        )
        seen[normal] += 1
    return entries
