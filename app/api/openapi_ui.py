"""The OpenAPI page at /schema: Swagger UI served from the installed ``swagger-ui-py`` package.

Litestar's render plugins load their JavaScript from a CDN unless given URLs; this one points them
at /schema/assets/ on the API itself (app.api.assets) and drops Litestar's CDN favicon. The
document itself stays at /schema/openapi.json.
"""

from __future__ import annotations

from litestar import Router, get
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.params import FromPath
from litestar.response import File

from app.api import assets

ASSETS_PATH = "/assets"


@get(f"{ASSETS_PATH}/{{name:str}}", include_in_schema=False)
async def swagger_asset(name: FromPath[str]) -> File:
    return assets.serve(assets.SWAGGER_UI, name)


class LocalSwaggerUI(SwaggerRenderPlugin):
    """Swagger UI at /schema (and /schema/swagger) with its files from this API."""

    def __init__(self, schema_path: str = "/schema") -> None:
        base = f"{schema_path}{ASSETS_PATH}"
        super().__init__(
            js_url=f"{base}/swagger-ui-bundle.js",
            css_url=f"{base}/swagger-ui.css",
            standalone_preset_js_url=f"{base}/swagger-ui-standalone-preset.js",
            path="/swagger",
            favicon="",
        )

    def receive_router(self, router: Router) -> None:
        super().receive_router(router)
        router.register(swagger_asset)
