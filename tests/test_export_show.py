"""`rollout-dataset show ARTIFACT_DIR`: one screen from rollout.json, or built from trace.json."""

from __future__ import annotations

import json

from rollout_dataset.cli import main
from rollout_dataset.export import export_rollout
from support.synthetic_records import make_record, tool_manifest


def _records():
    tools = tool_manifest("bash")
    return [
        make_record(0, [1, 2], [3], tools=None),
        make_record(1, [5, 6], [7], tools=tools),
        make_record(2, [5, 6, 7, 8], [9, 10], tools=tools, finish_reason="length"),
    ]


def test_show_builds_the_summary_from_trace_json_when_rollout_json_is_absent(tmp_path, capsys):
    (tmp_path / "trace.json").write_text(json.dumps({"schema_version": 1, "session": "abc", "calls": _records()}))
    assert main(["show", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "session abc" in out
    assert "3 calls, 2 root(s)" in out
    assert "[auxiliary" in out and "[agent" in out
    assert "truncated" in out


def test_show_reads_rollout_json_when_present(tmp_path, capsys):
    doc = export_rollout(_records(), session_id="from-rollout-json", capture_level="tokens")
    (tmp_path / "rollout.json").write_text(json.dumps(doc))
    assert main(["show", str(tmp_path)]) == 0
    assert "session from-rollout-json" in capsys.readouterr().out


def test_show_on_a_folder_without_artifacts_fails_naming_the_folder(tmp_path, capsys):
    assert main(["show", str(tmp_path)]) == 1
    assert str(tmp_path) in capsys.readouterr().err
