"""End to end through the real capture: `rollout-dataset batch --smoke` against the local backend
(oracle policy), and a model server that answers 500 failing the batch at once."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rollout_dataset.cli import main
from rollout_dataset.schema import schema_errors
from rollout_dataset.schema.check import ARTIFACT_FILES, validate_path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def smoke_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke") / "batch"
    assert main(["batch", "--smoke", "--no-progress", "--out", str(out)]) == 0
    return out


def test_smoke_batch_produces_every_file(smoke_dir):
    for rel in ["runs/simple.jsonl", "runs/complex.jsonl", "summary/summary.json", "summary/stats_by_seed.json",
                "summary/config_snapshot.json", "report.md", "dataset/README.md"]:
        assert (smoke_dir / rel).is_file(), rel
    pngs = list((smoke_dir / "plots").glob("*.png"))
    assert len(pngs) == 6 and all(p.read_bytes()[:8] == PNG_SIGNATURE for p in pngs)
    rollouts = list((smoke_dir / "rollouts").iterdir())
    assert len(rollouts) == 2
    for folder in rollouts:
        for name in ARTIFACT_FILES:
            assert (folder / name).is_file(), f"{folder.name}/{name}"
    assert validate_path(smoke_dir / "rollouts") == []


def test_smoke_batch_sees_agent_turns_and_step_rewards(smoke_dir):
    summary = json.loads((smoke_dir / "summary/summary.json").read_text())
    assert schema_errors(summary, "batch_summary") == []
    assert summary["turns"]["mean"] > 0 and summary["counts"]["zero_turn_rollouts"] == 0
    records = [json.loads(line) for line in (smoke_dir / "runs/simple.jsonl").read_text().splitlines()]
    assert [(r["seed"], r["rollout_idx"]) for r in records] == [(0, 0), (1, 0)]
    for record in records:
        assert schema_errors(record, "run_record") == []
        assert record["num_steps"] > 0 and record["final_return"] is not None
        assert record["new_achievements_total"] >= 1  # the oracle makes the visible examples pass


def test_smoke_rollout_documents_carry_the_step_rewards(smoke_dir):
    folder = next((smoke_dir / "rollouts").iterdir())
    summary = json.loads((folder / "summary.json").read_text())
    rollout = json.loads((folder / "rollout.json").read_text())
    assert set(summary["stepwise"]) >= {"indicator_sum", "reward_sum", "new_achievements_total"}
    decisions = rollout["metadata"]["stepwise"]["simple"]["decisions"]
    assert decisions and set(decisions[0]) >= {"turn", "ach_delta", "unique_delta", "all", "unique"}


def test_smoke_batch_resumed_runs_nothing_again(smoke_dir, capsys):
    assert main(["batch", "--smoke", "--no-progress", "--no-dataset", "--out", str(smoke_dir)]) == 0
    assert "2 planned, 0 run, 2 already finished" in capsys.readouterr().out


class _Failing(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self._fail()

    def do_POST(self):  # noqa: N802
        self._fail()

    def _fail(self):
        body = json.dumps({"error": {"message": "engine down", "type": "InternalServerError", "code": 500}}).encode()
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_model_server_500_fails_the_batch_at_once_naming_status_and_url(tmp_path, capsys):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1"
        code = main(["batch", "--seeds", "0,1,2", "--rollouts-per-seed", "2", "--concurrency", "1", "--model", "m",
                     "--base-url", url, "--no-progress", "--out", str(tmp_path / "b")])
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    assert code == 1
    assert f"HTTP 500 for {url}/chat/completions" in err
    assert len(list((tmp_path / "b" / "rollouts").glob("*"))) <= 1  # stopped after the first rollout
    assert not (tmp_path / "b" / "runs").exists()


def test_unreachable_model_server_fails_the_batch_at_once_naming_the_url(tmp_path, capsys):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    port = server.server_port
    server.server_close()  # nothing listens on this port any more
    url = f"http://127.0.0.1:{port}/v1"
    code = main(["batch", "--seeds", "0,1", "--rollouts-per-seed", "2", "--concurrency", "1", "--model", "m",
                 "--base-url", url, "--no-progress", "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert code == 1
    # the recording proxy answers 502 for an upstream it cannot reach; the batch names it and the URL
    assert "rollout-dataset batch: stopped:" in err and url in err and "Connection refused" in err
    assert len(list((tmp_path / "b" / "rollouts").glob("*"))) <= 1
