"""A page to browse the server's OpenAPI contract (`/openapi.json`) at `/docs`: Swagger UI,
its script and style from the `swagger-ui-bundle` package, the page and its start from `web/`
(`docs.html`, `docs.js`), so that nothing is loaded from another origin (the machine may be
offline), as the Content-Security-Policy says.
"""

from swagger_ui_bundle import swagger_ui_path

from keras_transformer.server.page.web_page import HEADERS, WEB, WebPage

DOCS_PATH = "/docs"

FILES = {
    DOCS_PATH: WEB / "docs.html",
    f"{DOCS_PATH}/docs.js": WEB / "docs.js",
    **{
        f"{DOCS_PATH}/{name}": swagger_ui_path / name
        for name in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png")
    },
}

# Swagger UI draws its icons as data: images.
DOCS_HEADERS = HEADERS | {
    "Content-Security-Policy": HEADERS["Content-Security-Policy"] + "; img-src 'self' data:"
}


def api_docs() -> WebPage:
    """The docs page, served as the web page is (`server.add_routes(api_docs().routes())`)."""
    return WebPage(FILES, DOCS_HEADERS)
