"""The proxy's session API (docs/session-api.md): a trainer reads a session's settled calls and its
sequences live, posts its reward and seals it; the rows it pulls equal the rows `build` writes later.

Real servers on loopback: the local backend (script policy) behind the recording proxy, the built-in
agent as the harness, the package's own client.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

import httpx
import jsonschema
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rollout_dataset.backend import run_backend_in_thread
from rollout_dataset.builder import build
from rollout_dataset.capture.session_artifacts import session_rollout_id, write_session_artifacts
from rollout_dataset.export.rows import ROLLOUT_LEVEL_FIELDS
from rollout_dataset.harness import BuiltinAgent, ToolBox
from rollout_dataset.proxy import CaptureProxy
from rollout_dataset.schema import load_schema
from rollout_dataset.session_client import AsyncSessionClient, SessionClient, proxy_root

SOLUTION = "a, b = map(int, input().split())\nprint(a + b)\n"
STEPS = [{"name": "write_file", "arguments": {"path": "solution.py", "content": SOLUTION}},
         {"name": "read_file", "arguments": {"path": "solution.py"}}, {"name": "submit", "arguments": {}}]


def check_shape(document: dict, name: str) -> None:
    """Validate an API document against its definition in session_api.schema.json."""
    schema = load_schema("session_api")
    from rollout_dataset.schema import _registry  # every shipped schema, for the $ref into rollout.schema.json

    validator = jsonschema.Draft202012Validator({**schema, "$ref": f"#/$defs/{name}"}, registry=_registry())
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]


def run_agent(proxy: CaptureProxy, session: str, workdir: Path, steps=STEPS) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    BuiltinAgent(proxy.session_base_url(session), "local", ToolBox(workdir, [("1 2\n", "3\n")]),
                 max_turns=len(steps) + 1).run("Add two numbers.")


@pytest.fixture
def backend():
    with run_backend_in_thread(policy="script", script={"steps": STEPS, "final": "All done."}) as server:
        yield server


# ---- reading -----------------------------------------------------------------------------------

def test_a_session_shows_its_settled_calls_state_and_findings(tmp_path, backend):
    with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path / "t", session_api=True) as proxy:
        run_agent(proxy, "run-1", tmp_path / "w")
        with SessionClient(proxy.base_url) as api:
            listed = api.sessions()
            document = api.session("run-1")
    assert listed == [{"session": "run-1", "state": "open", "calls_in_flight": 0}]
    check_shape({"sessions": listed}, "session_list")
    check_shape(document, "session")
    assert document["state"] == "open" and document["settled_calls"] == 3 and document["calls_in_flight"] == 0
    assert [c["index"] for c in document["calls"]] == [0, 1, 2]
    assert {c["finish_reason"] for c in document["calls"]} == {"tool_calls"}
    assert document["trainable"] and document["capture_level"] == "tokens"
    assert isinstance(document["findings"], list) and document["reward"] is None and document["seal"] is None


def test_sequences_carry_ids_mask_logprobs_roles_and_finish_reasons(tmp_path, backend):
    with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path / "t", session_api=True) as proxy:
        run_agent(proxy, "run-1", tmp_path / "w")
        with SessionClient(proxy.base_url) as api:
            document = api.sequences("run-1")
    check_shape(document, "sequences")
    [agent] = [s for s in document["sequences"] if s["trainable"]]
    assert agent["role"] == "agent" and agent["node_ids"] == [0, 1, 2]
    assert agent["finish_reasons"] == ["tool_calls"] * 3
    assert len(agent["input_ids"]) == len(agent["loss_mask"]) == len(agent["logprobs"])
    assert sum(agent["loss_mask"]) == agent["n_trainable"] > 0
    assert all(lp < 0 for lp, m in zip(agent["logprobs"], agent["loss_mask"]) if m)


def test_a_row_pulled_live_equals_the_row_build_writes(tmp_path, backend):
    session = "0123456789abcdef0123456789abcdef"
    with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path / "t", session_api=True,
                      session_api_tokenizer="builtin") as proxy:
        run_agent(proxy, session, tmp_path / "w")
        with SessionClient(proxy.base_url) as api:
            api.post_reward(session, 0.75, {"env": "coding", "task_id": "add", "dataset_seed": 3})
            api.seal(session)
            live = api.sequences(session)
    write_session_artifacts(tmp_path / "t", session, tmp_path / "runs" / session, tokenizer="builtin")
    build([tmp_path / "runs"], tmp_path / "ds")
    built = pq.read_table(glob.glob(str(tmp_path / "ds" / "data" / "sequences" / "*.parquet")))
    assert built.num_rows == len(live["sequences"]) > 0
    columns = [name for name in built.column_names if name not in ROLLOUT_LEVEL_FIELDS]
    rows = [{k: s[k] for k in columns} for s in live["sequences"]]
    as_built = pa.Table.from_pylist(rows, schema=pa.schema([built.schema.field(c) for c in columns]))
    assert as_built.to_pylist() == built.select(columns).to_pylist()  # every column, at the dataset's types
    rollout = built.select(list(ROLLOUT_LEVEL_FIELDS)).to_pylist()
    assert rollout == [{"rollout_id": session_rollout_id(session), "group_id": "coding:add:3", "env_reward": 0.75,
                        "reward_after_penalties": 0.75}] * built.num_rows


async def test_the_async_client_reads_posts_and_seals(tmp_path, start_local_backend):
    backend = await start_local_backend(policy="echo")
    async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path / "t", session_api=True) as proxy:
        async with httpx.AsyncClient() as client:
            r = await client.post(proxy.session_base_url("a") + "/chat/completions",
                                  json={"model": "local", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200
        async with AsyncSessionClient(proxy.session_base_url("a")) as api:
            assert (await api.wait_settled("a"))["settled_calls"] == 1
            answer = await api.post_reward("a", 1, {"k": "v"})
            sealed = await api.seal("a")
            document = await api.session("a")
    check_shape(answer, "reward_answer")
    check_shape(sealed, "seal_answer")
    assert document["state"] == "sealed" and document["reward"] == 1.0 and document["reward_metadata"] == {"k": "v"}
    assert document["seal"]["records"] == 1


def test_the_client_takes_any_url_the_proxy_printed():
    for url in ("http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/sessions/x/v1", "http://h:1/sessions"):
        assert proxy_root(url) == "http://h:1", url


def test_a_session_read_written_as_an_artifact_folder_validates(tmp_path, backend):
    from rollout_dataset.schema.check import check_artifact_dir

    with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path / "t", session_api=True) as proxy:
        run_agent(proxy, "s", tmp_path / "w")
        with SessionClient(proxy.base_url) as api:
            api.seal("s")
    folder = write_session_artifacts(tmp_path / "t", "s", tmp_path / "art")
    assert check_artifact_dir(folder) == []
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["env_reward"] is None and summary["captured_calls"] == 3 and summary["env"] == "online"


def test_the_sessions_command_writes_each_sealed_session_for_build_and_names_the_open_ones(tmp_path, backend, capsys):
    from rollout_dataset.cli import main

    with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path / "t", session_api=True) as proxy:
        run_agent(proxy, "done", tmp_path / "w1")
        run_agent(proxy, "running", tmp_path / "w2")
        with SessionClient(proxy.base_url) as api:
            api.post_reward("done", 0.5)
            api.seal("done")
    assert main(["sessions", str(tmp_path / "t"), "--out", str(tmp_path / "runs")]) == 0
    out, err = capsys.readouterr()
    assert "1 sealed session(s) written" in out and "running" in err and "done" not in err
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [session_rollout_id("done")]
    assert main(["build", str(tmp_path / "runs"), "--out", str(tmp_path / "ds")]) == 0
    trace = tmp_path / "t" / "done.jsonl"
    trace.write_bytes(trace.read_bytes().replace(b"Add two numbers", b"Add two NUMBERS"))
    assert main(["sessions", str(tmp_path / "t"), "--out", str(tmp_path / "runs2")]) == 1
    assert "error: session done:" in capsys.readouterr().err
