"""Provenance, honest: what the server is (never a fake vLLM), what it served, who captured it, and
no upstream host in the artifacts unless asked."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from rollout_dataset.builder import build
from support.synthetic_dataset import write_synthetic_rollout
from rollout_dataset.capture import capture_rollout
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.capture.provenance import package_provenance, server_provenance


class _VllmLike(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        body = {"/version": {"version": "0.32.0"},
                "/v1/models": {"object": "list", "data": [{"id": "m", "root": "/srv/models/qwen-7b"}]}}.get(self.path)
        data = json.dumps(body).encode()
        self.send_response(200 if body else 404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def vllm_like():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _VllmLike)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_the_local_backend_names_itself_and_its_policy_never_vllm(local_backend_thread):
    version = httpx.get(local_backend_thread.base_url.removesuffix("/v1") + "/version").json()
    assert version["server"] == "rollout-dataset-local-backend" and version["policy"] == "echo"
    reply = httpx.post(local_backend_thread.base_url + "/chat/completions",
                       json={"model": "local", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).json()
    assert reply["system_fingerprint"].startswith("rollout-dataset-local-backend-") and "vllm" not in reply["system_fingerprint"]
    prov = server_provenance(local_backend_thread.base_url, "local")
    assert prov["server"] == {"kind": "rollout-dataset-local-backend", "version": version["version"],
                              "policy": "echo", "scripted": True}
    assert prov["model"] == {"id": "local", "root": "builtin"}


def test_a_vllm_server_is_recorded_with_its_version_and_a_root_without_its_file_layout(vllm_like):
    prov = server_provenance(vllm_like, "m")
    assert prov["server"] == {"kind": "vllm", "version": "0.32.0", "policy": None, "scripted": False}
    assert prov["model"] == {"id": "m", "root": ".../qwen-7b"}


def test_an_unreachable_server_leaves_provenance_unknown_without_failing():
    prov = server_provenance("http://127.0.0.1:9/v1", "m")
    assert prov["server"]["kind"] == "unknown" and prov["model"] == {"id": "m", "root": None}


def test_the_package_records_its_version_and_commit():
    from rollout_dataset._version import __version__

    info = package_provenance()
    assert info["version"] == __version__ and (info["git_sha"] is None or len(info["git_sha"]) == 40)


def test_a_capture_records_provenance_scores_no_solution_zero_and_keeps_the_upstream_host_out(local_backend_thread,
                                                                                                tmp_path):
    # the echo policy never writes a solution: a failure (0.0), not an unscored rollout
    out = tmp_path / "out"
    result = capture_rollout(CaptureConfig(out_dir=out, base_url=local_backend_thread.base_url, model="local",
                                           tokenizer="builtin", timeout_s=60, max_turns=2))
    summary = result.summary
    assert summary["env_reward"] == 0.0 and summary["held_out_passed"] == 0 and summary["unscored_reason"] is None
    assert summary["provenance"]["server"]["policy"] == "echo" and summary["provenance"]["server"]["scripted"]
    assert summary["provenance"]["harness"]["name"] == "builtin"
    host = local_backend_thread.base_url.split("//")[1].split("/")[0]
    leaks = [p.name for p in out.rglob("*") if p.is_file() and host.encode() in p.read_bytes()]
    assert leaks == []
    assert result.ok


def test_record_upstream_host_keeps_the_url_in_task_json():
    config = CaptureConfig(base_url="http://inference.internal:8000/v1", record_upstream_host=True)
    assert config.public_dict()["base_url"] == "http://inference.internal:8000/v1"
    assert "internal" not in CaptureConfig(base_url="http://inference.internal:8000/v1").public_dict()["base_url"]


def _scripted(folder: Path, policy: str | None) -> None:
    summary = json.loads((folder / "summary.json").read_text())
    kind = "rollout-dataset-local-backend" if policy else "vllm"
    summary["provenance"] = {"server": {"kind": kind, "version": "x", "policy": policy, "scripted": bool(policy)},
                             "model": {"id": "m", "root": None}, "harness": {"name": "builtin", "version": "0.1.0"},
                             "package": {"name": "rollout-dataset", "version": "0.1.0", "git_sha": None}}
    (folder / "summary.json").write_text(json.dumps(summary))


def test_the_card_opens_with_a_notice_when_any_rollout_came_from_a_scripted_policy(tmp_path):
    for seed, policy in ((0, "oracle"), (1, None)):
        write_synthetic_rollout(tmp_path / "in" / str(seed), n_turns=2, context_tokens=64, seed=seed)
        _scripted(tmp_path / "in" / str(seed), policy)
    build([tmp_path / "in" / "1"], tmp_path / "model-only", progress=False)
    assert "Notice:" not in (tmp_path / "model-only" / "README.md").read_text()
    readme = build([tmp_path / "in"], tmp_path / "mixed", progress=False).readme.read_text()
    body = readme.split("\n---\n", 1)[1]
    assert body.lstrip().split("\n\n")[1].startswith("> **Notice: 1 of 2 rollouts came from a scripted policy")
    assert "`oracle`: 1" in body
