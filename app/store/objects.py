"""The object store: history archives (``history/``) and payloads kept by reference (``payloads/``).

One small interface, ``ObjectStore`` (put, get, list by prefix, keys relative to its root), and two
backends chosen by ``KAIROS_ARCHIVE_URL``:

* empty, a path or ``file:///path``: ``LocalObjectStore``, a directory (by default
  ``KAIROS_HOME/objects``). A put writes a temporary file, fsyncs it and renames it into place, so a
  reader sees a whole object or none, and an object that was put survives a crash.
* ``s3://bucket/prefix`` (any S3-compatible store, with ``KAIROS_ARCHIVE_ENDPOINT``), ``gs://``,
  ``az://``, ``memory:///``: ``RemoteObjectStore`` on obstore (the optional extra
  ``kairos[objects]``). Credentials come from the environment the way the cloud's own tools read
  them (``AWS_ACCESS_KEY_ID``, an instance role ...), never from Kairos settings.

Failures leave as ``ObjectStoreUnavailable`` (could not reach or write the store) or
``ObjectNotFound`` (the key is not there); callers never see a backend's own exceptions.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from app.errors import ObjectNotFound, ObjectStoreUnavailable

LOCAL_DIRECTORY = "objects"  # under KAIROS_HOME when KAIROS_ARCHIVE_URL is empty
EXTRA = "kairos[objects]"


class ObjectStore(Protocol):
    """Immutable objects under string keys (``history/2026/12/01/...``), relative to the store's root."""

    url: str

    async def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` durably (replacing what was there)."""

    async def get(self, key: str) -> bytes:
        """The object's bytes; ObjectNotFound when there is none."""

    async def list(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (a folder such as ``history/2026``), sorted."""


def check_key(key: str) -> str:
    """A relative key of path segments; never one that climbs out of the store (``..``) or is absolute."""
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in key or "\x00" in key:
        raise ObjectNotFound(f"not an object key: {key!r}")
    return key


class LocalObjectStore:
    """A directory on this machine (shared by every process that reads the same objects)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = root.as_uri()

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    def _put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".put-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            Path(tmp).replace(path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a crash
        finally:
            os.close(directory)

    async def put(self, key: str, data: bytes) -> None:
        try:
            await asyncio.to_thread(self._put, key, data)
        except OSError as exc:
            raise ObjectStoreUnavailable(f"cannot write {key} under {self.root}: {exc.strerror or exc}") from exc

    async def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(f"no object {key} under {self.root}") from None
        except OSError as exc:
            raise ObjectStoreUnavailable(f"cannot read {key} under {self.root}: {exc.strerror or exc}") from exc

    def _list(self, prefix: str) -> list[str]:
        base = self._path(prefix) if prefix else self.root
        if not base.is_dir():
            return []
        return sorted(
            p.relative_to(self.root).as_posix()
            for p in base.rglob("*")
            if p.is_file() and not p.name.startswith(".put-")
        )

    async def list(self, prefix: str) -> list[str]:
        try:
            return await asyncio.to_thread(self._list, prefix.strip("/"))
        except OSError as exc:
            raise ObjectStoreUnavailable(f"cannot list {prefix} under {self.root}: {exc.strerror or exc}") from exc


class RemoteObjectStore:
    """Any store obstore reaches by URL: S3 and S3-compatible (MinIO, Ceph, R2 ...), GCS, Azure, memory."""

    def __init__(self, url: str, *, endpoint: str = "", region: str = "") -> None:
        try:
            from obstore.store import from_url
        except ImportError:
            raise ObjectStoreUnavailable(f"KAIROS_ARCHIVE_URL {url} needs obstore: pip install '{EXTRA}'") from None
        self.url = url
        config: dict[str, Any] = {}
        if endpoint:
            config["endpoint"] = endpoint
        if region:
            config["region"] = region
        client = {"allow_http": True} if endpoint.startswith("http://") else None
        try:
            self._store = from_url(url, config=config or None, client_options=client)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - obstore raises its own types for a URL it cannot use
            raise ObjectStoreUnavailable(f"KAIROS_ARCHIVE_URL {url}: {exc}") from None

    async def put(self, key: str, data: bytes) -> None:
        import obstore

        try:
            await obstore.put_async(self._store, check_key(key), data)
        except Exception as exc:  # network, credentials, throttling: all mean "not stored"
            raise ObjectStoreUnavailable(f"cannot write {key} to {self.url}: {_first_line(exc)}") from exc

    async def get(self, key: str) -> bytes:
        import obstore

        try:
            result = await obstore.get_async(self._store, check_key(key))
            return bytes(await result.bytes_async())
        except FileNotFoundError:
            raise ObjectNotFound(f"no object {key} in {self.url}") from None
        except Exception as exc:
            raise ObjectStoreUnavailable(f"cannot read {key} from {self.url}: {_first_line(exc)}") from exc

    async def list(self, prefix: str) -> list[str]:
        import obstore

        keys: list[str] = []
        try:
            async for page in obstore.list(self._store, prefix=prefix.strip("/") or None):
                keys += [str(meta["path"]) for meta in page]
        except Exception as exc:
            raise ObjectStoreUnavailable(f"cannot list {prefix} in {self.url}: {_first_line(exc)}") from exc
        return sorted(keys)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def open_store(url: str, home: Path, *, endpoint: str = "", region: str = "") -> ObjectStore:
    """The store ``KAIROS_ARCHIVE_URL`` names (empty: the directory ``home/objects``)."""
    if not url:
        return LocalObjectStore(home / LOCAL_DIRECTORY)
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return LocalObjectStore(Path(unquote(parsed.path)))
    if not parsed.scheme:
        return LocalObjectStore(Path(url).resolve())
    return RemoteObjectStore(url, endpoint=endpoint, region=region)
