"""Secrets, everywhere: URL credentials become headers, one credential-name rule, a dummy key for the
harness, and a keep-workdir copy that follows no link and redacts known secrets.

Real servers on 127.0.0.1 port 0: a fake vLLM (tests/proxy_fakes.py) behind an ASGI guard that
demands a given Authorization header, the recording proxy, and captures run end to end.
"""

from __future__ import annotations

import base64
import json
import logging
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from proxy_fakes import FakeVLLM, serve
from rollout_dataset.recipes.coding.config import UPSTREAM_NOT_RECORDED
from rollout_dataset.capture import capture_rollout
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.server_runner import serve_in_thread
from rollout_dataset.cli import main as cli_main
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.proxy import redact
from rollout_dataset.proxy.redact import REDACTED, is_credential_name, redact_body

PASSWORD = "pw-DISTINCT-7391-secret"
QUERY_KEY = "qk-DISTINCT-5518-secret"
REAL_KEY = "sk-real-upstream-DISTINCT-2604"
MESSAGES = [{"role": "user", "content": "hi"}]

# A stand-in CLI agent: it writes the key it was given into its workdir, links a host file and a
# host folder there, then makes one chat call; with AGENT_ECHO_ENV its text carries its whole
# environment (the fake upstream keeps the raw request, so the test sees what the harness had).
AGENT = r'''
import json, os, sys, urllib.request
base, model = sys.argv[1], sys.argv[2]
key = os.environ.get("OPENAI_API_KEY", "")
open("leaked_key.txt", "w").write("OPENAI_API_KEY=" + key + "\n")
os.makedirs("sub", exist_ok=True)
open(os.path.join("sub", "notes.txt"), "w").write("plain notes\n")
os.symlink("/etc/hostname", "host_file")
os.symlink("/etc", "host_dir")
held = dict(os.environ) if os.environ.get("AGENT_ECHO_ENV") else {}
body = {"model": model, "messages": [{"role": "user", "content": "env " + json.dumps(held)}], "max_tokens": 3}
req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
try:
    urllib.request.urlopen(req, timeout=30).read()
except Exception as exc:
    print("call failed:", exc, file=sys.stderr)
'''


class RequireAuth:
    """ASGI guard: 401 unless the request's Authorization is `expected`; remembers what it saw."""

    def __init__(self, app: Any, expected: str) -> None:
        self.app = app
        self.expected = expected
        self.seen: list[str | None] = []
        self.queries: list[bytes] = []
        self.paths: list[str] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        auth = dict(scope["headers"]).get(b"authorization")
        self.seen.append(auth.decode() if auth is not None else None)
        self.paths.append(scope["path"])
        self.queries.append(scope.get("query_string") or b"")
        if self.seen[-1] != self.expected:
            response = JSONResponse({"error": {"message": "bad credentials", "code": 401}}, status_code=401)
            return await response(scope, receive, send)
        return await self.app(scope, receive, send)


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _files_text(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.fixture(scope="module")
def agent_cmd(tmp_path_factory):
    script = tmp_path_factory.mktemp("agent") / "agent.py"
    script.write_text(AGENT)
    return f"cmd:{sys.executable} {script} {{base_url}} {{model}}"


# ---- the rule -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["credential", "key", "api_key", "Authorization", "apiKey", "APIKey", "x-api-key",
                                  "access_token", "clientSecret", "password", "auth", "OPENAI_API_KEY", "HF_TOKEN"])
def test_credential_names_match_the_rule(name: str):
    assert is_credential_name(name)


# every request/response field of the OpenAI and vLLM APIs that carries training data or sampling
@pytest.mark.parametrize("name", ["max_tokens", "max_completion_tokens", "min_tokens", "prompt_token_ids",
                                  "completion_token_ids", "token_ids", "stop_token_ids", "allowed_token_ids",
                                  "return_token_ids", "return_tokens_as_token_ids", "completion_tokens",
                                  "prompt_tokens", "total_tokens", "cached_tokens", "truncate_prompt_tokens",
                                  "skip_special_tokens", "add_special_tokens", "spaces_between_special_tokens",
                                  "top_k", "top_p", "keys", "sort_keys", "logit_bias", "logprobs", "top_logprobs",
                                  "eos_token", "bos_token", "pad_token", "tokenizer", "author",
                                  "TOKENIZERS_PARALLELISM", "kv_transfer_params", "cache_salt"])
