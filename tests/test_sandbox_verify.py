"""The verifier: held-out reward in fresh sandboxes, visible examples in the agent's workdir."""

from __future__ import annotations

import pytest

from rollout_dataset.sandbox import Limits, VerifyResult, outputs_match, run_examples, verify_solution
from rollout_dataset.tasks import builtin_tasks, find_held_out_text, normalise_text

TASKS = {t.task_id: t for t in builtin_tasks()}
SUM = TASKS["sum-of-integers"]
WRONG_SUM = "import sys\nt = sys.stdin.read().split()\nprint(sum(int(x) for x in t[1:]) if len(t) > 2 else 0)\n"


def test_reference_solution_scores_one():
    result = verify_solution(SUM, SUM.reference_solution)
    assert isinstance(result, VerifyResult)
    assert (result.passed, result.total, result.env_reward, result.errors) == (len(SUM.held_out_tests),) * 2 + (1.0, [])
    assert all(t["passed"] and t["reason"] == "passed" for t in result.per_test)


def test_a_deliberately_wrong_solution_scores_below_one():
    result = verify_solution(SUM, WRONG_SUM)
    assert 0.0 < result.env_reward < 1.0
    assert any(t["reason"] == "wrong answer" for t in result.per_test)


def test_no_solution_is_a_failure_scored_zero_not_unscored(tmp_path):
    assert verify_solution(SUM, None).env_reward == 0.0
    result = verify_solution(SUM, tmp_path)  # an agent workdir without solution.py
    assert result.env_reward == 0.0 and result.passed == 0 and result.unscored_reason is None
    assert "no solution file" in result.errors[0]


def test_a_task_without_held_out_tests_is_unscored_with_the_reason(tmp_path):
    import dataclasses

    (tmp_path / "solution.py").write_text(SUM.reference_solution)
    result = verify_solution(dataclasses.replace(SUM, held_out_tests=[]), tmp_path)
    assert result.env_reward is None and "no held-out tests" in result.unscored_reason


def test_a_solution_file_in_the_agent_workdir_is_verified(tmp_path):
    (tmp_path / "solution.py").write_text(SUM.reference_solution)
    assert verify_solution(SUM, tmp_path).env_reward == 1.0
    assert verify_solution(SUM, tmp_path / "solution.py").env_reward == 1.0


def test_a_symlinked_solution_file_is_not_followed_so_no_host_file_is_read(tmp_path):
    # the agent's workdir is untrusted: a link to a host file the verifier may read but the sandbox may
    # not (a token) would run that file as the solution and record its text in the errors
    secret = tmp_path / "token"
    secret.write_text("hf_NOT_FOR_THE_DATASET\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "solution.py").symlink_to(secret)
    result = verify_solution(SUM, work)
    assert result.env_reward == 0.0 and result.per_test == [] and "symlink" in result.errors[0]
    assert "hf_NOT_FOR_THE_DATASET" not in repr(result.to_dict())


def test_a_solution_file_that_is_a_fifo_or_too_large_scores_zero_without_hanging(tmp_path):
    import os

    from rollout_dataset.sandbox.verify import MAX_SOLUTION_BYTES

    os.mkfifo(tmp_path / "solution.py")
    result = verify_solution(SUM, tmp_path)
    assert result.env_reward == 0.0 and "not a regular file" in result.errors[0]
    (tmp_path / "solution.py").unlink()
    (tmp_path / "solution.py").write_bytes(b"#" * (MAX_SOLUTION_BYTES + 1))
    result = verify_solution(SUM, tmp_path)
    assert result.env_reward == 0.0 and "larger than" in result.errors[0]


def test_a_crashing_solution_records_a_runtime_error_per_test():
    result = verify_solution(SUM, "raise SystemExit('boom')")
    assert result.env_reward == 0.0
    assert all(t["reason"].startswith("runtime error: exited with status 1") and "boom" in t["reason"]
               for t in result.per_test)


def test_a_limit_that_hits_is_recorded_for_each_test():
    result = verify_solution(SUM, "import time\ntime.sleep(30)", limits=Limits(wall_s=0.5))
    assert result.env_reward == 0.0
    assert result.limits_hit == ["wall"] * result.total
    assert all("wall-time limit of 0.5 s exceeded" in e for e in result.errors)


def test_reasons_never_contain_expected_outputs():
    result = verify_solution(SUM, "print('nope')")
    text = repr(result.to_dict())
    assert all(normalise_text(t.output) not in text for t in SUM.held_out_tests if len(normalise_text(t.output)) >= 3)


def test_the_verifier_runs_in_a_fresh_directory_and_leaves_the_agent_workdir_alone(tmp_path):
    # the solution lists its directory, then writes the input it got into a file there
    spy = ("import os, sys\ndata = sys.stdin.read()\nnames = sorted(os.listdir('.'))\n"
           "open('seen.txt', 'w').write(data)\nprint(names)\n")
    (tmp_path / "solution.py").write_text(spy)
    (tmp_path / "notes.md").write_text("agent notes")
    result = verify_solution(TASKS["reverse-words"], tmp_path)
    assert result.env_reward == 0.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.md", "solution.py"]


def test_held_out_tests_never_reach_the_agent_workdir(tmp_path):
    # a solution that stores every input it is given next to itself
    task = TASKS["edit-distance"]
    recorder = "import sys, uuid\ndata = sys.stdin.read()\nopen(f'seen-{uuid.uuid4().hex}.txt', 'w').write(data)\n"
    (tmp_path / "solution.py").write_text(recorder + task.reference_solution.replace("sys.stdin.read()", "data"))
    assert all(r.passed for r in run_examples(task, tmp_path))
    assert verify_solution(task, tmp_path).env_reward == 1.0
    written = "\n".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    assert len(list(tmp_path.glob("seen-*.txt"))) == len(task.visible_tests)
    assert find_held_out_text(task, written, allow_in_instruction=False) == []


def test_run_examples_reports_each_visible_example(tmp_path):
    task = TASKS["max-subarray-sum"]
    (tmp_path / "solution.py").write_text(task.reference_solution)
    results = run_examples(task, tmp_path)
    assert [r.passed for r in results] == [True] * len(task.visible_tests)
    assert results[0].input == task.visible_tests[0].input and outputs_match(results[0].got, results[0].expected)


def test_run_examples_shows_what_a_wrong_solution_printed(tmp_path):
    task = TASKS["max-subarray-sum"]
    (tmp_path / "solution.py").write_text("print(0)")
    results = run_examples(task, tmp_path)
    assert [r.passed for r in results] == [False, False]
    assert results[0].reason == "wrong answer" and results[0].got == "0\n"


def test_run_examples_without_a_solution_fails_each_example_with_the_reason(tmp_path):
    results = run_examples(SUM, tmp_path)
    assert results and all(not r.passed and "no solution file solution.py" in r.reason for r in results)


@pytest.mark.parametrize("got, expected, same", [
    ("6\n", "6", True),
    ("a  \nb\t\n\n\n", "a\nb\n", True),
    ("a\r\nb\r\n", "a\nb", True),
    (" 6\n", "6\n", False),
    ("a\n\nb\n", "a\nb\n", False),
    ("YES\n", "yes\n", False),
])
def test_output_comparison_ignores_only_trailing_whitespace_and_newlines(got, expected, same):
    assert outputs_match(got, expected) is same
