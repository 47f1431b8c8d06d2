"""The proxy reaches its upstream as httpx's ``trust_env`` does: through the forward proxy HTTP_PROXY /
HTTPS_PROXY name (a real one, proxy.py, on loopback; CONNECT for https), directly for NO_PROXY hosts,
verifying https against SSL_CERT_FILE; ``trust_env=False`` / ``--no-trust-env`` ignores all of them."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import trustme

from proxy_fakes import serve_raw
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.proxy.trust_env import environment_proxy

BODY = (b'{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant",'
        b'"content":"ok"},"finish_reason":"stop"}]}')
_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                    "no_proxy")


async def _answer(head: bytes) -> tuple[bytes, bool]:
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: " + str(len(BODY)).encode()
            + b"\r\n\r\n" + BODY), False


class ForwardProxy:
    """proxy.py (PyPI ``proxy.py``) on 127.0.0.1, one worker; its access log tells which upstreams it carried."""

    def __init__(self, folder: Path) -> None:
        port_file, self.log = folder / "port", folder / "proxy.log"
        self._log_file = open(self.log, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", "0",
                                      "--port-file", str(port_file), "--num-workers", "1", "--num-acceptors", "1",
                                      "--log-level", "INFO"], stdout=self._log_file, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while not (port_file.is_file() and port_file.read_text().strip()):
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.05)
        port = int(port_file.read_text().strip())
        while True:  # the port file is written just before the acceptor listens: wait until it accepts
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert self.proc.poll() is None and time.monotonic() < deadline, self.log.read_text()
                time.sleep(0.02)
        self.url = f"http://127.0.0.1:{port}"

    def carried(self, hostport: str, timeout: float = 5.0) -> list[str]:
        """The access-log lines naming `hostport` (waits up to `timeout` for one to appear)."""
        deadline = time.monotonic() + timeout
        while True:
            lines = [line for line in self.log.read_text(errors="replace").splitlines()
                     if "access_log" in line and f" {hostport}" in line]
            if lines or time.monotonic() > deadline:
                return lines
            time.sleep(0.1)

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._log_file.close()


@pytest.fixture(scope="module")
def forward_proxy(tmp_path_factory):
    proxy = ForwardProxy(tmp_path_factory.mktemp("forward-proxy"))
    yield proxy
    proxy.stop()


@pytest.fixture
def clean_env(monkeypatch):
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def tls():
    """A server context for 127.0.0.1 signed by a throwaway CA, and that CA's PEM file."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    with ca.cert_pem.tempfile() as ca_file:
        yield context, ca_file


async def _one_call(root: str, tmp_path: Path, **proxy_args) -> tuple[httpx.Response, dict]:
    async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces", **proxy_args) as proxy:
        async with httpx.AsyncClient(timeout=30, trust_env=False) as client:  # the harness side: direct
            response = await client.post(proxy.base_url + "/chat/completions", json={"model": "m", "messages": []})
        (record,) = read_trace(proxy.trace_path())
    return response, record


async def test_an_http_upstream_is_reached_through_http_proxy(forward_proxy, clean_env, tmp_path):
    async with serve_raw(_answer) as (root, _):
        clean_env.setenv("HTTP_PROXY", forward_proxy.url)
        response, record = await _one_call(root, tmp_path)
    hostport = root.removeprefix("http://")
    assert response.status_code == 200 and record["error"] is None
    assert any(f"POST {hostport}/v1/chat/completions" in line for line in forward_proxy.carried(hostport))


async def test_an_https_upstream_is_reached_through_a_connect_tunnel_verified_by_ssl_cert_file(
        forward_proxy, clean_env, tls, tmp_path):
    context, ca_file = tls
    async with serve_raw(_answer, tls=context) as (root, _):
        clean_env.setenv("HTTPS_PROXY", forward_proxy.url)
        clean_env.setenv("SSL_CERT_FILE", ca_file)  # the throwaway CA: trusted only through this variable
        response, record = await _one_call(root, tmp_path)
    hostport = root.removeprefix("https://")
    assert response.status_code == 200 and record["error"] is None, response.text
    assert any(f"CONNECT {hostport}" in line for line in forward_proxy.carried(hostport))


async def test_no_proxy_names_a_host_that_is_reached_directly(forward_proxy, clean_env, tmp_path):
    async with serve_raw(_answer) as (root, accepted):
        clean_env.setenv("HTTP_PROXY", forward_proxy.url)
        clean_env.setenv("NO_PROXY", "localhost,127.0.0.1")
        assert environment_proxy(root) is None
        response, _ = await _one_call(root, tmp_path)
    assert response.status_code == 200 and len(accepted) == 1
    assert forward_proxy.carried(root.removeprefix("http://"), timeout=1.0) == []


async def test_trust_env_false_ignores_the_proxy_variables(forward_proxy, clean_env, tmp_path):
    async with serve_raw(_answer) as (root, accepted):
        clean_env.setenv("HTTP_PROXY", forward_proxy.url)
        clean_env.setenv("ALL_PROXY", forward_proxy.url)
        assert environment_proxy(root) == forward_proxy.url
        response, _ = await _one_call(root, tmp_path, trust_env=False)
    assert response.status_code == 200 and len(accepted) == 1
    assert forward_proxy.carried(root.removeprefix("http://"), timeout=1.0) == []


