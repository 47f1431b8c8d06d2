"""The capture's integrity rules on their own: leakage scan, penalties, secret redaction, first-call check."""

from __future__ import annotations

import json

import pytest

from rollout_dataset.capture import PenaltyRules, collect_secrets, compute_penalties, first_call_failure, redact_text, reward_after_penalties
from rollout_dataset.recipes.coding import scan_for_leaks

STATEMENT = "Add the numbers.\n\nExample 1\nInput:\n1 2\nOutput:\n3\n"
HELD_OUT = [{"input": "1000000 2000000\n", "output": "3000000\n"}, {"input": "5 5\n", "output": "10\n"}]


def _record(index, request, status=200, endpoint="/v1/chat/completions"):
    return {"index": index, "endpoint": endpoint, "status": status, "request": request, "error": None}


def test_leak_in_a_working_file_is_found_with_its_path(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "cheat.txt").write_text("expected: 3000000\n")
    hits = scan_for_leaks(STATEMENT, HELD_OUT, [], tmp_path)
    assert [h.to_dict() for h in hits] == [{"test_index": 0, "field": "output", "where": "workdir:notes/cheat.txt"}]


def test_leak_inside_json_encoded_tool_arguments_of_a_request_is_found():
    args = json.dumps({"path": "t.txt", "content": "1000000 2000000\n"})
    request = {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "write_file",
                                                                                 "arguments": args}}]}]}
    hits = scan_for_leaks(STATEMENT, HELD_OUT, [_record(4, request)], None)
    assert [(h.test_index, h.field, h.where) for h in hits] == [(0, "input", "request[4]")]


def test_short_held_out_text_and_text_in_the_statement_are_not_leaks(tmp_path):
    (tmp_path / "solution.py").write_text("print(10)\n# 5 5\n")
    held = [{"input": "5 5\n", "output": "10\n"}, {"input": "Add the numbers.", "output": "x"}]
    assert scan_for_leaks(STATEMENT, held, [], tmp_path) == []


def test_clean_capture_has_no_hits(tmp_path):
    (tmp_path / "solution.py").write_text("a, b = map(int, input().split())\nprint(a + b)\n")
    request = {"messages": [{"role": "user", "content": STATEMENT}]}
    assert scan_for_leaks(STATEMENT, HELD_OUT, [_record(0, request)], tmp_path) == []


def test_tool_calls_over_budget_are_penalised_per_call_and_capped():
    rules = PenaltyRules(tool_call_budget=4, per_extra_tool_call=0.05, max_tool_call_penalty=0.1)
    two_over = compute_penalties({"run": 6}, True, rules)
    assert two_over[0]["code"] == "tool_calls_over_budget" and two_over[0]["amount"] == pytest.approx(0.1)
    far_over = compute_penalties({"run": 60}, True, rules)
    assert far_over[0]["amount"] == pytest.approx(0.1)
    assert compute_penalties({"run": 4}, True, rules) == []


def test_never_running_code_is_penalised_and_derived_from_tool_names():
    assert [p["code"] for p in compute_penalties({"write_file": 1, "submit": 1})] == ["never_ran_code"]
    assert compute_penalties({"write_file": 1, "bash": 2}) == []


def test_reward_after_penalties_is_floored_at_zero_and_null_when_unscorable():
    penalties = [{"code": "never_ran_code", "amount": 0.1, "detail": ""}]
    assert reward_after_penalties(0.75, penalties) == pytest.approx(0.65)
    assert reward_after_penalties(0.05, penalties) == 0.0
    assert reward_after_penalties(None, penalties) is None


def test_secrets_from_the_environment_and_bearer_tokens_are_redacted():
    secrets = collect_secrets(["sk-capture-key-0123"], {"HF_TOKEN": "hf_abcdefghijklmnopqrstuv", "HOME": "/root"})
    text = json.dumps({"k": "sk-capture-key-0123", "h": "Authorization: Bearer abcdefgh12345678",
                       "t": "hf_abcdefghijklmnopqrstuv", "home": "/root"})
    clean, count = redact_text(text, secrets)
    assert "sk-capture-key-0123" not in clean and "abcdefgh12345678" not in clean and "hf_abc" not in clean
    assert "/root" in clean and count == 3


def test_placeholder_api_keys_are_not_treated_as_secrets():
    assert collect_secrets(["EMPTY", None, ""], {}) == []


def test_first_call_failure_looks_only_at_the_first_generation_call():
    models = _record(0, None, status=404, endpoint="/v1/models")
    bad = _record(1, {}, status=500)
    good = _record(1, {}, status=200)
    assert first_call_failure([models, bad])["index"] == 1
    assert first_call_failure([models, good, _record(2, {}, status=500)]) is None
    assert first_call_failure([]) is None
