"""Static files the API serves from installed packages: its own (``app/api/web``, package data) and
the browser libraries of declared dependencies, read where pip put them; never fetched from a CDN.

* plotly.js, the dashboard's charts: ``app/api/web/plotly-basic.min.js``, the minified basic bundle
  (scatter, bar and pie traces: what the dashboard draws) of the npm package ``plotly.js-basic-dist-min``
  (4.1.2), with its MIT licence beside it (``plotly-basic.LICENSE.txt``). Shipped as our package data:
  the ``plotly`` Python package carried the full bundle in 64 MB of Python the API never imports. To
  update it: ``npm pack plotly.js-basic-dist-min@VERSION``, then copy ``plotly-basic.min.js`` and
  ``LICENSE`` from the tarball.
* Swagger UI, the OpenAPI page at ``/schema``: ``swagger_ui/static/`` of the ``swagger-ui-py`` package.

A dependency is located with ``importlib.util.find_spec``, which finds a package without importing
it (importing swagger_ui would run its Python side for a few static files).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import cache
from importlib.resources import as_file, files
from pathlib import Path

from litestar import Response
from litestar.exceptions import NotFoundException
from litestar.response import File

from app import errors

OWN = "app.api"


@dataclass(frozen=True)
class Asset:
    """A file under a package's directory: ``package`` is an import name, ``parts`` the path inside it."""

    package: str
    parts: tuple[str, ...]
    media_type: str
    cache_control: str

    @property
    def name(self) -> str:
        return self.parts[-1]


JS = "text/javascript; charset=utf-8"
CSS = "text/css; charset=utf-8"
# Our own files change with every release: revalidate. Dependencies change only with an upgrade.
REVALIDATE = "no-cache"
LONG = "public, max-age=86400"


def own(name: str, media_type: str) -> Asset:
    return Asset(OWN, ("web", name), media_type, REVALIDATE)


DASHBOARD = {
    a.name: a
    for a in (
        own("dashboard.js", JS),
        own("dashboard.css", CSS),
        own("favicon.svg", "image/svg+xml"),
        own("plotly-basic.min.js", JS),
    )
}
SWAGGER_UI = {
    a.name: a
    for a in (
        Asset("swagger_ui", ("static", "swagger-ui-bundle.js"), JS, LONG),
        Asset("swagger_ui", ("static", "swagger-ui-standalone-preset.js"), JS, LONG),
        Asset("swagger_ui", ("static", "swagger-ui.css"), CSS, LONG),
    )
}


class AssetMissing(errors.KairosError):
    """A static file of the web pages is not installed."""


@cache
def locate(asset: Asset) -> Path:
    """The file on disk; AssetMissing (500, logged) when its package is not installed."""
    if asset.package == OWN:
        resource = files(OWN).joinpath(*asset.parts)
        with as_file(resource) as path:  # a real file in any installed wheel or checkout
            found = Path(path)
    else:
        spec = importlib.util.find_spec(asset.package)
        if spec is None or not spec.submodule_search_locations:
            raise AssetMissing(f"the {asset.package} package is not installed")
        found = Path(next(iter(spec.submodule_search_locations)), *asset.parts)
    if not found.is_file():
        raise AssetMissing(f"{'/'.join(asset.parts)} is missing from the {asset.package} package")
    return found


def serve(table: dict[str, Asset], name: str) -> File:
    asset = table.get(name)
    if asset is None:
        raise NotFoundException(f"no asset named {name!r}")
    return File(
        locate(asset),
        media_type=asset.media_type,
        content_disposition_type="inline",
        headers={"Cache-Control": asset.cache_control, "X-Content-Type-Options": "nosniff"},
    )


def page(name: str, headers: dict[str, str]) -> Response[bytes]:
    """One of our HTML pages, read from package data."""
    body = locate(Asset(OWN, ("web", name), "text/html; charset=utf-8", REVALIDATE)).read_bytes()
    return Response(
        body,
        media_type="text/html; charset=utf-8",
        headers={"Cache-Control": REVALIDATE, "X-Content-Type-Options": "nosniff", **headers},
    )