def test_training_and_sampling_vocabulary_is_never_a_credential(name: str):
    assert not is_credential_name(name)


def test_body_redaction_keeps_token_ids_and_sampling_fields():
    body = {"model": "m", "max_tokens": 7, "top_k": 3, "prompt_token_ids": [1, 2, 3],
            "credential": "c-1", "key": "k-1", "Authorization": "Bearer b-1",
            "extra": {"nested": {"api_key": "a-1", "auth": {"user": "u", "pass": "p"}}, "token_ids": [9]},
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "properties": {"keys": {"type": "array"}, "password": {"type": "string"}}}}}]}
    out = redact_body(body)
    assert out["credential"] == out["key"] == out["Authorization"] == REDACTED
    assert out["extra"]["nested"] == {"api_key": REDACTED, "auth": REDACTED}
    assert out["max_tokens"] == 7 and out["top_k"] == 3 and out["prompt_token_ids"] == [1, 2, 3]
    assert out["extra"]["token_ids"] == [9] and out["tools"] == body["tools"]


def test_one_url_redaction_keeps_ipv6_hosts_everywhere():
    from rollout_dataset.batch import runner

    url = f"http://user:{PASSWORD}@[::1]:8000/v1?api_key={QUERY_KEY}&api-version=2"
    expected = "http://[::1]:8000/v1?api_key=[REDACTED]&api-version=2"
    assert redact.redact_url(url) == expected
    assert runner.redact_url is redact.redact_url
    assert CaptureConfig(base_url=url, record_upstream_host=True).public_dict()["base_url"] == expected
    assert CaptureConfig(base_url=url).public_dict()["base_url"] == UPSTREAM_NOT_RECORDED


# ---- the proxy: URL credentials become headers, never written ----------------------------------

async def test_user_pass_in_the_upstream_url_becomes_basic_auth_and_is_never_recorded(tmp_path, caplog):
    fake = FakeVLLM()
    guard = RequireAuth(fake.app, _basic("alice", PASSWORD))
    caplog.set_level(logging.DEBUG)
    async with serve(guard) as root:
        url = root.replace("http://", f"http://alice:{PASSWORD}@") + "/v1"
        async with CaptureProxy(upstream=url, trace_dir=tmp_path / "t") as proxy:
            assert PASSWORD not in proxy.upstream and PASSWORD not in repr(vars(proxy))
            async with httpx.AsyncClient(timeout=10) as client:
                ok = await client.post(proxy.base_url + "/chat/completions",
                                       headers={"Authorization": "Bearer dummy-from-harness"},
                                       json={"model": "ok", "messages": MESSAGES})
    assert ok.status_code == 200 and guard.seen == [_basic("alice", PASSWORD)]
    assert PASSWORD not in (tmp_path / "t" / "default.jsonl").read_text()
    assert PASSWORD not in caplog.text


async def test_a_token_only_userinfo_becomes_a_bearer_token(tmp_path):
    guard = RequireAuth(FakeVLLM().app, f"Bearer {PASSWORD}")
    async with serve(guard) as root:
        url = root.replace("http://", f"http://{PASSWORD}@") + "/v1"
        async with CaptureProxy(upstream=url, trace_dir=tmp_path / "t") as proxy:
            async with httpx.AsyncClient(timeout=10) as client:
                ok = await client.post(proxy.base_url + "/chat/completions", json={"model": "ok", "messages": MESSAGES})
    assert ok.status_code == 200 and guard.seen == [f"Bearer {PASSWORD}"]


