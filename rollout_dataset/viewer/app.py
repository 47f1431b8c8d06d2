"""The viewer's web app (Starlette): two static pages, their assets, and a read-only JSON API.

Routes (GET only; anything else is 404/405):

* ``/`` — the index page; ``/rollout.html?id=ID`` — one rollout's page (the link to share).
* ``/static/...`` — the pages' scripts, styles and vendored libraries (package files only).
* ``/api/info`` — what PATH is (``artifacts`` or ``dataset``) and its name.
* ``/api/index?offset=&limit=`` — index rows, paged; ``done`` says whether the scan has ended.
* ``/api/rollout?id=ID`` — one rollout (header, conversation, calls, graph, sequences, audit,
  validation errors); ``/api/tokens?id=ID&seq=K&start=S&count=N`` — a window of one sequence.

A rollout is looked up by the id its source found when it scanned PATH: no URL is joined to a path,
so ``..``, encoded slashes and absolute paths reach nothing. Every response carries a strict
Content-Security-Policy (scripts and styles from this server only, no inline script), so text from a
rollout that the page inserted as HTML by mistake would still not run.
"""

from __future__ import annotations

import logging
import threading
from importlib import resources
from pathlib import Path
from typing import Any, Iterator

from starlette.applications import Starlette
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.responses import JSONResponse as _StarletteJSONResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from rollout_dataset.viewer.sources import RolloutNotFound, RolloutSource
from rollout_dataset.viewer.views import MAX_WINDOW, index_record, page_json, rollout_view, token_window

__all__ = ["build_app", "static_dir", "PAGES", "IndexScan", "SECURITY_HEADERS", "CONTENT_SECURITY_POLICY", "load_view",
           "error_view"]

log = logging.getLogger(__name__)

#: scripts, styles, images and data from this origin only; no inline script, no plugins, no framing.
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                           "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {"content-security-policy": CONTENT_SECURITY_POLICY, "x-content-type-options": "nosniff",
                    "referrer-policy": "no-referrer", "cache-control": "no-store"}
PAGES = ("index.html", "rollout.html")
"""The viewer's pages (in `static_dir`): served by the app, copied by the static export."""
_DEFAULT_PAGE = 200


class JSONResponse(_StarletteJSONResponse):
    """A JSON answer written by `page_json` (a lone surrogate as its escape, NaN as null), never a 500."""

    def render(self, content: Any) -> bytes:
        """The body's bytes (UTF-8)."""
        return page_json(content).encode("utf-8")


def static_dir() -> Path:
    """The folder of the pages and their assets shipped in the package."""
    return Path(str(resources.files("rollout_dataset.viewer").joinpath("static")))


class IndexScan:
    """The index rows, read from the source once, on demand, page by page (thread-safe).

    Args:
        source: the rollout source.
    """

    def __init__(self, source: RolloutSource) -> None:
        self._source = source
        self._rows: list[dict[str, Any]] = []
        self._iter: Iterator[dict[str, Any]] | None = source.index_rows()
        self._lock = threading.Lock()
        self.error: str | None = None

    def page(self, offset: int, limit: int) -> tuple[list[dict[str, Any]], bool]:
        """Rows ``offset .. offset+limit`` (read from the source as far as needed).

        Args:
            offset: the first row.
            limit: how many rows.

        Returns:
            ``(rows, done)``: done is True once every row has been read.
        """
        with self._lock:
            while self._iter is not None and len(self._rows) < offset + limit:
                try:
                    row = index_record(next(self._iter))
                    if isinstance(row["error"], str):
                        row["error"] = self._source.shown(row["error"])
                    self._rows.append(row)
                except StopIteration:
                    self._iter = None
                except Exception as exc:  # noqa: BLE001 - a broken shard: the rows read so far stay listed
                    log.warning("index scan stopped: %s", exc)
                    self.error = self._source.shown(f"{type(exc).__name__}: {exc}")
                    self._iter = None
            return self._rows[offset:offset + limit], self._iter is None and offset + limit >= len(self._rows)

    def all(self) -> list[dict[str, Any]]:
        """Every row (reads the whole source)."""
        while True:
            rows, done = self.page(0, len(self._rows) + 10_000)
            if done:
                return rows


def load_view(source: RolloutSource, rid: str) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """One rollout's rows, page data and tokenizer.

    Args:
        source: the rollout source.
        rid: the rollout id.

    Returns:
        ``(loaded, view, tokenizer)``; the view's errors name the root by its name, not its path
        (`RolloutSource.shown`).

    Raises:
        RolloutNotFound: no such rollout.
    """
    loaded = source.rollout_rows(rid)
    tokenizer, note = source.tokenizer(source.tokenizer_spec(loaded["rows"])) if loaded["rows"].get("sequences") \
        else (None, None)
    view = rollout_view(loaded, rid, source.shown(note) if note else None)
    view["errors"] = [source.shown(str(error)) for error in view["errors"]]
    return loaded, view, tokenizer


