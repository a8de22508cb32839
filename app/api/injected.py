"""What handlers declare to be given the process's shared objects, by name and type (app.api.app.Shared
registers each under its name; app.api.auth has the request's database and tenant)."""

from __future__ import annotations

from litestar.di import NamedDependency

from app.api.jobs.service import JobSubmitter
from app.api.jobs.submit import SubmitWriter
from app.config import Settings
from app.store import Database
from app.store.payloads import PayloadStore

SettingsDep = NamedDependency[Settings]
DatabaseDep = NamedDependency[Database]
SubmitWriterDep = NamedDependency[SubmitWriter]
PayloadStoreDep = NamedDependency[PayloadStore]
SubmitterDep = NamedDependency[JobSubmitter]