async def test_the_proxy_key_replaces_the_harness_dummy_key_upstream(tmp_path):
    guard = RequireAuth(FakeVLLM().app, f"Bearer {REAL_KEY}")
    async with serve(guard) as root:
        async with CaptureProxy(upstream=root + "/v1", trace_dir=tmp_path / "t", api_key=REAL_KEY) as proxy:
            async with httpx.AsyncClient(timeout=10) as client:
                ok = await client.post(proxy.base_url + "/chat/completions",
                                       headers={"Authorization": "Bearer rollout-dummy-0"},
                                       json={"model": "ok", "messages": MESSAGES})
    assert ok.status_code == 200 and guard.seen == [f"Bearer {REAL_KEY}"]
    assert REAL_KEY not in (tmp_path / "t" / "default.jsonl").read_text()


def test_userinfo_and_an_api_key_at_once_are_refused_without_printing_either():
    with pytest.raises(ValueError, match="give one of them") as info:
        CaptureProxy(upstream=f"http://u:{PASSWORD}@127.0.0.1:9/v1", trace_dir="x", api_key=REAL_KEY)
    assert PASSWORD not in str(info.value) and REAL_KEY not in str(info.value)


async def test_a_query_key_reaches_a_failing_upstream_but_no_error_body_trace_or_log(tmp_path, caplog):
    fake = FakeVLLM()
    caplog.set_level(logging.DEBUG)
    async with serve(fake.app):
        guard_log: list[bytes] = []

        async def spy(scope, receive, send):
            if scope["type"] == "http":
                guard_log.append(scope.get("query_string") or b"")
            await fake.app(scope, receive, send)

        async with serve(spy) as spied:
            failing = f"{spied}/v1?api_key={QUERY_KEY}"
            unreachable = f"http://127.0.0.1:9/v1?api_key={QUERY_KEY}"
            bodies = []
            for n, upstream in enumerate((failing, unreachable)):
                async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / f"t{n}", upstream_timeout=5) as proxy:
                    async with httpx.AsyncClient(timeout=10) as client:
                        response = await client.post(proxy.session_base_url("s") + "/chat/completions",
                                                     json={"model": "fail500", "messages": MESSAGES})
                        bodies.append((response.status_code, response.text))
    assert [status for status, _ in bodies] == [500, 502]
    assert guard_log == [f"api_key={QUERY_KEY}".encode()]  # the upstream got its key
    records = [r for n in (0, 1) for r in read_trace(tmp_path / f"t{n}" / "s.jsonl")]
    assert [r["error"]["kind"] for r in records] == ["upstream_status", "upstream_unreachable"]
    assert "api_key=[REDACTED]" in records[1]["error"]["message"]
    for text in [b for _, b in bodies] + [json.dumps(records), caplog.text]:
        assert QUERY_KEY not in text


# ---- captures: the CLI, the dummy key, keep-workdir --------------------------------------------

@pytest.fixture
def guarded_upstream():
    """A fake vLLM that demands Basic alice:PASSWORD; yields (root URL, guard, fake)."""
    fake = FakeVLLM()
    guard = RequireAuth(fake.app, _basic("alice", PASSWORD))
    with serve_in_thread(lambda: serve(guard), name="guarded") as root:
        yield root, guard, fake