def error_view(source: RolloutSource, rid: str, exc: BaseException) -> dict[str, Any]:
    """The page data of a rollout that could not be read: its id and the error (no path of this machine).

    Args:
        source: the rollout source.
        rid: the rollout id.
        exc: what went wrong.

    Returns:
        ``{"id", "errors"}``.
    """
    return {"id": rid, "errors": [source.shown(f"{type(exc).__name__}: {exc}")]}


def _int(request: Request, name: str, default: int, low: int = 0, high: int = 1 << 31) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return value


#: the Host names the viewer answers to (it serves on loopback only).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def _not_found(what: str) -> JSONResponse:
    return JSONResponse({"error": what}, status_code=404)


def build_app(source: RolloutSource, host: str | None = None) -> Any:
    """The viewer app over one source.

    Args:
        source: from `open_source`.
        host: the address it is served on: a request may name it in ``Host`` besides the loopback
            names (``--host 192.168.1.5``); a wildcard address (``0.0.0.0``, ``::``) adds nothing.

    Returns:
        An ASGI app: the Starlette routes behind a GET-only guard that adds `SECURITY_HEADERS`
        (serve it with `rollout_dataset.server_runner`).
    """
    def not_found(what: str) -> JSONResponse:
        """A 404 that names the rollout, never a path of this machine (the root shows as its name)."""
        return _not_found(source.shown(what))

    scan = IndexScan(source)
    pages = static_dir()

    async def page(request: Request) -> Response:
        name = request.url.path.strip("/") or "index.html"
        if name not in PAGES:
            return not_found("no such page")
        return FileResponse(pages / name, media_type="text/html")

    async def info(request: Request) -> Response:
        return JSONResponse({"kind": source.kind, "name": source.root.name})

    async def index(request: Request) -> Response:
        try:
            offset = _int(request, "offset", 0)
            limit = _int(request, "limit", _DEFAULT_PAGE, 1, 10_000)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        rows, done = scan.page(offset, limit)
        return JSONResponse({"offset": offset, "rows": rows, "done": done, "error": scan.error})

    async def rollout(request: Request) -> Response:
        rid = request.query_params.get("id", "")
        try:
            _, view, _ = load_view(source, rid)
        except RolloutNotFound:
            return not_found(f"no rollout {rid!r}")
        except Exception as exc:  # shown in the page, never a dead server
            log.exception("rollout %s", rid)
            view = error_view(source, rid, exc)
        return JSONResponse(view)

    async def tokens(request: Request) -> Response:
        rid = request.query_params.get("id", "")
        try:
            seq = _int(request, "seq", 0)
            start = _int(request, "start", 0)
            count = _int(request, "count", 2048, 1, MAX_WINDOW)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        try:
            loaded, _, tokenizer = load_view(source, rid)
            return JSONResponse(token_window(loaded, seq, start, count, tokenizer))
        except (RolloutNotFound, KeyError) as exc:
            return not_found(str(exc))
        except Exception as exc:  # named in the page, the server keeps serving
            log.exception("tokens of %s", rid)
            return JSONResponse({"error": source.shown(f"{type(exc).__name__}: {exc}")}, status_code=500)

    app = Starlette(routes=[
        Route("/", page), Route("/index.html", page), Route("/rollout.html", page),
        Route("/api/info", info), Route("/api/index", index), Route("/api/rollout", rollout),
        Route("/api/tokens", tokens), Route("/favicon.ico", lambda request: Response(status_code=204)),
        Mount("/static", StaticFiles(directory=str(pages), follow_symlink=False)),
    ])

    async def with_headers(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        if scope["method"] not in ("GET", "HEAD"):
            await Response("read-only viewer", status_code=405, headers=SECURITY_HEADERS)(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = dict(message, headers=headers)
            await send(message)

        await app(scope, receive, send_with_headers)

    # DNS rebinding: a page on another origin resolving its name to 127.0.0.1 gets a 400, not the API
    allowed = list(LOOPBACK_HOSTS)
    if host and host not in ("0.0.0.0", "::", ""):
        allowed.append(f"[{host}]" if ":" in host else host.lower())
    guarded = TrustedHostMiddleware(with_headers, allowed_hosts=allowed)
    guarded.state = app.state  # type: ignore[attr-defined]
    return guarded
