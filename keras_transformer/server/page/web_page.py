"""The web page at `/` on the REST port: a translator, as LibreTranslate's page is, that also
shows the model's n-best list and its attention (the paper's Figures 3-5).

Plain HTML, CSS and JavaScript modules from the package's `web/` folder, no build step:
- `app.js`, the translator: LibreTranslate's `GET /frontend/settings`, `GET /languages`,
  `POST /translate` (as the text is typed) and `POST /detect`'s `auto` source; the pair and the
  text kept in the URL (`?source=&target=&q=`);
- `inspect.js`, the Inspect panel: TF Serving's `:predict` of the model that translates the pair
  (`GET /v1/models`) with the `translate_options` signature for the n-best list and with the
  `attention` signature for the heat maps;
- `files.js`, the Files tab: LibreTranslate's `POST /translate_file`, then the download;
- `server.js`, their requests and errors.
It loads nothing from another origin, and says so to the browser: every file is sent with a
Content-Security-Policy (CSP Level 3) that allows only the server itself.

`keras-transformer serve --no-ui` leaves the page out.
"""

from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

# The page's files by URL path; nothing else under the folder is served.
FILES = {
    "/": "index.html",
    "/static/style.css": "style.css",
    "/static/favicon.svg": "favicon.svg",
    **{f"/static/{name}": name for name in ("app.js", "inspect.js", "files.js", "server.js")},
}
WEB = resources.files(__package__) / "web"

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}

HEADERS = {
    # Scripts, styles, and the page's requests: this server only; no frames, no <base>.
    "Content-Security-Policy": (
        "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",  # a new release's page, not a cached one beside a new server
}


class WebPage:
    """The page's files as routes of the server's application (`server.add_routes(
    WebPage().routes())`): each answers `GET` (and `HEAD`) of its path. Another page gives its
    own `files` ({URL path: file}) and `headers`."""

    def __init__(self, files=None, headers=HEADERS):
        files = files or {path: WEB / name for path, name in FILES.items()}
        self.headers = headers
        self.files = {
            path: (file.read_bytes(), CONTENT_TYPES[file.name[file.name.rindex(".") :]])
            for path, file in files.items()
        }

    def reply(self, path: str) -> Response:
        content, content_type = self.files[path]
        return Response(content, headers=self.headers, media_type=content_type)

    def routes(self) -> list[Route]:
        async def endpoint(request: Request) -> Response:
            return self.reply(request.url.path)

        return [Route(path, endpoint, methods=["GET"]) for path in self.files]
