"""Guardrails of a capture: out-of-range index, first-call failure, timeout, leakage, secrets, CLI."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from hub_fixture import FakeHub
from proxy_fakes import serve
from rollout_dataset.capture import capture_rollout
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.server_runner import serve_in_thread
from rollout_dataset.cli import main as cli_main
from rollout_dataset.errors import TaskIndexError, UpstreamStatusError
from rollout_dataset.schema.check import validate_path
from rollout_dataset.tasks import load_tasks

REPO = Path(__file__).resolve().parents[1]
SECRET = "sk-rollout-SECRET-4242-do-not-leak"

# A stand-in "CLI agent": one chat call through the proxy, then whatever the flags say.
AGENT = r'''
import json, os, sys, time, urllib.request
base, model = sys.argv[1], sys.argv[2]
statement = open(os.environ["ROLLOUT_TASK_FILE"]).read()
extra = os.environ.get("AGENT_EXTRA_TEXT", "")
body = {"model": model, "messages": [{"role": "user", "content": statement + extra}], "max_tokens": 64}
req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json",
                                      "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
try:
    urllib.request.urlopen(req, timeout=30).read()
except Exception as exc:
    print("call failed:", exc, file=sys.stderr)
    while os.environ.get("AGENT_RETRY_FOREVER"):
        time.sleep(0.2)
if os.environ.get("AGENT_SOLUTION"):
    open("solution.py", "w").write(os.environ["AGENT_SOLUTION"])
if os.environ.get("AGENT_NOTES"):
    open("notes.txt", "w").write(os.environ["AGENT_NOTES"])
time.sleep(float(os.environ.get("AGENT_SLEEP", "0")))
'''


@pytest.fixture(scope="module")
def agent_cmd(tmp_path_factory):
    script = tmp_path_factory.mktemp("agent") / "agent.py"
    script.write_text(AGENT)
    return f"cmd:{sys.executable} {script} {{base_url}} {{model}}"


@contextlib.asynccontextmanager
async def _failing_server(status: int):
    async def fail(request):
        return JSONResponse({"error": {"message": "engine exploded", "type": "InternalServerError",
                                       "param": None, "code": status}}, status_code=status)

    async def models(request):
        return JSONResponse({"object": "list", "data": [{"id": "broken", "object": "model"}]})

    app = Starlette(routes=[Route("/v1/chat/completions", fail, methods=["POST"]),
                            Route("/v1/models", models, methods=["GET"])])
    async with serve(app) as root:
        yield root + "/v1"


@pytest.fixture(scope="module")
def failing_url():
    with serve_in_thread(lambda: _failing_server(500), name="fail500") as url:
        yield url


def test_an_out_of_range_task_index_fails_at_once_naming_the_valid_range(tmp_path):
    n = len(load_tasks("builtin", n_prompts=64, seed=0))
    with pytest.raises(TaskIndexError, match=rf"0\.\.{n - 1}"):
        capture_rollout(CaptureConfig(out_dir=tmp_path / "out", task_index=n))
    assert not (tmp_path / "out").exists()


def test_the_script_has_the_same_flags_and_exit_code_for_a_bad_index(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "capture_scripts/capture_trace.py"), "--task-index", "500",
                           "--out-dir", str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "500" in proc.stderr and "0.." in proc.stderr


def test_a_first_call_500_fails_fast_naming_status_and_url(tmp_path, failing_url):
    with pytest.raises(UpstreamStatusError) as info:
        capture_rollout(CaptureConfig(out_dir=tmp_path, base_url=failing_url, timeout_s=60))
    assert info.value.status == 500 and info.value.url == failing_url + "/chat/completions"
    assert "HTTP 500" in str(info.value) and failing_url in str(info.value)


def test_an_external_harness_that_retries_is_stopped_at_the_first_500(tmp_path, failing_url, agent_cmd, monkeypatch):
    monkeypatch.setenv("AGENT_RETRY_FOREVER", "1")
    with pytest.raises(UpstreamStatusError) as info:
        capture_rollout(CaptureConfig(out_dir=tmp_path / "out", base_url=failing_url, harness=agent_cmd, timeout_s=120))
    assert info.value.status == 500 and info.value.url == failing_url + "/chat/completions"


def test_the_cli_exits_non_zero_naming_status_and_url(tmp_path, failing_url, capsys):
    code = cli_main(["capture", "--base-url", failing_url, "--out-dir", str(tmp_path), "--timeout-s", "60"])
    assert code == 1
    assert f"HTTP 500 for {failing_url}/chat/completions" in capsys.readouterr().err


def test_a_timed_out_rollout_keeps_its_partial_capture(tmp_path, agent_cmd, monkeypatch):
    task = load_tasks("builtin", seed=0)[1]
    monkeypatch.setenv("AGENT_SOLUTION", task.reference_solution)
    monkeypatch.setenv("AGENT_SLEEP", "60")
    out = tmp_path / "out"
    # the 60 s sleep is what times out; 8 s leaves the agent's one call room on a loaded 2-core machine
    result = capture_rollout(CaptureConfig(out_dir=out, task_index=1, harness=agent_cmd, timeout_s=8))
    summary = result.summary
    assert summary["timed_out"] is True and summary["stop_reason"] == "timeout"
    assert summary["captured_calls"] == 1 and summary["env_reward"] == 1.0
    assert result.ok and validate_path(out) == []
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["timed_out"] is True and len(json.loads((out / "trace.json").read_text())["calls"]) == 1


def test_a_planted_held_out_leak_is_an_error_in_the_summary_and_a_non_zero_exit(tmp_path, agent_cmd, monkeypatch,
                                                                                 capsys):
    task = load_tasks("builtin", seed=0)[0]
    planted = next(t.input.strip() for t in task.held_out_tests if len(t.input.strip()) >= 6)
    monkeypatch.setenv("AGENT_NOTES", f"found it: {planted}\n")
    code = cli_main(["capture", "--task-index", "0", "--harness", agent_cmd, "--out-dir", str(tmp_path / "out"),
                     "--timeout-s", "60"])
    assert code == 1 and "leakage" in capsys.readouterr().err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["errors"][0]["kind"] == "leakage"
    assert {"field": "input", "where": "workdir:notes.txt"}.items() <= summary["leakage"]["hits"][0].items()


def test_a_distinctive_api_key_appears_in_no_artifact(tmp_path, agent_cmd, monkeypatch):
    # The harness gets the key and even echoes it into its prompt; nothing on disk may hold it.
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("AGENT_EXTRA_TEXT", f"\n(my key is {SECRET})")
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "ext", harness=agent_cmd, timeout_s=60))
    builtin = capture_rollout(CaptureConfig(out_dir=tmp_path / "builtin", timeout_s=60, api_key=SECRET))
    assert result.summary["captured_calls"] == 1 and builtin.summary["captured_calls"] >= 3
    assert builtin.ok and [e["kind"] for e in result.errors] == ["secret_redacted"]
    # The redacted copy is still a valid, chained and sealed trace (redaction re-seals it).
    assert validate_path(tmp_path / "ext") == []
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) >= 16
    assert not [str(p) for p in files if SECRET in p.read_text(errors="replace")]


def _push_env(hub: FakeHub, tmp_path: Path, token: str) -> dict[str, str]:
    """A subprocess environment with PUSH_TO_DATASET=org/rollouts pointing at the loopback Hub."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PUSH_", "HUGGINGFACE"))}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"), HF_TOKEN=token, PUSH_TO_DATASET="org/rollouts",
               HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    return env


