"""A loopback stand-in for the part of the Hugging Face Hub API our push and load paths call.

`FakeHub` is a Starlette app served by uvicorn on 127.0.0.1 (port 0) in a background thread,
storing blobs in a temp folder. Point `HF_ENDPOINT` at `hub.url` in a subprocess (before
huggingface_hub / datasets are imported) and `HfApi` / `datasets.load_dataset` talk to it.

What it covers (dataset repos only, branch ``main`` only, read from huggingface_hub 2.4 and
datasets 5.2 source and from what the clients were seen calling):

- ``POST /api/repos/create`` — create (409 with the url when it exists, which ``exist_ok`` accepts);
- ``GET /api/datasets/{repo}`` and ``/revision/{rev}`` — repo info with ``sha``, ``siblings``, ``private``;
- ``GET /api/datasets/{repo}/tree/{rev}[/{path}]`` — listing (``recursive`` honoured, no pagination);
- ``POST /api/datasets/{repo}/paths-info/{rev}`` — info of given paths;
- ``POST /api/datasets/{repo}/preupload/{rev}`` — always answers ``uploadMode: regular`` (so the
  client inlines content base64 in the commit; the LFS / Xet upload path is NOT implemented);
- ``POST /api/datasets/{repo}/commit/{rev}`` — NDJSON commit: ``header`` (``parentCommit`` checked:
  412 when stale, like the Hub), ``file`` (base64), ``deletedFile``; ``lfsFile`` gets a 400;
- ``POST /api/validate-yaml`` — parses the README's YAML header (400 on a YAML error);
- ``HEAD``/``GET /datasets/{repo}/resolve/{rev}/{path}`` — file bytes with ``X-Repo-Commit``,
  ``ETag`` and ``Range`` (206) support;
- errors carry the Hub's ``X-Error-Code`` (RepoNotFound, RevisionNotFound, EntryNotFound).

Auth: when `token` is set, writes need ``Authorization: Bearer <token>`` (401 otherwise) and a
private repo reads as missing without it. Every request line is recorded in `hub.requests`
(method, path, status) so tests can see which calls were made; headers are never recorded.
Anything else answers 404 and is recorded, so an unexpected client call shows up in a test.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["FakeHub"]


def _blob_oid(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


@dataclass
class _Repo:
    private: bool
    commits: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (sha, {path: oid})

    def head(self) -> tuple[str, dict[str, str]]:
        return self.commits[-1]


class FakeHub:
    """The loopback Hub (see the module docstring).

    Args:
        token: when set, the token writes must carry.
    """

    def __init__(self, token: str | None = None) -> None:
        self.token = token
        self.root = Path(tempfile.mkdtemp(prefix="fakehub-"))
        self.repos: dict[str, _Repo] = {}
        self.requests: list[tuple[str, str, int]] = []
        self.commit_conflicts = 0
        self._lock = threading.Lock()
        self.url = ""
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.app = Starlette(routes=[
            Route("/api/repos/create", self._create, methods=["POST"]),
            Route("/api/validate-yaml", self._validate_yaml, methods=["POST"]),
            Route("/api/datasets/{ns}/{name}", self._info, methods=["GET"]),
            Route("/api/datasets/{ns}/{name}/revision/{rev}", self._info, methods=["GET"]),
            Route("/api/datasets/{ns}/{name}/tree/{rev}", self._tree, methods=["GET"]),
            Route("/api/datasets/{ns}/{name}/tree/{rev}/{path:path}", self._tree, methods=["GET"]),
            Route("/api/datasets/{ns}/{name}/paths-info/{rev}", self._paths_info, methods=["POST"]),
            Route("/api/datasets/{ns}/{name}/preupload/{rev}", self._preupload, methods=["POST"]),
            Route("/api/datasets/{ns}/{name}/commit/{rev}", self._commit, methods=["POST"]),
            Route("/datasets/{ns}/{name}/resolve/{rev}/{path:path}", self._resolve, methods=["GET", "HEAD"]),
            Route("/{rest:path}", self._unknown, methods=["GET", "HEAD", "POST", "PUT", "DELETE"]),
        ])
        self.app.add_middleware(_Recorder, hub=self)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "FakeHub":
        """Serve on 127.0.0.1, a free port; `url` is set when this returns."""
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop the server and remove the stored blobs."""
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "FakeHub":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ helpers for tests
    def files(self, repo_id: str) -> dict[str, bytes]:
        """The files at the head of a repo."""
        _, tree = self.repos[repo_id].head()
        return {p: (self.root / oid).read_bytes() for p, oid in tree.items()}

    def stored_bytes(self) -> list[bytes]:
        """Every blob ever stored (to check that no secret reached the Hub)."""
        return [p.read_bytes() for p in self.root.iterdir()]

    # ------------------------------------------------------------------ plumbing
    def _error(self, status: int, code: str | None, message: str) -> JSONResponse:
        headers = {"X-Error-Code": code, "X-Error-Message": message} if code else {"X-Error-Message": message}
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    def _authorized(self, request: Request) -> bool:
        return self.token is None or request.headers.get("authorization") == f"Bearer {self.token}"

    def _repo(self, request: Request) -> tuple[str, _Repo | None]:
        repo_id = f"{request.path_params['ns']}/{request.path_params['name']}"
        repo = self.repos.get(repo_id)
        if repo is not None and repo.private and not self._authorized(request):
            repo = None
        return repo_id, repo

    def _revision(self, repo: _Repo, rev: str) -> tuple[str, dict[str, str]] | None:
        if rev in ("main", "refs%2Fheads%2Fmain", "refs/heads/main"):
            return repo.head()
        for sha, tree in repo.commits:
            if sha == rev:
                return sha, tree
        return None

    def _resolve_rev(self, request: Request):
        repo_id, repo = self._repo(request)
        if repo is None:
            return None, self._error(404, "RepoNotFound", f"Repository not found: {repo_id}")
        found = self._revision(repo, request.path_params.get("rev", "main"))
        if found is None:
            return None, self._error(404, "RevisionNotFound", f"Invalid rev id: {request.path_params['rev']}")
        return (repo_id, repo, found[0], found[1]), None

    def _entries(self, tree: dict[str, str], sha: str, prefix: str, recursive: bool) -> list[dict[str, Any]]:
        prefix = prefix.strip("/")
        out, dirs = [], set()
        for path in sorted(tree):
            if prefix and not path.startswith(prefix + "/"):
                continue
            rest = path[len(prefix) + 1:] if prefix else path
            parts = rest.split("/")
            for depth in range(1, len(parts)):
                d = "/".join(([prefix] if prefix else []) + parts[:depth])
                if (recursive or depth == 1) and d not in dirs:
                    dirs.add(d)
                    out.append({"type": "directory", "path": d, "oid": hashlib.sha1(d.encode()).hexdigest()})
            if recursive or len(parts) == 1:
                out.append(self._file_entry(path, tree[path]))
        return out

    def _file_entry(self, path: str, oid: str) -> dict[str, Any]:
        return {"type": "file", "path": path, "oid": oid, "size": (self.root / oid).stat().st_size}

    # ------------------------------------------------------------------ endpoints
    async def _create(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._error(401, None, "Invalid credentials in Authorization header")
        body = await request.json()
        if body.get("type") != "dataset":
            return self._error(400, None, "this fixture only serves dataset repos")
        repo_id = f"{body.get('organization')}/{body['name']}"
        with self._lock:
            if repo_id in self.repos:  # the Hub answers 409 with the repo's url
                return JSONResponse({"error": "You already created this dataset repo",
                                     "url": f"{self.url}/datasets/{repo_id}"}, status_code=409)
            sha = hashlib.sha1(f"init {repo_id} {time.time_ns()}".encode()).hexdigest()
            private = body.get("visibility") == "private" or bool(body.get("private"))
            self.repos[repo_id] = _Repo(private=private, commits=[(sha, {})])
        return JSONResponse({"url": f"{self.url}/datasets/{repo_id}", "name": repo_id, "id": repo_id})

    async def _validate_yaml(self, request: Request) -> Response:
        body = await request.json()
        content = body.get("content", "")
        if content.startswith("---\n"):
            end = content.find("\n---\n", 4)
            try:
                meta = yaml.safe_load(content[4:end]) if end > 0 else None
            except yaml.YAMLError as exc:
                return JSONResponse({"errors": [{"message": f"YAML: {exc}"}]}, status_code=400)
            if not isinstance(meta, dict):
                return JSONResponse({"errors": [{"message": "metadata is not a mapping"}]}, status_code=400)
        return JSONResponse({"errors": [], "warnings": []})

    async def _info(self, request: Request) -> Response:
        found, err = self._resolve_rev(request)
        if err:
            return err
        repo_id, repo, sha, tree = found
        return JSONResponse({"id": repo_id, "_id": repo_id, "author": repo_id.split("/")[0], "sha": sha,
                             "private": repo.private, "disabled": False, "gated": False, "tags": [],
                             "lastModified": "2026-01-01T00:00:00.000Z",
                             "siblings": [{"rfilename": p, "size": (self.root / o).stat().st_size}
                                          for p, o in sorted(tree.items())]})

    async def _tree(self, request: Request) -> Response:
        found, err = self._resolve_rev(request)
        if err:
            return err
        _, _, sha, tree = found
        path = request.path_params.get("path", "")
        if path and path.strip("/") in tree:
            return JSONResponse([self._file_entry(path.strip("/"), tree[path.strip("/")])])
        recursive = request.query_params.get("recursive", "false").lower() in ("1", "true")
        entries = self._entries(tree, sha, path, recursive)
        if path and not entries:
            return self._error(404, "EntryNotFound", f"{path} does not exist on {sha}")
        return JSONResponse(entries)

    async def _paths_info(self, request: Request) -> Response:
        found, err = self._resolve_rev(request)
        if err:
            return err
        _, _, sha, tree = found
        if request.headers.get("content-type", "").startswith("application/json"):
            paths = (await request.json()).get("paths", [])
        else:
            paths = (await request.form()).getlist("paths")
        out = []
        for p in paths:
            p = p.strip("/")
            if p in tree:
                out.append(self._file_entry(p, tree[p]))
            elif any(k.startswith(p + "/") for k in tree) or p == "":
                out.append({"type": "directory", "path": p, "oid": hashlib.sha1(p.encode()).hexdigest()})
        return JSONResponse(out)

    async def _preupload(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._error(401, None, "Invalid credentials in Authorization header")
        found, err = self._resolve_rev(request)
        if err:
            return err
        _, _, _, tree = found
        files = (await request.json()).get("files", [])
        return JSONResponse({"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                                        "oid": tree.get(f["path"])} for f in files]})

    async def _commit(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._error(401, None, "Invalid credentials in Authorization header")
        repo_id, repo = self._repo(request)
        if repo is None:
            return self._error(404, "RepoNotFound", f"Repository not found: {repo_id}")
        lines = [json.loads(x) for x in (await request.body()).splitlines() if x.strip()]
        header = next((x["value"] for x in lines if x.get("key") == "header"), {})
        adds: dict[str, bytes] = {}
        deletes: list[str] = []
        for item in lines:
            key, value = item.get("key"), item.get("value", {})
            if key == "file":
                if value.get("encoding") != "base64":
                    return self._error(400, None, f"unsupported encoding {value.get('encoding')!r}")
                adds[value["path"]] = base64.b64decode(value["content"])
            elif key in ("deletedFile", "deletedFolder"):
                deletes.append(value["path"])
            elif key != "header":
                return self._error(400, None, f"this fixture does not implement commit items of kind {key!r}")
        with self._lock:
            head_sha, tree = repo.head()
            parent = header.get("parentCommit")
            if parent is not None and parent != head_sha:
                self.commit_conflicts += 1
                return self._error(412, None, "A commit has happened since. Please refresh and try again.")
            new_tree = dict(tree)
            for path in deletes:
                for k in [k for k in new_tree if k == path or k.startswith(path.rstrip("/") + "/")]:
                    del new_tree[k]
            for path, content in adds.items():
                oid = _blob_oid(content)
                (self.root / oid).write_bytes(content)
                new_tree[path] = oid
            sha = hashlib.sha1(f"{head_sha} {sorted(new_tree.items())} {time.time_ns()}".encode()).hexdigest()
            repo.commits.append((sha, new_tree))
        return JSONResponse({"success": True, "commitOid": sha,
                             "commitUrl": f"{self.url}/datasets/{repo_id}/commit/{sha}"})

    async def _resolve(self, request: Request) -> Response:
        found, err = self._resolve_rev(request)
        if err:
            return err
        _, _, sha, tree = found
        path = request.path_params["path"]
        if path not in tree:
            return self._error(404, "EntryNotFound", f"{path} does not exist on {sha}")
        data = (self.root / tree[path]).read_bytes()
        headers = {"X-Repo-Commit": sha, "ETag": f'"{tree[path]}"', "Accept-Ranges": "bytes"}
        status = 200
        rng = request.headers.get("range")
        if rng and rng.startswith("bytes="):
            start_s, _, end_s = rng[6:].partition("-")
            if start_s == "":
                start, end = max(len(data) - int(end_s), 0), len(data) - 1
            else:
                start = int(start_s)
                end = min(int(end_s), len(data) - 1) if end_s else len(data) - 1
            if start >= len(data) and len(data):
                return Response(status_code=416, headers={"Content-Range": f"bytes */{len(data)}"})
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            data, status = data[start:end + 1], 206
        headers["Content-Length"] = str(len(data))
        if request.method == "HEAD":
            return Response(status_code=status, headers=headers)
        return Response(data, status_code=status, headers=headers, media_type="application/octet-stream")

    async def _unknown(self, request: Request) -> Response:
        return self._error(404, None, f"the loopback Hub fixture does not implement {request.method} {request.url.path}")


class _Recorder:
    """ASGI middleware: record (method, path, status) of every request."""

    def __init__(self, app, hub: FakeHub) -> None:
        self.app, self.hub = app, hub

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = {"code": 0}

        async def capture(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        await self.app(scope, receive, capture)
        self.hub.requests.append((scope["method"], scope["path"], status["code"]))

