"""`rollout-dataset view` over HTTP: the API matches the dataset, nothing outside PATH is reachable,
a corrupt folder is reported in the page, nothing is written to PATH, and the CLI's errors."""

from __future__ import annotations

import hashlib
import json
import http.client
import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pyarrow.parquet as pq
import pytest

from rollout_dataset.server_runner import serve_in_thread
from rollout_dataset.viewer import export_static, viewer_server



@pytest.fixture(scope="module")
def dataset_viewer(demo_folders):
    with serve_in_thread(lambda: viewer_server(demo_folders[1]), name="viewer") as server:
        yield server


@pytest.fixture(scope="module")
def hostile_viewer(hostile_tree):
    with serve_in_thread(lambda: viewer_server(hostile_tree), name="viewer-hostile") as server:
        yield server


def _table(dataset: Path, config: str) -> list[dict]:
    return pq.read_table(dataset / "data" / config).to_pylist()


def _raw_get(url: str, path: str) -> int:
    """GET a path sent as written (no client-side normalisation of `..`)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read()
    conn.close()
    assert b"SECRET-OUTSIDE-PATH" not in body and b"root:x:" not in body
    return response.status


def test_the_index_lists_every_rollout_of_the_dataset_with_its_counts(dataset_viewer, demo_folders):
    rows = httpx.get(dataset_viewer.url + "api/index", params={"limit": 100}).json()
    summary = {r["rollout_id"]: r for r in _table(demo_folders[1], "summary")}
    assert {r["id"] for r in rows["rows"]} == set(summary) and rows["done"]
    for row in rows["rows"]:
        assert row["calls"] == summary[row["id"]]["captured_calls"]
        assert row["trainable_tokens"] == summary[row["id"]]["trainable_tokens"]
        assert row["group_id"] == summary[row["id"]]["group_id"]


def test_a_rollout_shows_the_datasets_numbers_of_tokens_trainable_tokens_and_calls(dataset_viewer, demo_folders):
    sequences = _table(demo_folders[1], "sequences")
    trace = _table(demo_folders[1], "trace")
    for rid in {r["rollout_id"] for r in sequences}:
        view = httpx.get(dataset_viewer.url + "api/rollout", params={"id": rid}).json()
        mine = [s for s in sequences if s["rollout_id"] == rid]
        assert view["errors"] == []
        assert view["totals"]["tokens"] == sum(len(s["input_ids"]) for s in mine)
        assert view["totals"]["trainable_tokens"] == sum(s["n_trainable"] for s in mine)
        assert view["totals"]["calls"] == len([t for t in trace if t["rollout_id"] == rid])


def test_token_windows_hold_the_exact_ids_mask_and_logprobs_of_the_sequence(dataset_viewer, demo_folders):
    seq = _table(demo_folders[1], "sequences")[0]
    got = []
    start = 0
    while start < len(seq["input_ids"]):
        page = httpx.get(dataset_viewer.url + "api/tokens", params={"id": seq["rollout_id"], "seq": seq["sequence_index"],
                                                                   "start": start, "count": 300}).json()
        got.extend(page["tokens"])
        start += len(page["tokens"])
    assert [t[0] for t in got] == seq["input_ids"]
    assert [t[3] for t in got] == seq["loss_mask"]
    assert [t[4] for t in got] == pytest.approx(seq["logprobs"])
    assert any(t[2] and t[1].startswith("<|") for t in got), "special tokens are decoded and flagged"


def test_artifact_folders_and_their_build_show_the_same_totals(demo_folders):
    from rollout_dataset.viewer import open_source
    from rollout_dataset.viewer.views import rollout_view

    artifacts, dataset = open_source(demo_folders[0]), open_source(demo_folders[1])
    by_rollout = {}
    for row in dataset.index_rows():
        by_rollout[row["id"]] = rollout_view(dataset.rollout_rows(row["id"]), row["id"])["totals"]
    for row in artifacts.index_rows():
        view = rollout_view(artifacts.rollout_rows(row["id"]), row["id"])
        assert view["errors"] == [] and view["totals"] == by_rollout[row["rollout_id"]]


@pytest.mark.parametrize("path", [
    "/static/../../../../etc/passwd", "/static/%2e%2e/%2e%2e/%2e%2e/etc/passwd", "/static/..%2f..%2f..%2fetc%2fpasswd",
    "/api/rollout?id=../../../../etc", "/api/rollout?id=%2Fetc", "/api/rollout?id=linked",
    "/api/rollout?id=secret-link.txt", "/api/tokens?id=..%2F..%2Fetc&seq=0", "/secret-link.txt",
    "/static/../secret-link.txt", "/linked/summary.json", "/api/rollout?id=rollout-000/../../../secret.txt",
])
def test_traversal_and_symlinks_out_of_path_get_404(hostile_viewer, path):
    assert _raw_get(hostile_viewer.url, path) == 404


def test_a_symlinked_folder_pointing_outside_path_is_not_listed(hostile_viewer):
    ids = {r["id"] for r in httpx.get(hostile_viewer.url + "api/index").json()["rows"]}
    assert ids == {"rollout-000", "rollout-001", "rollout-002"}


def test_a_corrupt_folder_is_listed_and_its_page_names_the_validation_error(hostile_viewer):
    rows = {r["id"]: r for r in httpx.get(hostile_viewer.url + "api/index").json()["rows"]}
    assert "rollout.json" in rows["rollout-001"]["error"]
    view = httpx.get(hostile_viewer.url + "api/rollout", params={"id": "rollout-001"}).json()
    assert any("rollout.json" in e and "JSON" in e for e in view["errors"]), view["errors"]
    assert httpx.get(hostile_viewer.url + "api/rollout", params={"id": "rollout-002"}).json()["errors"] == []


def test_every_response_carries_a_strict_content_security_policy(hostile_viewer):
    for path in ("", "rollout.html", "static/rollout.js", "api/index"):
        csp = httpx.get(hostile_viewer.url + path).headers["content-security-policy"]
        assert "default-src 'self'" in csp and "unsafe-inline" not in csp and "script-src 'self'" in csp


def test_the_viewer_is_read_only(hostile_viewer):
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert httpx.request(method, hostile_viewer.url + "api/index").status_code == 405


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode())
        if path.is_file() and not path.is_symlink():
            h.update(path.read_bytes())
            h.update(str(path.stat().st_mtime_ns).encode())
    return h.hexdigest()


def test_serving_and_exporting_never_write_to_path(demo_folders, tmp_path):
    before = [_digest(p) for p in demo_folders]
    for k, folder in enumerate(demo_folders):
        with serve_in_thread(lambda folder=folder: viewer_server(folder), name="viewer-ro") as server:
            for row in httpx.get(server.url + "api/index").json()["rows"]:
                httpx.get(server.url + "api/rollout", params={"id": row["id"]})
                httpx.get(server.url + "api/tokens", params={"id": row["id"], "seq": 0})
        export_static(folder, tmp_path / f"out{k}")
    assert [_digest(p) for p in demo_folders] == before


def test_export_refuses_a_folder_inside_path_or_not_empty(demo_folders, tmp_path):
    with pytest.raises(FileExistsError, match="inside"):
        export_static(demo_folders[0], demo_folders[0] / "export")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(FileExistsError, match="not an empty folder"):
        export_static(demo_folders[0], tmp_path / "full")


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    return subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "view", *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_the_cli_names_a_path_without_rollouts_and_exits_1(tmp_path):
    done = _cli(str(tmp_path))
    assert done.returncode == 1 and done.stderr.startswith("error: ") and str(tmp_path) in done.stderr
    assert "Traceback" not in done.stderr


def test_the_cli_rejects_a_port_out_of_range_with_exit_2(demo_folders):
    done = _cli(str(demo_folders[0]), "--port", "70000")
    assert done.returncode == 2 and "error: --port must be in [0, 65535]" in done.stderr


def test_the_cli_export_writes_a_static_copy_and_prints_where(demo_folders, tmp_path):
    done = _cli(str(demo_folders[1]), "--export", str(tmp_path / "site"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "index.html").is_file() and (tmp_path / "site" / "data" / "index.js").is_file()
    assert "exported 3 rollouts" in done.stdout


def test_an_audit_shows_in_the_index_the_page_and_each_tokens_scorer_logprob(audited_tree):
    with serve_in_thread(lambda: viewer_server(audited_tree), name="viewer-audit") as server:
        row = httpx.get(server.url + "api/index").json()["rows"][0]
        assert row["audit_max_abs_diff"] == 0.5 and row["audit_kl_k3"] == 0.002
        view = httpx.get(server.url + "api/rollout", params={"id": "rollout-000"}).json()
        assert view["errors"] == [] and view["audit"]["scorer"] == "server"
        assert view["audit"]["not_comparable"] == [{"call_index": 9, "reason": "no logprobs"}]
        page = httpx.get(server.url + "api/tokens", params={"id": "rollout-000", "seq": 0, "count": 4096}).json()
        sampled = [t for t in page["tokens"] if t[3]]
        assert sampled[0][6] == pytest.approx(sampled[0][4] - 0.5)
        assert all(t[6] == pytest.approx(t[4]) for t in sampled[1:])
        assert all(t[6] is None for t in page["tokens"] if not t[3])


def test_without_an_audit_the_page_has_none_and_tokens_no_scorer_logprob(dataset_viewer, demo_folders):
    rid = _table(demo_folders[1], "summary")[0]["rollout_id"]
    assert httpx.get(dataset_viewer.url + "api/rollout", params={"id": rid}).json()["audit"] is None
    page = httpx.get(dataset_viewer.url + "api/tokens", params={"id": rid, "seq": 0, "count": 50}).json()
    assert all(t[6] is None for t in page["tokens"])


def test_a_crafter_rollout_shows_its_achievement_timeline_per_decision(crafter_tree):
    with serve_in_thread(lambda: viewer_server(crafter_tree), name="viewer-crafter") as server:
        view = httpx.get(server.url + "api/rollout", params={"id": "episode"}).json()
    metadata = json.loads((crafter_tree / "episode" / "rollout.json").read_text())["metadata"]["crafter"]
    assert view["errors"] == []
    assert [d["turn"] for d in view["crafter"]["decisions"]] == [d["turn"] for d in metadata["decisions"]]
    assert [d["newly_unlocked"] for d in view["crafter"]["decisions"]] == \
        [d["newly_unlocked"] for d in metadata["decisions"]]
    assert view["crafter"]["achievements_unlocked"] == metadata["achievements_unlocked"]


def test_text_that_looks_like_json_stays_text(dataset_viewer, demo_folders):
    from rollout_dataset.viewer.sources import _decoded

    row = _decoded("task", {"instruction": "[1, 2]", "title": '{"a": 1}', "config": '{"a": 1}'})
    assert row == {"instruction": "[1, 2]", "title": '{"a": 1}', "config": {"a": 1}}
    rid = _table(demo_folders[1], "summary")[0]["rollout_id"]
    view = httpx.get(dataset_viewer.url + "api/rollout", params={"id": rid}).json()
    assert all(isinstance(h["input"], str) for h in view["held_out_tests"])
    assert isinstance(view["task"]["instruction"], str) and isinstance(view["summary"]["timings"], dict)


def test_the_cli_names_an_address_in_use_and_exits_1(demo_folders):
    from rollout_dataset.server_runner import bind_socket

    taken = bind_socket("127.0.0.1", 0)
    try:
        done = _cli(str(demo_folders[0]), "--port", str(taken.getsockname()[1]))
    finally:
        taken.close()
    assert done.returncode == 1 and done.stderr.startswith("error: cannot bind the viewer to 127.0.0.1:")


def test_each_call_shows_its_lowered_output_limit_and_its_continuity(demo_folders):
    import copy

    from rollout_dataset.viewer import open_source
    from rollout_dataset.viewer.views import rollout_view

    source = open_source(demo_folders[0])
    loaded = copy.deepcopy(source.rollout_rows("rollout-000"))
    loaded["rows"]["summary"][0]["context_fit"]["lowered"] = [
        {"index": 1, "field": "max_tokens", "requested": 2048, "effective": 100}]
    loaded["extra"]["call_continuity"] = {1: {"status": "repaired", "parent_index": 0, "reason": None,
                                              "detail": None, "drift": 3}}
    calls = {c["index"]: c for c in rollout_view(loaded, "rollout-000")["calls"]}
    assert calls[1]["context_fit"] == [{"index": 1, "field": "max_tokens", "requested": 2048, "effective": 100}]
    assert calls[1]["continuity"]["status"] == "repaired"
    assert calls[0]["context_fit"] == [] and calls[0]["continuity"] is None


def test_the_prefix_graph_has_roots_a_fork_and_a_discarded_retry_in_the_folder_and_its_build(tmp_path):
    from rollout_dataset.builder import build
    from support.synthetic_dataset import write_synthetic_rollout
    from rollout_dataset.viewer import open_source
    from rollout_dataset.viewer.views import rollout_view

    rid = "ab" * 16
    write_synthetic_rollout(tmp_path / "art" / "r", n_turns=4, context_tokens=400, with_aux=True, with_retry=True,
                            rollout_id=rid)
    build([tmp_path / "art" / "r"], tmp_path / "ds", progress=False)
    graphs = []
    for path, key in ((tmp_path / "art", "r"), (tmp_path / "ds", rid)):
        source = open_source(path)
        view = rollout_view(source.rollout_rows(key), key)
        assert view["errors"] == []
        nodes = {n["id"]: n for n in view["graph"]["nodes"]}
        graphs.append(({i for i, n in nodes.items() if n["root"]}, {i for i, n in nodes.items() if n["fork"]},
                       {i for i, n in nodes.items() if n["discarded"]}, view["graph"]["edges"]))
    assert graphs[0] == graphs[1]
    roots, forks, discarded, edges = graphs[0]
    assert roots == {0, 1} and forks == {1} and discarded == {2} and [1, 2] in edges


def test_the_cli_prints_a_loopback_url_serves_it_and_stops_on_ctrl_c_with_exit_0(demo_folders):
    import re
    import signal

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.Popen([sys.executable, "-m", "rollout_dataset.cli", "view", str(demo_folders[1])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = re.search(r"http://127\.0\.0\.1:\d+/", proc.stdout.readline()).group(0)
        assert len(httpx.get(url + "api/index").json()["rows"]) == 3
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err


def test_a_request_for_another_host_name_is_refused(dataset_viewer):
    # DNS rebinding: a page of evil.example whose name resolves to 127.0.0.1 sends its own Host
    refused = httpx.get(dataset_viewer.url + "api/index", headers={"Host": "evil.example"})
    assert refused.status_code == 400
    assert httpx.get(dataset_viewer.url + "api/index").status_code == 200


@pytest.mark.parametrize("path", ["/api/rollout?id=nope", "/api/tokens?id=nope&seq=0", "/nope.html"])
def test_a_404_names_no_path_of_this_machine(hostile_viewer, hostile_tree, path):
    parts = urlsplit(hostile_viewer.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read().decode()
    conn.close()
    assert response.status == 404 and str(hostile_tree) not in body and "/tmp" not in body


def test_a_viewer_served_on_a_named_address_answers_that_host_and_loopback_names_only(demo_folders):
    from starlette.testclient import TestClient

    from rollout_dataset.viewer.app import build_app
    from rollout_dataset.viewer.sources import open_source

    client = TestClient(build_app(open_source(demo_folders[1]), host="192.0.2.7"))
    assert client.get("/api/info", headers={"Host": "192.0.2.7:8080"}).status_code == 200
    assert client.get("/api/info", headers={"Host": "localhost:8080"}).status_code == 200
    assert client.get("/api/info", headers={"Host": "evil.example"}).status_code == 400


def test_a_rollout_whose_text_holds_a_lone_surrogate_is_served_with_it_as_an_escape(oddity_tree):
    from viewer_fixtures import LONE_SURROGATE

    with serve_in_thread(lambda: viewer_server(oddity_tree), name="viewer-oddity") as server:
        reply = httpx.get(server.url + "api/rollout", params={"id": "rollout-000"})
    assert reply.status_code == 200, reply.text
    assert b"\\ud800" in reply.content
    texts = [m["content"] or "" for conv in reply.json()["conversations"] for m in conv["messages"]]
    assert any(text.startswith(LONE_SURROGATE) for text in texts)


def test_the_export_writes_a_rollout_whose_text_holds_a_lone_surrogate_as_an_escape(oddity_tree, tmp_path):
    result = export_static(oddity_tree, tmp_path / "site")
    assert result["rollouts"] == 2
    data = [p.read_text(encoding="utf-8") for p in (tmp_path / "site" / "data").glob("r?.js")]
    assert any("\\ud800" in text for text in data)


def test_validation_errors_in_the_index_and_a_page_name_no_path_of_this_machine(hostile_viewer, hostile_tree):
    index = httpx.get(hostile_viewer.url + "api/index").text
    page = httpx.get(hostile_viewer.url + "api/rollout", params={"id": "rollout-001"})
    assert "rollout.json" in page.json()["errors"][0]
    assert str(hostile_tree) not in index and str(hostile_tree) not in page.text


def test_an_export_names_no_path_of_this_machine(hostile_tree, tmp_path):
    export_static(hostile_tree, tmp_path / "site")
    leaked = [p.name for p in (tmp_path / "site" / "data").iterdir() if str(hostile_tree) in p.read_text("utf-8")]
    assert leaked == []


def test_the_graph_of_a_folder_that_fails_validation_has_no_edge_to_a_missing_node(demo_folders, tmp_path):
    from rollout_dataset.viewer.app import load_view
    from rollout_dataset.viewer.sources import open_source

    shutil.copytree(demo_folders[0] / "rollout-000", tmp_path / "rollout-000")
    task = json.loads((tmp_path / "rollout-000" / "task.json").read_text())
    (tmp_path / "rollout-000" / "task.json").write_text(json.dumps(dict(task, task_id="another-task")))
    _, view, _ = load_view(open_source(tmp_path), "rollout-000")
    assert view["errors"]
    nodes = {node["id"] for node in view["graph"]["nodes"]}
    assert all(a in nodes and b in nodes for a, b in view["graph"]["edges"])


def test_an_export_names_a_token_window_it_cannot_read_and_goes_on(demo_folders, tmp_path):
    import pyarrow as pa

    dataset = tmp_path / "dataset"
    shutil.copytree(demo_folders[1], dataset)
    (shard,) = (dataset / "data" / "sequences").glob("*.parquet")
    table = pq.read_table(shard)
    rows = table.to_pylist()
    rows[0]["input_ids"][3] = None  # a corrupt shard: a null token id
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
    result = export_static(dataset, tmp_path / "site")
    assert result["rollouts"] == 3
    windows = [p.read_text("utf-8") for p in (tmp_path / "site" / "data").glob("r*-s*-w*.js")]
    assert sum("TypeError" in text for text in windows) == 1
