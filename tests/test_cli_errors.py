"""Every command's bad input: one ``error: ...`` line on stderr naming what is wrong, the documented exit
code (1 failed, 2 usage; `rollout_dataset.cli` docstring), nothing on stdout claiming an error, no traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rollout_dataset.cli import main


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens here once the socket is closed


def _file(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# id -> (argv given tmp, expected exit code, text the error line must hold (given tmp))
CASES = {
    "validate-missing-path": (lambda t: ["validate", t / "nowhere"], 2, lambda t: f"{t / 'nowhere'}: no such file"),
    "validate-corrupt-json": (lambda t: ["validate", _file(t / "a" / "trace.json", "{bad")], 1,
                              lambda t: "1 failure(s) in 1 file(s)"),
    "show-missing-path": (lambda t: ["show", t / "nowhere"], 1, lambda t: f"{t / 'nowhere'}: no rollout.json"),
    "show-corrupt-json": (lambda t: ["show", _file(t / "a" / "rollout.json", "{bad").parent], 1,
                          lambda t: f"{t / 'a' / 'rollout.json'}: $: not valid JSON"),
    "build-missing-path": (lambda t: ["build", t / "nowhere", "--out", t / "ds"], 1, lambda t: f"{t / 'nowhere'}: not a folder"),
    "build-without-inputs": (lambda t: ["build", "--out", t / "ds"], 2, lambda t: "give at least one artifact folder"),
    "build-out-is-a-file": (lambda t: ["build", t, "--out", _file(t / "ds", "x")], 1, lambda t: f"{t}"),
    "push-without-repo": (lambda t: ["push", t], 2, lambda t: "give --repo org/name"),
    "push-missing-dataset": (lambda t: ["push", t / "nowhere", "--repo", "org/name"], 1, lambda t: f"{t / 'nowhere'}"),
    "compact-missing-folder": (lambda t: ["compact", t / "nowhere"], 1, lambda t: f"{t / 'nowhere'}: not a folder"),
    "serve-port-out-of-range": (lambda t: ["serve", "--port", "99999"], 2, lambda t: "127.0.0.1:99999: the port must be 0..65535"),
    "serve-missing-script": (lambda t: ["serve", "--port", "0", "--policy", "script", "--script", t / "nowhere.yaml"], 2,
                             lambda t: f"script file not found: {t / 'nowhere.yaml'}"),
    "serve-unknown-policy": (lambda t: ["serve", "--port", "0", "--policy", "nosuch"], 2, lambda t: "unknown policy 'nosuch'"),
    "serve-missing-tokenizer-path": (lambda t: ["serve", "--port", "0", "--tokenizer", t / "nowhere"], 2,
                                     lambda t: f"tokenizer path {t / 'nowhere'}: no such folder"),
    "proxy-bad-upstream-url": (lambda t: ["proxy", "--upstream", "ftp://host/v1", "--trace-dir", t], 2,
                               lambda t: "upstream URL 'ftp://host/v1' must look like http://HOST:PORT/v1"),
    "proxy-unset-key-variable": (lambda t: ["proxy", "--upstream", "http://127.0.0.1:9/v1", "--trace-dir", t,
                                            "--api-key-env", "ROLLOUT_TEST_NO_SUCH_VAR"], 2,
                                 lambda t: "the environment variable ROLLOUT_TEST_NO_SUCH_VAR is not set"),
    "proxy-trace-dir-is-a-file": (lambda t: ["proxy", "--upstream", "http://127.0.0.1:9/v1", "--trace-dir",
                                             _file(t / "traces", "x")], 1, lambda t: f"{t / 'traces'}"),
    "proxy-port-out-of-range": (lambda t: ["proxy", "--upstream", "http://127.0.0.1:9/v1", "--trace-dir", t,
                                           "--port", "70000"], 2, lambda t: "127.0.0.1:70000: the port must be"),
    "capture-unknown-env": (lambda t: ["capture", "--env", "chess", "--out-dir", t / "c"], 2,
                            lambda t: "unknown environment 'chess'; known: coding"),
    "capture-task-index-out-of-range": (lambda t: ["capture", "--task-index", "9999", "--out-dir", t / "c"], 2,
                                        lambda t: "task index 9999 is outside the task set; valid range: 0.."),
    "capture-corrupt-task-file": (lambda t: ["capture", "--tasks", _file(t / "tasks.jsonl", "{bad\n"), "--out-dir", t / "c"],
                                  2, lambda t: f"{t / 'tasks.jsonl'}:1: not valid JSON"),
    "capture-missing-task-file": (lambda t: ["capture", "--tasks", t / "nowhere.jsonl", "--out-dir", t / "c"], 2,
                                  lambda t: f"{t / 'nowhere.jsonl'}"),
    "capture-unknown-harness": (lambda t: ["capture", "--harness", "nosuch", "--out-dir", t / "c"], 2,
                                lambda t: "unknown --harness 'nosuch'"),
    "capture-missing-tokenizer-path": (lambda t: ["capture", "--tokenizer", t / "nowhere", "--out-dir", t / "c"], 1,
                                       lambda t: f"tokenizer path {t / 'nowhere'}: no such folder"),
    "batch-unknown-env": (lambda t: ["batch", "--smoke", "--env", "nope", "--out", t / "b"], 2,
                          lambda t: "unknown environment 'nope'"),
    "batch-corrupt-step-config": (lambda t: ["batch", "--smoke", "--step-config", _file(t / "s.toml", "x ["), "--out", t / "b"],
                                  2, lambda t: f"{t / 's.toml'}: not valid TOML"),
    "batch-corrupt-weights-json": (lambda t: ["batch", "--smoke", "--weights-json", _file(t / "w.json", "{bad"),
                                              "--out", t / "b"], 2, lambda t: f"{t / 'w.json'}: not valid JSON"),
    "batch-bad-seed-list": (lambda t: ["batch", "--seeds", "x-y", "--out", t / "b"], 2, lambda t: "--seeds: 'x-y'"),
    "batch-bad-env-option": (lambda t: ["batch", "--smoke", "--env-option", "foo", "--out", t / "b"], 2,
                             lambda t: "--env-option: 'foo' is not KEY=VALUE"),
}


def _error_lines(err: str) -> list[str]:
    """stderr without the log lines (``LEVEL logger: ...``)."""
    return [line for line in err.splitlines()
            if line.strip() and not line.startswith(("INFO ", "DEBUG ", "WARNING "))]


@pytest.mark.parametrize("case", sorted(CASES), ids=sorted(CASES))
def test_bad_input_is_one_error_line_on_stderr_with_its_exit_code(case, tmp_path, capsys, monkeypatch):
    argv, expected_code, expected_text = CASES[case]
    monkeypatch.delenv("PUSH_TO_DATASET", raising=False)
    code = main([str(a) for a in argv(tmp_path)])
    out, err = capsys.readouterr()
    lines = _error_lines(err)
    assert code == expected_code, (out, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert expected_text(tmp_path) in lines[0], lines[0]
    assert "Traceback" not in out + err and "error:" not in out


@pytest.mark.parametrize("argv", [["compact", "--target-size", "abc"], ["build", "--out"], ["show"],
                                  ["capture", "--area", "1,2,3"], ["proxy", "--trace-dir", "t"], ["nosuchcommand"]],
                         ids=["bad-flag-value", "flag-without-value", "missing-argument", "malformed-pair",
                              "missing-required-flag", "unknown-command"])
def test_a_usage_error_is_argparse_s_message_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    assert exited.value.code == 2
    assert "error: " in err.strip().splitlines()[-1] and "Traceback" not in err and out == ""


def test_an_unreachable_hub_endpoint_is_named_in_one_line_by_a_real_process(tmp_path):
    port = _closed_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "0", "HF_HOME": str(tmp_path / "hf"), "HF_TOKEN": "hf_dummy"}
    done = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "compact", "--repo", "org/name",
                           "--endpoint", f"http://127.0.0.1:{port}"], capture_output=True, text=True, timeout=120,
                          env=env)
    lines = _error_lines(done.stderr)
    assert done.returncode == 1, done.stderr
    assert len(lines) == 1 and lines[0].startswith(f"error: could not reach http://127.0.0.1:{port}/"), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_an_unreachable_model_server_fails_the_capture_naming_its_url(tmp_path, capsys):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    code = main(["capture", "--base-url", url, "--model", "m", "--out-dir", str(tmp_path / "c")])
    out, err = capsys.readouterr()
    lines = _error_lines(err)
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: ") and url in lines[0], err
    assert "Connection refused" in lines[0] and "Traceback" not in out + err


@pytest.fixture
def port_in_use():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    yield taken.getsockname()[1]
    taken.close()


@pytest.mark.parametrize("command", [["serve"], ["proxy", "--upstream", "http://127.0.0.1:9/v1"], ["view", "."]],
                         ids=["serve", "proxy", "view"])
def test_a_port_in_use_is_one_failure_with_one_line_naming_the_address(port_in_use, tmp_path, command, capsys):
    if command[0] == "view":
        command = ["view", str(Path(__file__).parent / "data" / "golden" / "coding_oracle")]
    elif command[0] == "proxy":
        command = [*command, "--trace-dir", str(tmp_path)]
    code = main([*command, "--port", str(port_in_use)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert len(err) == 1 and err[0].startswith("error: ") and f"127.0.0.1:{port_in_use}" in err[0]
    assert "address already in use" in err[0].lower() and err[0].endswith("(choose another --port or --host)")
    assert "Errno" not in err[0]


def test_an_audit_that_fails_on_its_first_rollout_prints_only_its_error(local_backend_thread, tmp_path, capsys):
    _file(tmp_path / "broken" / "rollout.json", "{bad")
    _file(tmp_path / "broken" / "summary.json", "{}")
    code = main(["audit", str(tmp_path), "--against", local_backend_thread.base_url, "--no-write"])
    out, err = capsys.readouterr()
    lines = _error_lines(err)
    assert code == 1, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err  # no progress line before it
