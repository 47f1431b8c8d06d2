"""Where a rollout came from, recorded honestly in summary.json's `provenance`.

- server: what the model server says it is. vLLM answers ``GET /version`` with ``{"version"}``;
  the local backend answers with ``{"server": LOCAL_BACKEND_KIND, "version", "policy"}`` and never
  claims to be vLLM. Every local-backend rollout is **scripted** (a policy, not a model, chose
  the words), and the dataset card says so.
- model: the served model's ``id`` and ``root`` from ``GET /v1/models``.
- harness: its name and version (the built-in harness is versioned with this package).
- package: this package's version and, when it runs from a git checkout, the commit.

Every probe has a short timeout and never fails a capture: what cannot be learned is null.
"""

from __future__ import annotations

import functools
import logging
import subprocess
from pathlib import Path
from typing import Any

import httpx

from rollout_dataset.backend.protocol import LOCAL_BACKEND_KIND
from rollout_dataset.proxy.upstream import UpstreamTarget, parse_upstream

__all__ = ["LOCAL_BACKEND_KIND", "PROBE_TIMEOUT_S", "server_provenance", "package_provenance",
           "harness_provenance", "rollout_provenance", "upstream_root", "public_root"]

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 10.0
_PACKAGE_DIR = Path(__file__).resolve().parents[1]


def upstream_root(upstream_base: str) -> str:
    """The server root of an OpenAI base URL (``http://h:8000/v1`` -> ``http://h:8000``).

    Args:
        upstream_base: the base URL.

    Returns:
        The root, without a trailing slash.
    """
    root = upstream_base.rstrip("/")
    return root[:-3] if root.endswith("/v1") else root


def _get_json(target: UpstreamTarget, endpoint: str) -> Any:
    try:
        response = target.get(endpoint, timeout=PROBE_TIMEOUT_S)
    except httpx.HTTPError as exc:
        log.info("provenance probe %s: %s", target.shown(endpoint), type(exc).__name__)
        return None
    if response.status_code >= 400:
        log.info("provenance probe %s: HTTP %d", target.shown(endpoint), response.status_code)
        return None
    try:
        return response.json()
    except ValueError:
        return None


def public_root(root: Any) -> str | None:
    """A served model's `root` as recorded: a Hub id as is; a local path cut to its last component
    (``/srv/models/qwen-7b`` -> ``.../qwen-7b``), so the server's file layout does not leak.

    Args:
        root: the `/v1/models` entry's root.

    Returns:
        The recorded root, or None when it is not a string.
    """
    if not isinstance(root, str) or not root:
        return None
    if root.startswith(("/", "~", "./", "../")) or (len(root) > 2 and root[1] == ":" and root[2] in "\\/"):
        return ".../" + Path(root.replace("\\", "/")).name
    return root


def server_provenance(upstream: str | UpstreamTarget, model: str) -> dict[str, Any]:
    """Ask the model server what it is and what it serves.

    Args:
        upstream: the OpenAI base URL (``.../v1``; credentials in it are sent, never recorded) or
            the target already taken apart (`rollout_dataset.proxy.upstream.parse_upstream`).
        model: the model name the rollout used.

    Returns:
        ``{"server": {"kind", "version", "policy", "scripted"}, "model": {"id", "root"}}``; kind is
        `LOCAL_BACKEND_KIND`, ``"vllm"`` (a `/version` with a version and no other identity) or
        ``"unknown"``; unknown values are None.
    """
    target = parse_upstream(upstream) if isinstance(upstream, str) else upstream
    version = _get_json(target, "/version")
    kind, ver, policy = "unknown", None, None
    if isinstance(version, dict):
        if version.get("server") == LOCAL_BACKEND_KIND:
            kind, ver, policy = LOCAL_BACKEND_KIND, version.get("version"), version.get("policy")
        elif isinstance(version.get("version"), str):
            kind, ver = "vllm", version["version"]
    models = _get_json(target, "/v1/models")
    entry: dict[str, Any] = {}
    if isinstance(models, dict) and isinstance(models.get("data"), list):
        entry = next((m for m in models["data"] if isinstance(m, dict) and m.get("id") == model), {})
    return {"server": {"kind": kind, "version": ver if isinstance(ver, str) else None,
                       "policy": policy if isinstance(policy, str) else None,
                       "scripted": kind == LOCAL_BACKEND_KIND},
            "model": {"id": entry.get("id", model), "root": public_root(entry.get("root"))}}


@functools.lru_cache(maxsize=1)
def package_provenance() -> dict[str, Any]:
    """This package's name, version and git commit (None outside a git checkout).

    Returns:
        ``{"name", "version", "git_sha"}``.
    """
    from rollout_dataset._version import __version__

    sha = None
    if (_PACKAGE_DIR.parent / ".git").exists():
        try:
            done = subprocess.run(["git", "-C", str(_PACKAGE_DIR.parent), "rev-parse", "HEAD"], capture_output=True,
                                  text=True, timeout=PROBE_TIMEOUT_S)
            sha = done.stdout.strip() or None if done.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            sha = None
    return {"name": "rollout-dataset", "version": __version__, "git_sha": sha}


def harness_provenance(harness: str, version: str | None = None) -> dict[str, Any]:
    """A harness's name and version.

    Args:
        harness: the harness name (``builtin``: this package's agent, ``cmd:...``, a preset, an
            environment's own harness).
        version: the version its environment found (`Episode.harness_version()`), if any.

    Returns:
        ``{"name", "version"}``; version None when it cannot be learned (a ``cmd:`` harness).
    """
    if harness == "builtin":
        return {"name": "builtin", "version": package_provenance()["version"]}
    if harness.startswith("cmd:"):
        return {"name": "cmd", "version": None}
    return {"name": harness, "version": version}


def rollout_provenance(upstream: str | UpstreamTarget, model: str, harness: str,
                       harness_version: str | None = None) -> dict[str, Any]:
    """Everything `provenance` in summary.json holds (the tokenizer's hash is added by `build`).

    Args:
        upstream: the model server's OpenAI base URL, or its `UpstreamTarget` (credentials never recorded).
        model: the model name used.
        harness: the harness name (the episode's `harness`).
        harness_version: its version, as the environment found it (None: unknown).

    Returns:
        ``{"server", "model", "harness", "package"}``.
    """
    return {**server_provenance(upstream, model), "harness": harness_provenance(harness, harness_version),
            "package": package_provenance()}
