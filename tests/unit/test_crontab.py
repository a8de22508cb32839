"""app/domain/crontab/: reading crontab files, classic cron's clock, and the comparison with Kairos.

The simulation of cronie's loop is checked three ways: hand-worked DST cases in US, Lord Howe and
Samoa zones; a property test against an independent minute-by-minute oracle (its own field sets,
built with the generated expression) in zones without DST, where classic cron, the oracle and
Kairos must agree exactly; and the comparison's explanations.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from app.domain import crontab as ct
from app.domain.schedule import DstPolicy
from app.errors import InvalidInput, InvalidSchedule

UTC = timezone.utc
NY = "America/New_York"
PROPERTY = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

REALISTIC = r"""# Edit this file to introduce tasks to be run by cron.
# m h  dom mon dow   command
SHELL=/bin/bash
MAILTO="ops@example.com"
PATH = /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin
CRON_TZ=America/New_York

30 2 * * *   /usr/local/bin/backup.sh --full > /var/log/backup.log 2>&1
*/15 * * * * curl -fsS https://example.com/ping >/dev/null

@daily       find /tmp -type f -mtime +7 -delete
0 9 * * MON-FRI  mail -s "report $(date +\%F)" boss@example.com%Numbers attached.%-- cron
GREETING='hello world'
@hourly      echo "$GREETING"
"""


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


# -- reading files -------------------------------------------------------------------------------------


def test_a_realistic_crontab_reads_as_cron_does() -> None:
    entries = ct.parse_crontab(REALISTIC)
    assert [(e.line, e.schedule, e.fields) for e in entries] == [
        (8, "30 2 * * *", "30 2 * * *"),
        (9, "*/15 * * * *", "*/15 * * * *"),
        (11, "@daily", "0 0 * * *"),
        (12, "0 9 * * MON-FRI", "0 9 * * MON-FRI"),
        (14, "@hourly", "0 * * * *"),
    ]
    backup, ping, daily, mail, hourly = entries
    assert backup.command == "/usr/local/bin/backup.sh --full > /var/log/backup.log 2>&1"
    assert backup.tz == NY and backup.tz_variable == "CRON_TZ"
    assert backup.shell == "/bin/bash" and backup.mailto == "ops@example.com"
    assert backup.env == {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"}
    # An unescaped % ends the command; the rest is standard input with % as newlines; \% is a %.
    assert mail.command == 'mail -s "report $(date +%F)" boss@example.com'
    assert mail.stdin == "Numbers attached.\n-- cron\n"
    # Variables apply to the lines below them only.
    assert "GREETING" not in mail.env and hourly.env["GREETING"] == "hello world"
    assert hourly.payload() == {
        "command": 'echo "$GREETING"',
        "env": dict(hourly.env),
        "shell": "/bin/bash",
        "mailto": "ops@example.com",
    }
    assert daily.stdin is None and ping.command.startswith("curl")


def test_the_body_and_idempotency_key_depend_on_the_line_not_its_position() -> None:
    [first] = ct.parse_crontab("CRON_TZ=UTC\n0 1 * * * /bin/true\n")
    [moved] = ct.parse_crontab("CRON_TZ=UTC\n# a comment above now\n\n0   1 * * *   /bin/true\n")
    assert first.line != moved.line and first.idempotency_key("live") == moved.idempotency_key("live")
    assert first.idempotency_key("live") != first.idempotency_key("dry-run")
    body = ct.job_body(first, tz="UTC", target_type="queue", target_ref="cron", name_prefix="crontab: ", dry_run=True)
    assert body == {
        "name": "crontab: /bin/true",
        "target": {"type": "queue", "ref": "cron"},
        "schedule": {"cron": "0 1 * * *", "tz": "UTC"},
        "payload": {"command": "/bin/true", "env": {}},
        "idempotencyKey": first.idempotency_key("dry-run"),
        "dryRun": True,
    }
    # Two identical lines run twice in classic cron, so they are two jobs.
    twins = ct.parse_crontab("* * * * * /bin/true\n* * * * * /bin/true\n")
    assert [t.repeat for t in twins] == [0, 1]
    assert twins[0].idempotency_key("live") != twins[1].idempotency_key("live")


def test_tz_is_the_zone_and_stays_in_the_environment_but_cron_tz_wins() -> None:
    [a, b, c] = ct.parse_crontab("TZ=Europe/Paris\n0 1 * * * a\nCRON_TZ=Asia/Tokyo\n0 1 * * * b\nTZ=UTC\n0 1 * * * c\n")
    assert (a.tz, a.env) == ("Europe/Paris", {"TZ": "Europe/Paris"})
    assert (b.tz, b.tz_variable) == ("Asia/Tokyo", "CRON_TZ")
    assert (c.tz, c.env["TZ"]) == ("Asia/Tokyo", "UTC")
    [d] = ct.parse_crontab("0 1 * * * d\n")
    assert d.tz is None and d.zone("UTC") == "UTC"
    with pytest.raises(InvalidInput, match="give the zone with --tz"):
        d.zone(None)


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("# boot\n@reboot /usr/bin/start-things\n", 2, "@reboot runs when the machine boots"),
        ("0 1 * * *\n", 1, "expected five time fields and a command"),
        ("MAILTO=x\n\n61 * * * * cmd\n", 3, "61 is out of range 0-59"),
        ("H * * * * cmd\n", 1, "Kairos H token"),
        ("0 ? * * * cmd\n", 1, "not classic cron"),
        ("5/10 * * * * cmd\n", 1, "a step only after \\* or a range"),
        ("0 1 * * * %just input\n", 1, "no command before the first %"),
        ("@every 5m cmd\n", 1, "unknown keyword '@every'"),
        ("@daily\n", 1, "no command after the time fields"),
        ("CRON_TZ=Mars/Olympus\n0 1 * * * x\n", 1, "CRON_TZ: unknown time zone 'Mars/Olympus'"),
        ("0 0 31 2 * cmd\n", 1, "never fires"),
    ],
)
def test_a_line_cron_would_refuse_is_refused_by_number(text: str, line: int, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as raised:
        ct.parse_crontab(text)
    assert raised.value.field == f"line {line}"


# -- classic cron's clock across DST (cronie's main loop) -----------------------------------------------

NY_ZONE = ZoneInfo(NY)
SPRING = (utc(2027, 3, 14), utc(2027, 3, 15))  # 02:00 EST -> 03:00 EDT at 07:00Z
FALL = (utc(2027, 11, 7), utc(2027, 11, 8))  # 02:00 EDT -> 01:00 EST at 06:00Z


def runs(fields: str, zone: str, span: tuple[datetime, datetime], **kw: object) -> list[tuple[str, str, str]]:
    found = ct.classic_runs(ct.ClassicEntry.of(fields), ZoneInfo(zone), *span, **kw)  # type: ignore[arg-type]
    return [(r.at.strftime("%H:%M"), r.wall.strftime("%H:%M"), r.how) for r in found]


def test_spring_forward_fixed_time_jobs_catch_up_at_the_new_time() -> None:
    assert runs("30 2 * * *", NY, SPRING) == [("07:00", "02:30", "catch-up")]
    # Each fixed time in the gap runs, all at the first minute after the jump, and 03:00 as well.
    assert runs("0,30 2 * * *", NY, SPRING) == [("07:00", "02:00", "catch-up"), ("07:00", "02:30", "catch-up")]
    assert runs("0 2,3 * * *", NY, SPRING) == [("07:00", "02:00", "catch-up"), ("07:00", "03:00", "on time")]


def test_spring_forward_wildcard_jobs_follow_the_new_local_time() -> None:
    hourly = runs("30 * * * *", NY, SPRING)
    assert ("07:30", "03:30", "on time") in hourly and not any(wall == "02:30" for _, wall, _ in hourly)
    quarter = [r for r in runs("*/15 * * * *", NY, SPRING) if "06:00" <= r[0] <= "07:15"]
    assert quarter == [
        ("06:00", "01:00", "on time"),
        ("06:15", "01:15", "on time"),
        ("06:30", "01:30", "on time"),
        ("06:45", "01:45", "on time"),
        ("07:00", "03:00", "on time"),
        ("07:15", "03:15", "on time"),
    ]


def test_fall_back_fixed_time_jobs_run_once_wildcard_jobs_in_both_passes() -> None:
    assert runs("30 1 * * *", NY, FALL) == [("05:30", "01:30", "on time")]
    both = [r for r in runs("30 * * * *", NY, FALL) if "05:00" <= r[0] <= "07:00"]
    assert both == [("05:30", "01:30", "on time"), ("06:30", "01:30", "second pass")]
    # A * minute makes a job "wildcard" for cron (MIN_STAR), whatever its hour field.
    assert len(runs("*/15 1 * * *", NY, FALL)) == 8


def test_a_cron_tz_job_on_a_utc_daemon_is_read_minute_by_minute() -> None:
    daemon = ZoneInfo("UTC")
    assert runs("30 2 * * *", NY, SPRING, daemon_zone=daemon) == []
    assert runs("30 1 * * *", NY, FALL, daemon_zone=daemon) == [
        ("05:30", "01:30", "on time"),
        ("06:30", "01:30", "on time"),
    ]


def test_a_thirty_minute_change_is_still_caught_up() -> None:
    # Lord Howe Island: 02:00 -> 02:30 on 2027-10-03 (15:30Z the day before), 31 minutes for cron.
    span = (utc(2027, 10, 2, 12), utc(2027, 10, 2, 18))
    assert runs("15 2 * * *", "Australia/Lord_Howe", span) == [("15:30", "02:15", "catch-up")]


def test_an_offset_change_without_a_dst_flip_goes_unseen() -> None:
    # Samoa skipped 2011-12-30 (-10 to +14, DST both sides): cron.c's set_time re-reads the offset only
    # when tm_isdst flips, so the daemon runs on at -10 and calls 12:00 on the 31st "the 30th".
    found = ct.classic_runs(
        ct.ClassicEntry.of("0 12 * * *"), ZoneInfo("Pacific/Apia"), utc(2011, 12, 29), utc(2011, 12, 31, 12)
    )
    assert [(r.at.isoformat(), r.wall.isoformat()) for r in found] == [
        ("2011-12-29T22:00:00+00:00", "2011-12-29T12:00:00"),
        ("2011-12-30T22:00:00+00:00", "2011-12-30T12:00:00"),
    ]
    result = ct.compare("0 12 * * *", "Pacific/Apia", utc(2011, 12, 29), utc(2011, 12, 31, 12))
    [note] = result.differences
    assert "cron does not see this change" in note.text and "Kairos shifts it to 2011-12-31 00:00 +14" in note.text


def test_a_jump_of_three_hours_or_more_is_not_caught_up() -> None:
    # Asia/Ust-Nera, 1981-04-01 00:00 +09 -> 03:00 +12 (the one such DST change in tzdata since 1970):
    # timeDiff is 181 minutes, cron.c's "large" case, so 01:30 is never run.
    span = (utc(1981, 3, 31), utc(1981, 4, 1))
    simulation = ct.simulate(ct.ClassicEntry.of("30 1 * * *"), ZoneInfo("Asia/Ust-Nera"), *span)
    assert simulation.runs == () and [(j.minutes, j.wakeup) for j in simulation.jumps] == [(180, "large")]
    [note] = ct.compare("30 1 * * *", "Asia/Ust-Nera", *span).differences
    assert note.text == (
        "1981-04-01 01:30 Asia/Ust-Nera does not exist (clocks go from 00:00 to 03:00): classic cron "
        "does not run it (a jump of 3 h or more is not caught up), Kairos shifts it to 03:00 +12; "
        "at 03:00 +12 classic cron runs not at all, Kairos once"
    )


# -- comparing with Kairos -----------------------------------------------------------------------------


def notes(fields: str, span: tuple[datetime, datetime], **kw: object) -> ct.Comparison:
    return ct.compare(fields, NY, *span, **kw)  # type: ignore[arg-type]


def test_a_gap_both_handle_alike_is_a_note_not_a_difference() -> None:
    result = notes("30 2 * * *", SPRING)
    assert result.identical and not result.differences
    [note] = result.notes
    assert note.text == (
        "2027-03-14 02:30 America/New_York does not exist (clocks go from 02:00 to 03:00): "
        "classic cron runs it at 03:00 EDT (time jump), Kairos shifts it to 03:00 EDT"
    )


def test_the_differences_across_a_us_dst_change_are_explained() -> None:
    skip = notes("30 2 * * *", SPRING, dst=DstPolicy(gap="skip"))
    assert not skip.identical and "Kairos skips it" in skip.differences[0].text
    wildcard = notes("30 * * * *", SPRING)
    assert [n.text.split(": ", 1)[1] for n in wildcard.differences] == [
        (
            "classic cron does not run it (a job with * in its minute or hour field follows the new local time), "
            "Kairos shifts it to 03:00 EDT; at 03:00 EDT classic cron runs not at all, Kairos once"
        )
    ]
    merged = notes("0,30 2 * * *", SPRING).differences[0]
    assert merged.text.endswith("at 03:00 EDT classic cron runs twice, Kairos once")
    assert (len(merged.classic), len(merged.kairos)) == (2, 1)
    fixed_hour = notes("*/15 1 * * *", FALL)
    [repeat] = fixed_hour.differences
    assert "occur twice (clocks go back from 02:00 to 01:00): classic cron runs them twice" in repeat.text
    assert "Kairos once, in EDT (dst repeat: once)" in repeat.text
    assert notes("30 1 * * *", FALL).identical and notes("30 * * * *", FALL).identical
    assert not notes("30 1 * * *", FALL, dst=DstPolicy(repeat="twice")).identical


def test_the_day_rule_difference_is_explained() -> None:
    result = ct.compare("0 0 */2 * 1", "UTC", utc(2027, 3, 1), utc(2027, 3, 15))
    [note] = result.differences
    assert note.text.startswith("Kairos also runs at 2027-03-03 00:00 UTC")
    assert "require both day-of-month and day-of-week" in note.text
    assert result.classic == (utc(2027, 3, 1),)  # odd days that are Mondays; Kairos: odd days or Mondays
    assert len(result.kairos) == 8


def test_identical_lines_have_no_notes() -> None:
    result = ct.compare("@daily", NY, utc(2027, 1, 1), utc(2027, 2, 1))
    assert result.identical and result.notes == () and len(result.classic) == 31


# -- property: zones without DST agree exactly ---------------------------------------------------------

NO_DST = [
    "UTC",
    "Asia/Tokyo",
    "Asia/Kolkata",
    "America/Phoenix",
    "Asia/Kathmandu",
    "Pacific/Port_Moresby",
    "Pacific/Kiritimati",
    "Africa/Nairobi",
]


@dataclass(frozen=True)
class Field:
    text: str
    values: frozenset[int]


def field(low: int, high: int, star_high: int | None = None, stars: int = 1) -> st.SearchStrategy[Field]:
    """Values low..high; ``*`` and ``*/k`` cover up to ``star_high`` (day-of-month: 31); ``stars``
    weighs ``*`` up so that short ranges see runs."""
    top = high if star_high is None else star_high

    def step(k: int) -> Field:
        return Field(f"*/{k}", frozenset(range(low, top + 1, k)))

    def span(a: int, b: int, k: int) -> Field:
        a, b = min(a, b), max(a, b)
        return Field(f"{a}-{b}" if k == 1 else f"{a}-{b}/{k}", frozenset(range(a, b + 1, k)))

    value = st.integers(low, high)
    others = [
        value.map(lambda v: Field(str(v), frozenset({v}))),
        st.integers(1, max(1, (high - low) // 2)).map(step),
        st.builds(span, value, value, st.integers(1, 4)),
        st.lists(value, min_size=2, max_size=4, unique=True).map(
            lambda vs: Field(",".join(map(str, vs)), frozenset(vs))
        ),
    ]
    star = st.just(Field("*", frozenset(range(low, top + 1))))
    return st.integers(0, stars + len(others) - 1).flatmap(lambda i: star if i < stars else others[i - stars])


@dataclass(frozen=True)
class Expr:
    minute: Field
    hour: Field
    dom: Field
    month: Field
    dow: Field

    @property
    def text(self) -> str:
        return " ".join(f.text for f in (self.minute, self.hour, self.dom, self.month, self.dow))

    def matches(self, wall: datetime) -> bool:
        """The oracle: crontab(5) read directly, with cron's day rule (a field starting with * ANDs)."""
        if wall.minute not in self.minute.values or wall.hour not in self.hour.values:
            return False
        if wall.month not in self.month.values:
            return False
        dows = {d % 7 for d in self.dow.values}
        by_day, by_dow = wall.day in self.dom.values, wall.isoweekday() % 7 in dows
        if self.dom.text.startswith("*") or self.dow.text.startswith("*"):
            return by_day and by_dow
        return by_day or by_dow