def test_capture_with_user_pass_in_base_url_succeeds_and_prints_no_password(tmp_path, agent_cmd, guarded_upstream,
                                                                           capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    root, guard, fake = guarded_upstream
    url = root.replace("http://", f"http://alice:{PASSWORD}@") + "/v1"
    code = cli_main(["capture", "--base-url", url, "--harness", agent_cmd, "--out-dir", str(tmp_path / "out"),
                     "--timeout-s", "60", "--no-push", "--record-upstream-host"])
    out = capsys.readouterr()
    assert guard.seen and all(seen == _basic("alice", PASSWORD) for seen in guard.seen)  # /models and the call
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["captured_calls"] == 1 and not [e for e in summary["errors"] if e["kind"] == "upstream_error"]
    assert code == 0, out.err[-2000:]
    task = json.loads((tmp_path / "out" / "task.json").read_text())
    assert task["config"]["base_url"] == root + "/v1"  # recorded on request, without its credentials
    assert PASSWORD not in out.out + out.err and PASSWORD not in _files_text(tmp_path / "out")


def test_capture_cli_names_a_failing_upstream_without_its_query_key(tmp_path, agent_cmd, capsys, caplog):
    queries: list[str] = []

    async def fail(request):
        queries.append(f"{request.url.path}?{request.url.query}")
        return JSONResponse({"error": {"message": "engine exploded", "code": 500}}, status_code=500)

    async def models(request):
        queries.append(f"{request.url.path}?{request.url.query}")
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model"}]})

    app = Starlette(routes=[Route("/v1/chat/completions", fail, methods=["POST"]),
                            Route("/v1/models", models, methods=["GET"])])
    caplog.set_level(logging.DEBUG)
    with serve_in_thread(lambda: serve(app), name="fail") as root:
        code = cli_main(["-vv", "capture", "--base-url", f"{root}/v1?api_key={QUERY_KEY}",
                         "--harness", agent_cmd, "--out-dir", str(tmp_path / "out"), "--timeout-s", "60",
                         "--no-push"])
    err = capsys.readouterr().err
    # the model list (read by the capture for the model id, by the proxy's context fitting for
    # max_model_len) and the call all got the key
    key = f"?api_key={QUERY_KEY}"
    assert sorted(queries) == sorted(["/v1/models" + key, "/v1/models" + key, "/v1/chat/completions" + key])
    assert code == 1 and "HTTP 500" in err and "api_key=[REDACTED]" in err
    assert QUERY_KEY not in err and QUERY_KEY not in caplog.text


def test_the_harness_gets_a_dummy_key_and_keep_workdir_copies_no_link_and_no_key(tmp_path, agent_cmd, monkeypatch):
    fake = FakeVLLM()
    guard = RequireAuth(fake.app, f"Bearer {REAL_KEY}")
    monkeypatch.setenv("OPENAI_API_KEY", REAL_KEY)
    monkeypatch.setenv("AGENT_ECHO_ENV", "1")
    with serve_in_thread(lambda: serve(guard), name="guarded") as root:
        result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", base_url=root + "/v1", model="ok",
                                               harness=agent_cmd, timeout_s=60, keep_workdir=True))
    # the chat call, and the proxy's context-fitting look-ups (/v1/models, /tokenize), all with the real key
    assert result.summary["captured_calls"] == 1 and "/v1/chat/completions" in guard.paths
    assert guard.seen == [f"Bearer {REAL_KEY}"] * len(guard.paths)
    harness_text = fake.requests[0]["messages"][0]["content"]
    held = json.loads(harness_text[len("env "):])
    assert held["OPENAI_API_KEY"].startswith("rollout-dummy-") and REAL_KEY not in harness_text
    work = tmp_path / "out" / "workdir"
    assert (work / "leaked_key.txt").read_text() == f"OPENAI_API_KEY={REDACTED}\n"
    assert (work / "sub" / "notes.txt").read_text() == "plain notes\n"
    assert not (work / "host_file").exists() and not (work / "host_dir").exists()
    assert not [p for p in work.rglob("*") if p.is_symlink()]
    manifest = json.loads((tmp_path / "out" / "workdir_copy.json").read_text())
    assert {"path": "host_file", "reason": "symlink"} in manifest["skipped"]
    assert {"path": "host_dir", "reason": "symlink"} in manifest["skipped"]
    everything = _files_text(tmp_path / "out")
    assert REAL_KEY not in everything and held["OPENAI_API_KEY"] not in everything