def test_push_to_dataset_uploads_the_capture_and_the_token_stays_out_of_the_artifacts(tmp_path):
    token = "hf_captureTokenNeverOnDisk12345"
    with FakeHub(token=token) as hub:
        env = _push_env(hub, tmp_path, token)
        # No model call is needed to prove the push: an external harness that just writes the solution
        # (copied from a file exposed read-only to its sandbox with --sandbox-ro).
        task = load_tasks("builtin", seed=0)[4]
        (tmp_path / "ref.py").write_text(task.reference_solution)
        proc = subprocess.run([sys.executable, str(REPO / "capture_scripts/capture_trace.py"), "--task-index", "4",
                               "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--tokenizer", "builtin",
                               "--harness", f"cmd:cp {tmp_path / 'ref.py'} solution.py",
                               "--sandbox-ro", str(tmp_path / "ref.py"),
                               "--out-dir", "art", "--timeout-s", "60"],
                              env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        _, files = hub.repos["org/rollouts"].head()
    assert "README.md" in files and any(p.startswith("data/summary/") for p in files)
    assert token not in proc.stdout + proc.stderr
    assert not [p for p in (tmp_path / "art").rglob("*") if p.is_file() and token in p.read_text(errors="replace")]


def test_capture_rollout_pushes_nothing_even_with_push_to_dataset_set(tmp_path):
    token = "hf_libraryTokenNeverUsed12345"
    with FakeHub(token=token) as hub:
        env = _push_env(hub, tmp_path, token)
        task = load_tasks("builtin", seed=0)[4]
        (tmp_path / "ref.py").write_text(task.reference_solution)
        code = ("import sys; from rollout_dataset.capture import capture_rollout; from rollout_dataset.recipes.coding import CaptureConfig; "
                "r = capture_rollout(CaptureConfig(out_dir='art', task_index=4, base_url='http://127.0.0.1:9/v1', "
                "model='m', tokenizer='builtin', timeout_s=60, harness=sys.argv[1], sandbox_ro_paths=(sys.argv[2],))); "
                "print('errors', r.errors)")
        proc = subprocess.run([sys.executable, "-c", code, f"cmd:cp {tmp_path / 'ref.py'} solution.py",
                               str(tmp_path / "ref.py")], env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "errors []" in proc.stdout, proc.stdout[-2000:]
        assert hub.repos == {}, "the library pushes only to an explicit push_repo; PUSH_TO_DATASET is the CLI's"
    assert (tmp_path / "art" / "summary.json").is_file()


def test_a_remote_models_name_is_not_fetched_from_the_hub_as_a_tokenizer(tmp_path, monkeypatch):
    import rollout_dataset.tokenizers as tokenizers_module
    from rollout_dataset.backend import run_backend_in_thread
    from rollout_dataset.recipes.coding.policy import make_oracle
    from rollout_dataset.tokenizers import load_tokenizer

    name = "example-org/not-cached-model"
    asked = []
    real = tokenizers_module.load_tokenizer
    with run_backend_in_thread(tokenizer=load_tokenizer("builtin"), policy=make_oracle(),
                               served_model_name=name) as backend:
        monkeypatch.setattr(tokenizers_module, "load_tokenizer", lambda spec="builtin": asked.append(str(spec)) or real(spec))
        result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", base_url=backend.base_url, timeout_s=60))
    assert result.summary["model"] == name and result.summary["captured_calls"] >= 1
    assert name not in asked, "the model name is tried from the local cache only; --tokenizer may download"
