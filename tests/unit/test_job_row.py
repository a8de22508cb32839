"""The job row is declared once (app.store.jobs.NewJob): the statements that write it bind its fields by name."""

from __future__ import annotations

from app.store import jobs
from app.store.queries import q


def binds(name: str) -> set[str]:
    return set(q(name).compile().params)


def test_the_insert_binds_every_column_of_a_new_job_and_nothing_else() -> None:
    assert binds("JobInsertMany") == {*jobs.NEW_JOB_COLUMNS, "shard_id", "due_minute"}


def test_the_update_binds_every_column_a_job_may_change_and_its_guards() -> None:
    assert binds("JobUpdate") == {*jobs.UPDATED_COLUMNS, "tenant_id", "job_id", "version", "updated_at"}
    assert not jobs.UPDATE_KEEPS & set(jobs.UPDATED_COLUMNS)


def test_the_json_columns_are_the_fields_declared_as_dicts() -> None:
    assert {"labels", "http_headers", "http_auth"} == jobs.JSON_COLUMNS


def test_every_option_of_a_job_is_a_column_of_its_row() -> None:
    """new_job_row copies a job's Options by name: each needs the NewJob field (and column) of its name."""
    import msgspec

    from app.domain.jobs import Options

    options = {f.name for f in msgspec.structs.fields(Options)}
    assert options and options <= {f.name for f in msgspec.structs.fields(jobs.NewJob)}
