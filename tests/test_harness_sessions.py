"""Harness-native sessions: the ids harnesses send (opencode, Claude Code, Codex) group a rollout's calls into
sessions and subagent sessions under their parent (records, graph, rollout.json, dataset, viewer), and never
choose the trace file: a forged id stays inside the proxy session that received it."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from proxy_fakes import FakeVLLM, serve
from rollout_dataset.export import export_rollout
from rollout_dataset.graph import build_graph
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.proxy.harness_sessions import harness_session
from rollout_dataset.schema import schema_errors

MESSAGES = [{"role": "user", "content": "hi"}]

# The headers as the real binaries send them (opencode 1.18.33, Claude Code 2.1.328, Codex 0.171.0; see
# rollout_dataset/proxy/harness_sessions.py for how each was checked).
OPENCODE_MAIN = {"x-session-id": "ses_main", "x-session-affinity": "ses_main"}
OPENCODE_SUB = {"x-session-id": "ses_sub", "x-session-affinity": "ses_sub", "x-parent-session-id": "ses_main"}
CLAUDE_MAIN = {"x-claude-code-session-id": "5b6f1469-2ac0-45ca-a389-50ccffe5ab08"}
CLAUDE_SUB = {**CLAUDE_MAIN, "x-claude-code-agent-id": "agent-7", "x-claude-code-agent-type": "general-purpose"}
CLAUDE_NESTED = {**CLAUDE_MAIN, "x-claude-code-agent-id": "agent-8", "x-claude-code-parent-agent-id": "agent-7"}
CODEX_ROOT = {"session-id": "01a2-root", "thread-id": "01a2-root"}
CODEX_SUB = {"session-id": "01a2-root", "thread-id": "01a2-sub", "x-codex-parent-thread-id": "01a2-root",
             "x-openai-subagent": "review"}


@pytest.mark.parametrize(("headers", "expected"), [
    (OPENCODE_MAIN, ("ses_main", None)),
    (OPENCODE_SUB, ("ses_sub", "ses_main")),
    (CLAUDE_MAIN, ("5b6f1469-2ac0-45ca-a389-50ccffe5ab08", None)),
    (CLAUDE_SUB, ("agent-7", "5b6f1469-2ac0-45ca-a389-50ccffe5ab08")),
    (CLAUDE_NESTED, ("agent-8", "agent-7")),
    (CODEX_ROOT, ("01a2-root", None)),
    (CODEX_SUB, ("01a2-sub", "01a2-root")),
    ({"user-agent": "Agents/Python 0.24.0"}, (None, None)),  # the OpenAI Agents SDK, LiteLLM, mini-swe-agent
])
def test_each_harness_session_header_names_the_session_and_its_parent(headers, expected):
    assert harness_session(headers) == expected


async def _calls(proxy: CaptureProxy, session: str, headers_list: list[dict[str, str]]) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        for i, headers in enumerate(headers_list):
            body = {"model": "ok", "messages": [{"role": "user", "content": f"turn {i}"}]}
            response = await http.post(proxy.session_base_url(session) + "/chat/completions", json=body,
                                       headers=headers)
            assert response.status_code == 200


@pytest.mark.parametrize(("main", "sub", "nested"), [(OPENCODE_MAIN, OPENCODE_SUB, None),
                                                     (CLAUDE_MAIN, CLAUDE_SUB, CLAUDE_NESTED),
                                                     (CODEX_ROOT, CODEX_SUB, None)])
async def test_subagent_sessions_sit_under_their_parent_in_the_records_graph_and_rollout(tmp_path, main, sub, nested):
    fake = FakeVLLM()
    sent = [main, sub, *([nested] if nested else []), main]
    async with serve(fake.app) as root, CaptureProxy(upstream=root, trace_dir=tmp_path) as proxy:
        await _calls(proxy, "run", sent)
    records = read_trace(tmp_path / "run.jsonl")
    assert all(schema_errors(r, "trace_record") == [] for r in records)
    main_id, sub_id = harness_session(main)[0], harness_session(sub)[0]
    assert [r["harness_session_id"] for r in records][:2] == [main_id, sub_id]
    assert "harness_parent_session_id" not in records[0] and records[1]["harness_parent_session_id"] == main_id
    tree = {s.session_id: s for s in build_graph(records).harness_sessions()}
    assert tree[main_id].depth == 0 and tree[main_id].calls == [0, len(sent) - 1]
    assert tree[sub_id].parent == main_id and tree[sub_id].parent_seen and tree[sub_id].depth == 1
    if nested:
        assert tree["agent-8"].depth == 2 and tree["agent-8"].parent == sub_id
    document = export_rollout(records, session_id="run", capture_level="tokens")
    assert schema_errors(document, "rollout") == []
    assert [s["session_id"] for s in document["harness_sessions"]] == list(tree)


async def test_a_harness_forging_another_sessions_ids_stays_in_its_own_proxy_session(tmp_path):
    fake = FakeVLLM()
    async with serve(fake.app) as root, CaptureProxy(upstream=root, trace_dir=tmp_path) as proxy:
        await _calls(proxy, "rollout-a", [OPENCODE_MAIN, OPENCODE_SUB])
        # rollout b's harness sends rollout a's native ids, and a's proxy session in the header the path overrides
        forged = {**OPENCODE_SUB, "x-rollout-session": "rollout-a"}
        await _calls(proxy, "rollout-b", [forged, {"x-session-id": "ses_b", "x-parent-session-id": "ses_b"}])
    a, b = read_trace(tmp_path / "rollout-a.jsonl"), read_trace(tmp_path / "rollout-b.jsonl")
    assert len(a) == 2 and all(r["session"] == "rollout-a" for r in a)  # nothing of b got into a's file
    assert len(b) == 2 and all(r["session"] == "rollout-b" for r in b)
    assert {r["call_id"] for r in a}.isdisjoint(r["call_id"] for r in b)
    b_tree = build_graph(b).harness_sessions()
    forged_sub = next(s for s in b_tree if s.session_id == "ses_sub")
    assert forged_sub.parent == "ses_main" and not forged_sub.parent_seen and forged_sub.depth == 0  # a's parent is not here
    own = next(s for s in b_tree if s.session_id == "ses_b")
    assert own.parent is None  # a session naming itself as its parent has none
    assert [s.session_id for s in build_graph(a).harness_sessions()] == ["ses_main", "ses_sub"]


def test_a_loop_of_parents_makes_no_session_a_child():
    from rollout_dataset.graph import harness_session_tree

    tree = harness_session_tree([(0, "x", "y"), (1, "y", "x"), (2, "z", "x")])
    assert [(s.session_id, s.parent_seen, s.depth) for s in tree] == [("x", False, 0), ("y", False, 0), ("z", False, 0)]


def test_the_viewer_shows_harness_sessions_and_model_servers(tmp_path: Path):
    from rollout_dataset.viewer.views import rollout_view

    trace = [{"call_index": 0, "harness_session_id": "ses_main", "harness_parent_session_id": None,
              "model_server": json.dumps({"url": "http://a:1", "moved_from": None, "moved_because": None})},
             {"call_index": 1, "harness_session_id": "ses_sub", "harness_parent_session_id": "ses_main",
              "model_server": None}]
    view = rollout_view({"rows": {"trace": trace}, "extra": {}, "errors": []}, "r")
    assert [(h["session_id"], h["depth"]) for h in view["harness_sessions"]] == [("ses_main", 0), ("ses_sub", 1)]
    assert view["calls"][1]["harness_parent_session"] == "ses_main"
    assert view["calls"][0]["model_server"]["url"] == "http://a:1"
    assert [n["harness_session"] for n in view["graph"]["nodes"]] == ["ses_main", "ses_sub"]


@pytest.mark.harness
def test_real_opencode_task_subagent_is_a_session_under_its_parent(tmp_path):
    from rollout_dataset.capture import capture_rollout
    from rollout_dataset.harness import find_opencode
    from rollout_dataset.recipes.coding import CaptureConfig

    if not find_opencode():
        pytest.skip("opencode is not installed: run `make npm-tools`")
    # the model asks opencode's `task` tool for a subagent; the subagent's own first turn (script step 0 again,
    # a `task` call its tools do not have) and every later turn end in text
    steps = [{"text": "", "tool_calls": [{"name": "task", "arguments": {
        "description": "check files", "prompt": "List the files and say done.", "subagent_type": "general"}}]}]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": steps, "final": "Done."}))
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", harness="opencode", policy="script",
                                           script=script, timeout_s=150))
    calls = json.loads((result.out_dir / "trace.json").read_text())["calls"]
    sessions = json.loads((result.out_dir / "rollout.json").read_text())["harness_sessions"]
    assert len(sessions) == 2, sessions
    main, sub = sessions
    assert main["parent"] is None and main["depth"] == 0
    assert sub["parent"] == main["session_id"] and sub["parent_seen"] and sub["depth"] == 1
    assert all(calls[i]["request_headers"]["x-parent-session-id"] == main["session_id"] for i in sub["calls"])
    assert all(c["session"] == calls[0]["session"] for c in calls)  # one proxy session: the rollout's


@pytest.mark.harness
def test_real_claude_code_agents_nest_under_the_session_that_spawned_them(tmp_path):
    from rollout_dataset.capture import capture_rollout
    from rollout_dataset.harness.claude_code import find_claude_code
    from rollout_dataset.recipes.coding import CaptureConfig

    if not find_claude_code():
        pytest.skip("Claude Code is not installed: run `make npm-tools`")
    # every agent's first turn (script step 0) asks its `Agent` tool for another agent: Claude Code nests them
    # (three deep in 2.1.328) until an agent has no `Agent` tool; later turns end in text
    steps = [{"text": "", "tool_calls": [{"name": "Agent", "arguments": {
        "description": "check files", "prompt": "List the files and say done.", "subagent_type": "general-purpose"}}]}]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": steps, "final": "Done."}))
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", harness="claude-code", policy="script",
                                           script=script, timeout_s=150))
    sessions = json.loads((result.out_dir / "rollout.json").read_text())["harness_sessions"]
    assert len(sessions) >= 2, sessions
    main, first = sessions[0], sessions[1]
    assert main["parent"] is None and main["depth"] == 0  # the main thread: x-claude-code-session-id alone
    assert first["parent"] == main["session_id"] and first["parent_seen"] and first["depth"] == 1
    assert [s["depth"] for s in sessions] == list(range(len(sessions)))  # each agent spawned by the one before
