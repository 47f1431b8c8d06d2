"""The session API: a trainer reads a session's calls and trainable sequences from the running proxy,
posts its reward and seals it (docs/session-api.md; shapes in ``schema/schemas/session_api.schema.json``).

=======  ==============================  ===============================================================
method   path                            answer
=======  ==============================  ===============================================================
GET      ``/sessions``                   every session's id, state and calls in flight
GET      ``/sessions/{id}``              its settled calls, state (open | sealed), findings, reward
GET      ``/sessions/{id}/sequences``    its sequences: the dataset's ``sequences`` rows, live
POST     ``/sessions/{id}/reward``       ``{"reward": number, "metadata": {...}}``, once, while open
POST     ``/sessions/{id}/seal``         the session's calls and reward are final
=======  ==============================  ===============================================================

Beside the model endpoints (``/sessions/{id}/v1/...`` stays model traffic). It never blocks model
traffic: a trace file is read, and the export run, in a worker thread, and a snapshot is reused
until the file changes. It reads only settled calls (whole lines of the trace file): a session read
while one of its calls is being answered gets the settled ones and ``calls_in_flight`` > 0.

Access: with a token (``Authorization: Bearer <token>``, compared in constant time) anywhere; with
none, only on a loopback bind; else every path answers 404 saying how to turn it on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import ipaddress
import json
import logging
import math
from collections import Counter, OrderedDict
from typing import Any, Callable, TypeVar

from rollout_dataset.errors import TraceIntegrityError
from rollout_dataset.proxy.asgi_types import Receive, Scope, Send
from rollout_dataset.proxy.call import DEFAULT_SESSION
from rollout_dataset.proxy.jsoncodec import dumps_standard
from rollout_dataset.proxy.recorder import TraceRecorder
from rollout_dataset.proxy.redact import valid_session_id
from rollout_dataset.proxy.session_state import SEALED, SessionConflict, SessionFiles
from rollout_dataset.proxy.session_views import (
    SessionSnapshot,
    file_key,
    sequences_document,
    session_document,
    snapshot,
)
from rollout_dataset.trace_integrity import TraceSeal

__all__ = ["SessionApi", "SESSION_API_TOKEN_ENV", "MAX_REWARD_BODY_BYTES", "is_loopback_host"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: the environment variable the `proxy` command reads the session API's token from.
SESSION_API_TOKEN_ENV = "ROLLOUT_SESSION_API_TOKEN"
#: largest reward body accepted (past it: 413).
MAX_REWARD_BODY_BYTES = 64 * 1024
#: session snapshots kept (each holds a session's records and its rollout document).
SNAPSHOT_CACHE = 64
#: sessions whose sealed state is remembered (a forgotten one is looked up on disk again).
SEALED_CACHE = 65536
_JSON = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
_ROUTES = {"": "session", "sequences": "sequences", "reward": "reward", "seal": "seal"}
_METHODS = {"list": "GET", "session": "GET", "sequences": "GET", "reward": "POST", "seal": "POST"}


def is_loopback_host(host: str) -> bool:
    """Whether a bind address is loopback only (``127.0.0.0/8``, ``::1``, ``localhost``).

    Args:
        host: the address the proxy binds.

    Returns:
        True for a loopback address.
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class SessionApi:
    """The session API of one proxy process.

    Args:
        recorder: the proxy's trace recorder (seals come from it; its directory holds the sessions).
        enabled: whether the API answers (False: every API path answers 404 saying how to turn it on).
        token: the bearer token required on every API call (None: none).
        tokenizer: passed to the export, as a capture passes its tokenizer (retokenization findings).
        off_reason: what a request is told while the API is off.
    """

    def __init__(self, recorder: TraceRecorder, *, enabled: bool, token: str | None = None,
                 tokenizer: Any = None, off_reason: str = "the session API is off on this proxy") -> None:
        self.off_reason = off_reason
        self.recorder = recorder
        self.files = SessionFiles(recorder.trace_dir)
        self.enabled = enabled
        self._token = token.encode() if token else None
        self.tokenizer = tokenizer
        self.in_flight: Counter[str] = Counter()
        # Whether each session is sealed, as model traffic asks on every call. A seal is never undone, so a
        # sealed session is remembered; an open one only while this process is the only one that can seal
        # (no other worker shares the trace directory): it seals here, and says so (`_seal`).
        self._sealed: OrderedDict[str, bool] = OrderedDict()
        self._only_sealer = not getattr(recorder, "SHARED", True)
        self._snapshots: OrderedDict[str, SessionSnapshot] = OrderedDict()
        # Session reads (the export) in one thread of their own, in arrival order: only one of them at a
        # time competes with the event loop for the interpreter (the default pool would run six). The
        # cheap steps (state files, the list) go to the default pool, so a huge session's export holds
        # up other reads only, never a list, a reward or a seal.
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="session-api")

    async def _export_thread(self, function: Callable[..., _T], *args: Any) -> _T:
        """Run `function(*args)` in the API's export thread."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, function, *args)

    # ---- model traffic's side --------------------------------------------------------------------

    def started(self, session: str) -> None:
        """Count a model call of `session` as in flight (the proxy calls it when the call opens)."""
        self.in_flight[session] += 1

    def ended(self, session: str) -> None:
        """Count a model call of `session` as ended (recorded or refused)."""
        left = self.in_flight[session] - 1
        if left > 0:
            self.in_flight[session] = left
        else:
            del self.in_flight[session]

    def sealed(self, session: str) -> bool:
        """Whether a model call to `session` must be refused because the session is sealed.

        Known sealed sessions, and (when this process is the only one that seals) known open ones, are
        answered from memory; any other is looked up on disk (one ``stat``) and remembered as the rule allows.
        """
        if not self.enabled or session == DEFAULT_SESSION:
            return False
        known = self._sealed.get(session)
        if known is not None:
            return known
        sealed = self.files.is_sealed(session)
        if sealed or self._only_sealer:
            self._remember_sealed(session, sealed)
        return sealed

    def _remember_sealed(self, session: str, sealed: bool) -> None:
        self._sealed[session] = sealed
        if len(self._sealed) > SEALED_CACHE:
            self._sealed.popitem(last=False)  # forgotten: looked up on disk again when it calls

    # ---- routing ---------------------------------------------------------------------------------

    @staticmethod
    def route(scope: Scope) -> tuple[str, str | None] | None:
        """The API route of a request, or None for model traffic.

        Args:
            scope: the ASGI HTTP scope.

        Returns:
            ``(route, session id or None)``; route is ``list``, ``session``, ``sequences``, ``reward`` or
            ``seal``. The id is returned unchecked.
        """
        path: str = scope["path"]
        if not path.startswith("/sessions"):
            return None
        rest = path[len("/sessions"):]
        if rest in ("", "/"):
            return "list", None
        if not rest.startswith("/"):
            return None
        session, _, tail = rest[1:].partition("/")
        name = _ROUTES.get(tail)
        return (name, session) if name is not None else None

    async def serve(self, route: tuple[str, str | None], scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one API request (never raises: a failure is a 500 naming its kind, logged).

        Args:
            route: from `route`.
            scope: the ASGI HTTP scope.
            receive: the ASGI receive callable.
            send: the ASGI send callable.
        """
        try:
            status, body, headers = await self._answer(route, scope, receive)
        except Exception as exc:  # noqa: BLE001 - the proxy keeps serving; the trainer gets a 500
            log.exception("session API failed on %s %s", scope.get("method"), str(scope.get("path"))[:300])
            status, body, headers = 500, _error("internal_error", f"the session API failed: {type(exc).__name__}"), []
        data = body if isinstance(body, bytes) else dumps_standard(body)
        await send({"type": "http.response.start", "status": status,
                    "headers": _JSON + headers + [(b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data, "more_body": False})

    async def _answer(self, route: tuple[str, str | None], scope: Scope,
                      receive: Receive) -> tuple[int, dict[str, Any] | bytes, list[tuple[bytes, bytes]]]:
        if not self.enabled:
            return 404, _error("session_api_off", self.off_reason), []
        refused = _browser_refusal(scope, self._token is None)
        if refused:
            return 403, _error("browser_refused", refused), []
        if self._token is not None and not self._authorized(scope):
            return 401, _error("unauthorized", "the session API needs 'Authorization: Bearer <token>' with the "
                               "proxy's session API token"), [(b"www-authenticate", b'Bearer realm="session-api"')]
        name, session = route
        method = scope["method"]
        if method != _METHODS[name] and not (method == "HEAD" and _METHODS[name] == "GET"):
            return 405, _error("method_not_allowed", f"{method} is not allowed here: use {_METHODS[name]}"), \
                [(b"allow", _METHODS[name].encode())]
        if name == "list":
            return 200, await self._list(), []
        assert session is not None
        if not valid_session_id(session):
            return 400, _error("invalid_session_id", f"invalid session id {session[:200]!r}: use 1-128 letters, "
                               "digits, '.', '_' or '-'"), []
        if name in ("session", "sequences"):
            try:
                data = await self._view(session, name)
            except (TraceIntegrityError, ValueError) as exc:  # a trace file cut or edited outside the proxy
                return 500, _error("trace_unreadable", f"session {session!r}: {str(exc)[:300]}"), []
            if data is None:
                return 404, _error("unknown_session", f"no session {session!r} on this proxy"), []
            return 200, data, []
        known = self.in_flight.get(session, 0) > 0 or await asyncio.to_thread(self.files.exists, session)
        if name == "reward":
            return await self._reward(session, known, receive)
        if not known:
            return 404, _error("unknown_session", f"no session {session!r} on this proxy"), []
        return await self._seal(session)

    def _authorized(self, scope: Scope) -> bool:
        assert self._token is not None
        given = b""
        for key, value in scope["headers"]:
            if key == b"authorization":
                given = value
                break
        scheme, _, credential = given.partition(b" ")
        if scheme.lower() != b"bearer":
            credential = b""
        return hmac.compare_digest(credential.strip(), self._token)

    # ---- reads ---------------------------------------------------------------------------------

    async def _list(self) -> dict[str, Any]:
        names = await asyncio.to_thread(self.files.sessions)
        ids = sorted(set(names) | {s for s in self.in_flight if valid_session_id(s)})  # a refused id is no session
        states = await asyncio.to_thread(lambda: [self.files.state(s) for s in ids])
        return {"sessions": [{"session": s, "state": state, "calls_in_flight": self.in_flight.get(s, 0)}
                             for s, state in zip(ids, states)]}

    async def _view(self, session: str, name: str) -> bytes | None:
        """The encoded document of a read (None: no such session), built in one worker thread."""
        in_flight = self.in_flight.get(session, 0)  # before the read: a call ending during it is then counted twice at worst
        cached = self._snapshots.get(session)
        snap, data = await self._export_thread(self._read_view, session, name, in_flight, cached)
        if snap is not None and snap is not cached:
            self._snapshots[session] = snap
            while len(self._snapshots) > SNAPSHOT_CACHE:
                self._snapshots.popitem(last=False)
        if snap is not None:
            self._snapshots.move_to_end(session)
        return data

    def _read_view(self, session: str, name: str, in_flight: int,
                   cached: SessionSnapshot | None) -> tuple[SessionSnapshot | None, bytes | None]:
        """In a worker thread: the session's state files, its settled calls (the cached snapshot while its
        file is unchanged), the document and its JSON bytes. ``(None, None)`` for an unknown session."""
        if not in_flight and not self.files.exists(session):
            return None, None
        seal_doc, reward = self.files.seal(session), self.files.reward(session)
        seal = TraceSeal(int(seal_doc["records"]), seal_doc.get("head_sha256")) if seal_doc else None
        path = self.files.trace_path(session)
        key = file_key(path)
        snap = None
        if key is not None:
            snap = cached if cached is not None and cached.key == key else snapshot(path, key, seal, self.tokenizer,
                                                                                   session)
        make = sequences_document if name == "sequences" else session_document
        return snap, dumps_standard(make(session, SEALED if seal_doc else "open", in_flight, snap, reward, seal_doc))

    # ---- changes -------------------------------------------------------------------------------

    async def _reward(self, session: str, known: bool,
                      receive: Receive) -> tuple[int, dict[str, Any], list[tuple[bytes, bytes]]]:
        body = await _read_body(receive, MAX_REWARD_BODY_BYTES)
        if body is None:
            return 413, _error("body_too_large", f"a reward body is at most {MAX_REWARD_BODY_BYTES} bytes"), []
        if not known:
            return 404, _error("unknown_session", f"no session {session!r} on this proxy"), []
        parsed = _reward_body(body)
        if isinstance(parsed, str):
            return 400, _error("invalid_reward", parsed), []
        reward, metadata = parsed
        try:
            document = await asyncio.to_thread(self.files.put_reward, session, reward, metadata)
        except SessionConflict as exc:
            return 409, _error(exc.code, str(exc)), []
        return 200, {"session": session, "reward": document["reward"], "reward_metadata": document["metadata"]}, []

    async def _seal(self, session: str) -> tuple[int, dict[str, Any], list[tuple[bytes, bytes]]]:
        if session == DEFAULT_SESSION:
            return 400, _error("default_session", f"the {DEFAULT_SESSION!r} session holds every call without a "
                               "session and every refused call: it cannot be sealed"), []
        in_flight = self.in_flight.get(session, 0)
        if in_flight:
            return 409, _error("call_in_flight", f"session {session!r} has {in_flight} call(s) in flight: seal it "
                               "once they have ended"), []
        seal = self.recorder.seal(session)  # on the event loop: no call of the session can end in between
        # From here on its calls are refused (none may start while the seal is written: it would not count
        # them); a seal that could not be written is forgotten again, and its file looked up as before.
        self._remember_sealed(session, True)
        try:
            document = await asyncio.to_thread(self.files.put_seal, session, seal)
        except SessionConflict as exc:  # only ever "already sealed" here
            return 409, _error(exc.code, str(exc)), []
        except BaseException:
            self._sealed.pop(session, None)
            raise
        return 200, {"session": session, "state": SEALED, "seal": document}, []


def _browser_refusal(scope: Scope, tokenless: bool) -> str | None:
    """Why a request that may come from a web page is refused (None: it is not refused).

    A page the user opens may send requests to a loopback port: a cross-origin one carries ``Origin``
    (refused always), and one through a rebound DNS name carries that name as ``Host`` (refused when no
    token guards the API: only a loopback name or address may reach it then).
    """
    host = ""
    for key, value in scope["headers"]:
        if key == b"origin":
            return "a request from a web page (Origin header) is refused: the session API is for trainers"
        if key == b"host":
            host = value.decode("latin-1")
    if tokenless:
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if not is_loopback_host(name.strip("[]")):
            return (f"Host {host[:100]!r} is not a loopback address: without a token the session API answers "
                    "only requests addressed to 127.0.0.1, ::1 or localhost")
    return None


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None past `limit` bytes (the rest is not read)."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(parts)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a reward can be")


def _reward_body(body: bytes) -> tuple[float, dict[str, Any]] | str:
    """``(reward, metadata)`` from a reward body, or the reason it is refused."""
    try:
        value = json.loads(body or b"null", parse_constant=_refuse_constant)
    except ValueError as exc:
        return f"the body is not JSON a reward can be read from: {str(exc)[:200]}"
    except RecursionError:
        return "the body nests too deep"
    if not isinstance(value, dict):
        return 'the body must be a JSON object {"reward": number, "metadata": {...}}'
    extra = sorted(set(value) - {"reward", "metadata"})
    if extra:
        return f"unknown field(s) {', '.join(repr(k[:50]) for k in extra[:5])}: the body holds reward and metadata"
    reward = value.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        return f"reward must be a number, got {type(reward).__name__}"
    try:
        finite = math.isfinite(float(reward))
    except OverflowError:  # an integer beyond any float
        finite = False
    if not finite:
        return f"reward must be a finite number, got {str(reward)[:40]}"
    metadata = value.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        return f"metadata must be a JSON object, got {type(metadata).__name__}"
    return float(reward), metadata