def test_proxy_cli_sends_the_key_of_api_key_env_upstream_in_place_of_the_harness_key(tmp_path):
    import os
    import signal
    import subprocess

    guard = RequireAuth(FakeVLLM().app, f"Bearer {REAL_KEY}")
    env = {**os.environ, "MY_UPSTREAM_KEY": REAL_KEY, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    with serve_in_thread(lambda: serve(guard), name="guarded") as root:
        proc = subprocess.Popen([sys.executable, "-m", "rollout_dataset.cli", "proxy", "--upstream", root + "/v1",
                                 "--trace-dir", str(tmp_path / "t"), "--api-key-env", "MY_UPSTREAM_KEY"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            base = proc.stdout.readline().strip()
            assert base.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.poll() is not None else base
            response = httpx.post(base + "/chat/completions", headers={"Authorization": "Bearer rollout-dummy-1"},
                                  json={"model": "ok", "messages": MESSAGES}, timeout=10)
        finally:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
    assert response.status_code == 200 and guard.seen == [f"Bearer {REAL_KEY}"]
    assert REAL_KEY not in out + err + (tmp_path / "t" / "default.jsonl").read_text()


def test_proxy_cli_names_an_unset_api_key_variable(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    code = cli_main(["proxy", "--upstream", "http://127.0.0.1:9/v1", "--trace-dir", str(tmp_path),
                     "--api-key-env", "NO_SUCH_KEY_VAR"])
    assert code == 2 and "NO_SUCH_KEY_VAR is not set" in capsys.readouterr().err


def test_keep_workdir_skips_fifos_and_oversized_files_and_names_why(tmp_path):
    import os

    from rollout_dataset.recipes.coding import workdir as wd

    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.txt").write_text(f"key={REAL_KEY}\n")
    os.mkfifo(src / "pipe")
    with open(src / "big.bin", "wb") as handle:
        handle.truncate(wd.MAX_FILE_BYTES + 1)
    result = wd.copy_workdir(src, tmp_path / "out", [REAL_KEY])
    assert result.copied == ["ok.txt"] and result.redacted == 1
    reasons = {item["path"]: item["reason"] for item in result.skipped}
    assert reasons["pipe"] == "not a regular file" and reasons["big.bin"].startswith("larger than 16 MiB")
    assert (tmp_path / "out" / "workdir" / "ok.txt").read_text() == f"key={REDACTED}\n"


def test_the_builtin_harness_sends_a_dummy_key_that_the_proxy_replaces_upstream(tmp_path, monkeypatch):
    seen_by_proxy: list[str] = []
    fake = FakeVLLM()
    guard = RequireAuth(fake.app, f"Bearer {REAL_KEY}")
    monkeypatch.setenv("OPENAI_API_KEY", REAL_KEY)
    from rollout_dataset.harness import chat

    original = chat.ChatTurnClient.__init__

    def spy(self, url, *, api_key=None, **kwargs):
        seen_by_proxy.append(api_key)
        original(self, url, api_key=api_key, **kwargs)

    monkeypatch.setattr(chat.ChatTurnClient, "__init__", spy)
    with serve_in_thread(lambda: serve(guard), name="guarded") as root:
        result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", base_url=root + "/v1", model="ok",
                                               timeout_s=60, max_turns=1))
    assert result.summary["captured_calls"] >= 1 and set(guard.seen) == {f"Bearer {REAL_KEY}"}
    assert seen_by_proxy and all(key.startswith("rollout-dummy-") for key in seen_by_proxy)
    assert REAL_KEY not in _files_text(tmp_path / "out")


def test_body_redaction_survives_any_nesting_depth():
    body: dict = {"api_key": "deep-secret"}
    for _ in range(5000):
        body = {"extra": [body], "max_tokens": 1}
    out = redact_body(body)
    node = out
    for _ in range(5000):
        node = node["extra"][0]
    assert node == {"api_key": REDACTED} and body["extra"][0] is not out["extra"][0]


def test_urls_inside_text_and_flags_are_redacted():
    text = f"--base-url=http://alice:{PASSWORD}@127.0.0.1:8/v1?api_key={QUERY_KEY} and http://[::1]:9/v1"
    assert redact.redact_urls_in_text(text) == ("--base-url=http://127.0.0.1:8/v1?api_key=[REDACTED] and "
                                                "http://[::1]:9/v1")
