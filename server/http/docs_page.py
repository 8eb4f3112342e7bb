"""The API docs page at /docs: Swagger UI served from an installed package, not a CDN.

Litestar's docs pages load their scripts and styles from a CDN, so on a machine without
internet access (an air-gapped cluster, a laptop on a train) /docs stays blank. The
`swagger-ui-bundle-v2` package ships Swagger UI's built files; they are served here under
/docs/assets/, and the page points at them.
"""

from __future__ import annotations

from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.router import Router
from litestar.static_files import create_static_files_router

from rose_embed.server.http.access import access_opt

ASSETS_PATH = "/docs/assets"
# The docs' routes (the page, the document, the page's files), declared to the API-key guard.
DOCS_ACCESS = access_opt("docs")


def docs_page() -> SwaggerRenderPlugin:
    """The page at the OpenAPI path itself (/docs); the document stays at /docs/openapi.json."""
    return SwaggerRenderPlugin(
        path="/",
        js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
        css_url=f"{ASSETS_PATH}/swagger-ui.css",
        standalone_preset_js_url=f"{ASSETS_PATH}/swagger-ui-standalone-preset.js",
        favicon=f"<link rel='icon' type='image/png' href='{ASSETS_PATH}/favicon-32x32.png'>",
    )


def docs_assets() -> Router:
    from swagger_ui_bundle import swagger_ui_path

    return create_static_files_router(path=ASSETS_PATH, directories=[swagger_ui_path], include_in_schema=False,
                                       opt=DOCS_ACCESS)
