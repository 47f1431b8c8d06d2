"""Trace files, redaction rules, the thread runner and the `rollout-dataset proxy` command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from rollout_dataset.errors import SchemaValidationError
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.proxy.redact import is_credential_name, recorded_headers, redact_body
from rollout_dataset.proxy.server import upstream_root


def test_read_trace_drops_a_truncated_last_line(tmp_path: Path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"index": 0}\n{"index": 1}\n{"index": 2, "resp')
    assert [r["index"] for r in read_trace(path)] == [0, 1]


def test_read_trace_refuses_a_corrupt_line_in_the_middle(tmp_path: Path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"index": 0}\n{"ind\n{"index": 2}\n')
    with pytest.raises(SchemaValidationError, match="line 2"):
        read_trace(path)


@pytest.mark.parametrize("name", ["api_key", "API-Key", "token", "password", "access_token", "client_secret",
                                  "openai_api_key", "credentials"])
def test_credential_field_names_are_recognised(name: str):
    assert is_credential_name(name)


@pytest.mark.parametrize("name", ["max_tokens", "return_token_ids", "eos_token", "logprobs", "top_k",
                                  "skip_special_tokens", "prompt_tokens"])
def test_sampling_and_vocabulary_names_are_not_credentials(name: str):
    assert not is_credential_name(name)


def test_redaction_keeps_model_input_and_tool_schemas_verbatim():
    body = {"messages": [{"role": "user", "content": "my password is hunter2"}],
            "tools": [{"type": "function", "function": {"name": "login", "parameters": {
                "type": "object", "properties": {"password": {"type": "string"}}}}}],
            "extra": {"password": "hunter2", "list": [{"token": "t"}]}}
    out = redact_body(body)
    assert out["messages"] == body["messages"] and out["tools"] == body["tools"]
    assert out["extra"] == {"password": "[REDACTED]", "list": [{"token": "[REDACTED]"}]}
    assert body["extra"]["password"] == "hunter2"  # the forwarded body is untouched


def test_headers_are_recorded_by_allow_list_only():
    raw = [(b"authorization", b"Bearer x"), (b"api-key", b"x"), (b"x-api-key", b"x"), (b"cookie", b"a=b"),
           (b"content-type", b"application/json"), (b"x-session-id", b"ses_1"), (b"x-custom", b"y"),
           (b"x-stainless-auth-token", b"x"), (b"x-stainless-os", b"Linux")]
    assert recorded_headers(raw) == {"content-type": "application/json", "x-session-id": "ses_1",
                                     "x-stainless-os": "Linux"}


@pytest.mark.parametrize(("given", "root"), [("http://h:1/v1", "http://h:1"), ("http://h:1/v1/", "http://h:1"),
                                             ("http://h:1", "http://h:1"), ("https://h/openai/v1", "https://h/openai")])
def test_upstream_url_with_or_without_v1(given: str, root: str):
    assert upstream_root(given) == root


def test_upstream_url_must_be_http():
    with pytest.raises(ValueError, match="must look like"):
        CaptureProxy(upstream="localhost:8000", trace_dir="x")


def test_thread_runner_serves_sync_callers(tmp_path: Path):
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def models(request):
        return JSONResponse({"object": "list", "data": []})

    upstream = Starlette(routes=[Route("/v1/models", models)])
    with CaptureProxy(upstream="http://up/v1", trace_dir=tmp_path, transport=httpx.ASGITransport(upstream)) as proxy:
        assert proxy.base_url.endswith("/v1")
        assert proxy.session_base_url("s1").endswith("/sessions/s1/v1")
        resp = httpx.get(proxy.session_base_url("s1") + "/models")
    assert resp.json() == {"object": "list", "data": []}
    (record,) = read_trace(proxy.trace_path("s1"))
    assert record["endpoint"] == "/v1/models" and record["status"] == 200


def test_cli_prints_its_base_url_and_stops_on_ctrl_c(tmp_path: Path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "rollout_dataset.cli", "proxy", "--upstream",
                             "http://127.0.0.1:9/v1", "--trace-dir", str(tmp_path / "t")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("http://127.0.0.1:") and line.endswith("/v1")
        resp = httpx.post(line + "/chat/completions", json={"model": "m", "messages": []}, timeout=10)
        assert resp.status_code == 502
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    (record,) = read_trace(tmp_path / "t" / "default.jsonl")
    assert json.dumps(record["error"]).count("upstream_unreachable") == 1