async def test_trust_env_false_ignores_ssl_cert_file(clean_env, tls, tmp_path):
    context, ca_file = tls
    async with serve_raw(_answer, tls=context) as (root, _):
        clean_env.setenv("SSL_CERT_FILE", ca_file)
        trusted, _ = await _one_call(root, tmp_path / "a")
        ignored, record = await _one_call(root, tmp_path / "b", trust_env=False)
    assert trusted.status_code == 200
    assert ignored.status_code == 502 and "CERTIFICATE_VERIFY_FAILED" in ignored.json()["error"]["message"]
    assert record["error"]["kind"] == "upstream_unreachable"


def test_an_unreachable_proxy_is_a_502_naming_the_upstream_and_recorded(clean_env, tmp_path):
    import asyncio

    async def run() -> tuple[httpx.Response, dict]:
        async with serve_raw(_answer) as (root, _):
            clean_env.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
            return await _one_call(root, tmp_path)

    response, record = asyncio.run(run())
    assert response.status_code == 502 and record["error"]["kind"] == "upstream_unreachable"


def _cli_proxy(upstream: str, trace_dir: Path, env: dict[str, str], *flags: str) -> int:
    """Run `rollout-dataset proxy`, send one call through it, stop it; return the call's status."""
    proc = subprocess.Popen([sys.executable, "-m", "rollout_dataset.cli", "proxy", "--upstream", upstream,
                             "--trace-dir", str(trace_dir), *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        base = proc.stdout.readline().strip()
        assert base.startswith("http://"), proc.stderr.read() if proc.poll() is not None else base
        with httpx.Client(trust_env=False, timeout=30) as client:
            return client.post(base + "/chat/completions", json={"model": "m", "messages": []}).status_code
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def test_the_proxy_command_honours_http_proxy_unless_no_trust_env(forward_proxy, tmp_path):
    import asyncio
    import threading

    loop = asyncio.new_event_loop()
    started: dict[str, str] = {}
    ready, done = threading.Event(), threading.Event()

    async def upstream() -> None:
        async with serve_raw(_answer) as (root, _):
            started["root"] = root
            ready.set()
            while not done.is_set():
                await asyncio.sleep(0.05)

    thread = threading.Thread(target=loop.run_until_complete, args=(upstream(),), daemon=True)
    thread.start()
    try:
        assert ready.wait(30)
        root = started["root"]
        hostport = root.removeprefix("http://")
        env = {k: v for k, v in os.environ.items() if k not in _PROXY_VARIABLES}
        env["HTTP_PROXY"] = forward_proxy.url
        assert _cli_proxy(root, tmp_path / "ignored", env, "--no-trust-env") == 200
        assert forward_proxy.carried(hostport, timeout=1.0) == []
        assert _cli_proxy(root, tmp_path / "honoured", env) == 200
        assert forward_proxy.carried(hostport)
    finally:
        done.set()
        thread.join(30)
        loop.close()


@pytest.mark.parametrize("flags", [[], ["--no-trust-env"]], ids=["honoured", "no-trust-env"])
def test_a_capture_against_base_url_goes_through_http_proxy_unless_no_trust_env(forward_proxy, clean_env, tmp_path,
                                                                                flags):
    from rollout_dataset.backend.server import run_backend_in_thread
    from rollout_dataset.cli import main
    from rollout_dataset.envs import register_builtin_policies

    register_builtin_policies()
    with run_backend_in_thread(policy="oracle", served_model_name="local") as backend:
        hostport = backend.base_url.removeprefix("http://").removesuffix("/v1")
        before = len(forward_proxy.carried(hostport, timeout=0))
        clean_env.setenv("HTTP_PROXY", forward_proxy.url)
        code = main(["capture", "--base-url", backend.base_url, "--model", "local", "--tokenizer", "builtin",
                     "--task-index", "2", "--no-push", "--out-dir", str(tmp_path / "art"), *flags])
        clean_env.delenv("HTTP_PROXY")
        after = forward_proxy.carried(hostport, timeout=1.0 if flags else 5.0)
    assert code == 0
    carried = len(after) - before
    assert (carried == 0) if flags else (carried >= 2)  # /v1/models and the agent's calls, or none at all


@pytest.mark.parametrize("env", ["coding", "crafter"])
@pytest.mark.parametrize(("flags", "base_url", "expected"), [
    ([], "http://10.1.2.3:8000/v1", True), (["--no-trust-env"], "http://10.1.2.3:8000/v1", False),
    ([], None, False)], ids=["honoured", "no-trust-env", "own-local-backend"])
def test_batch_rollouts_get_trust_env_from_the_flag_and_never_for_the_local_backend(tmp_path, env, flags, base_url,
                                                                                   expected):
    import argparse

    from rollout_dataset.batch.executor import RolloutJob
    from rollout_dataset.batch.runner import plan_jobs
    from rollout_dataset.cli import batch_cmd
    from rollout_dataset.envs import get_environment

    parser = argparse.ArgumentParser()
    batch_cmd.add_arguments(parser)
    argv = ["--smoke", "--env", env, "--out", str(tmp_path / "b"), *flags] + (["--base-url", base_url] if base_url else [])
    config = batch_cmd.config_from_args(parser.parse_args(argv), argv)
    assert config.trust_env is not ("--no-trust-env" in flags)
    job: RolloutJob = plan_jobs(config, "0" * 32, base_url or "http://127.0.0.1:9/v1")[0]
    environment = get_environment(env)
    rollout = environment.batch_config(config, job, {})
    assert rollout.trust_env is expected
    assert environment.capture_settings(rollout).trust_env is expected