EXPRESSIONS = st.builds(
    Expr, field(0, 59), field(0, 23, stars=2), field(1, 28, 31, stars=4), field(1, 12, stars=6), field(0, 7, stars=3)
)


@PROPERTY
@given(
    expr=EXPRESSIONS,
    zone=st.sampled_from(NO_DST),
    start=st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2035, 1, 1)),
    hours=st.integers(1, 48),
)
def test_without_dst_classic_cron_the_oracle_and_kairos_agree(
    expr: Expr, zone: str, start: datetime, hours: int
) -> None:
    try:
        entry = ct.ClassicEntry.of(expr.text)
    except InvalidSchedule:
        assume(False)
        return
    lo = start.replace(second=0, microsecond=0, tzinfo=UTC)
    hi = lo + timedelta(hours=hours)
    tz = ZoneInfo(zone)
    oracle = [
        lo + timedelta(minutes=m)
        for m in range(hours * 60)
        if expr.matches((lo + timedelta(minutes=m)).astimezone(tz).replace(tzinfo=None))
    ]
    event(f"runs: {min(len(oracle), 10)}")
    simulated = ct.classic_runs(entry, tz, lo, hi)
    assert [r.at for r in simulated] == oracle
    assert {r.how for r in simulated} <= {"on time"}
    result = ct.compare(expr.text, zone, lo, hi)
    assert list(result.classic) == oracle
    if entry.day_rule_differs:
        assert result.identical or all("require both day-of-month" in n.text for n in result.differences)
    else:
        assert list(result.kairos) == oracle
        assert result.identical and result.notes == ()
