"""The online loop over the session API (docs/session-api.md, "Online GRPO"): TRL's ``rollout_func``
runs the built-in agent, unmodified and as its own process, through the proxy per prompt and returns
each session's sequence; verl's and SkyRL's adapters read the same API documents.

The TRL run itself is opt-in (`trl` marker; TRL_PYTHON names a Python with trl 1.16 and torch): a tiny
random model trains one GRPO step on those rollouts.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rollout_dataset.backend import run_backend_in_thread
from rollout_dataset.builder import build
from rollout_dataset.capture.session_artifacts import write_session_artifacts
from rollout_dataset.online.agent_loops import main_sequence, skyrl_generator_output, verl_agent_loop_fields
from rollout_dataset.online.trl import SessionRollouts, builtin_agent_command, session_reward
from rollout_dataset.proxy import CaptureProxy
from rollout_dataset.session_client import SessionClient

REPO = Path(__file__).resolve().parents[1]
TOKEN = "online-test-token"
STEPS = [{"name": "write_file", "arguments": {"path": "solution.py", "content": "print(3)\n"}},
         {"name": "submit", "arguments": {}}]
PROMPTS = ["Add two numbers.", "Add two numbers.", "Print three.", "Print three."]  # TRL repeats each prompt


def score(prompt, document, output):
    """A reward the tests can predict: 1.0 for the prompt about three, else 0.0."""
    return 1.0 if "three" in prompt else 0.0


@pytest.fixture
def proxy(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with run_backend_in_thread(policy="script", script={"steps": STEPS, "final": "Done."}) as backend, \
            CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path / "traces", session_api=True,
                         session_api_token=TOKEN) as running:
        running.harness_env = env  # type: ignore[attr-defined]
        yield running


def test_the_rollout_func_returns_one_aligned_sequence_per_prompt_and_seals_each_session(proxy, tmp_path):
    rollouts = SessionRollouts(proxy.base_url, token=TOKEN, command=builtin_agent_command(), score=score,
                               concurrency=2, env=proxy.harness_env)
    out = rollouts(PROMPTS, trainer=None)
    assert set(out) == {"prompt_ids", "completion_ids", "logprobs", "env_mask", "session_id", "session_reward"}
    assert all(len(values) == len(PROMPTS) for values in out.values())
    for completion, logprobs, mask in zip(out["completion_ids"], out["logprobs"], out["env_mask"]):
        assert len(completion) == len(logprobs) == len(mask) and sum(mask) > 0
        assert all(lp < 0 for lp, m in zip(logprobs, mask) if m) and set(mask) == {0, 1}  # tool output: 0
    assert out["session_reward"] == [0.0, 0.0, 1.0, 1.0]
    assert session_reward(["c"] * 4, session_reward=out["session_reward"]) == [0.0, 0.0, 1.0, 1.0]
    assert len(set(out["session_id"])) == 4
    with SessionClient(proxy.base_url, token=TOKEN) as api:
        states = {s["session"]: s["state"] for s in api.sessions()}
    assert all(states[s] == "sealed" for s in out["session_id"])


def test_what_the_trainer_got_is_the_row_the_dataset_holds_for_its_session(proxy, tmp_path):
    rollouts = SessionRollouts(proxy.base_url, token=TOKEN, score=score, concurrency=2, env=proxy.harness_env)
    out = rollouts(PROMPTS[2:], trainer=None)
    for session in out["session_id"]:
        write_session_artifacts(tmp_path / "traces", session, tmp_path / "runs" / session)
    build([tmp_path / "runs"], tmp_path / "ds")
    rows = pq.read_table(glob.glob(str(tmp_path / "ds" / "data" / "sequences" / "*.parquet"))).to_pylist()
    trained = {(r["rollout_id"], tuple(r["input_ids"])): r for r in rows if r["trainable"]}
    for session, prompt, completion, mask in zip(out["session_id"], out["prompt_ids"], out["completion_ids"],
                                                 out["env_mask"]):
        row = trained[(session, tuple(prompt + completion))]
        assert row["loss_mask"][row["prompt_len"]:] == mask and row["env_reward"] == 1.0


def test_a_harness_that_makes_no_call_is_named_with_its_output(proxy):
    rollouts = SessionRollouts(proxy.base_url, token=TOKEN, command=[sys.executable, "-c", "print('nothing done')"])
    with pytest.raises(RuntimeError, match="made no model call.*nothing done"):
        rollouts(["x"])


def test_verl_and_skyrl_outputs_are_the_session_s_main_sequence(proxy):
    rollouts = SessionRollouts(proxy.base_url, token=TOKEN, score=score, concurrency=2, env=proxy.harness_env)
    out = rollouts(PROMPTS[1:3])
    with SessionClient(proxy.base_url, token=TOKEN) as api:
        documents = [api.sequences(s) for s in out["session_id"]]
    verl = verl_agent_loop_fields(documents[0])
    assert verl["prompt_ids"] == out["prompt_ids"][0] and verl["response_ids"] == out["completion_ids"][0]
    assert verl["response_mask"] == out["env_mask"][0] and verl["response_logprobs"] == out["logprobs"][0]
    assert verl["reward_score"] == 0.0 and verl["num_turns"] == 2 and verl["extra_fields"]["trainable"]
    skyrl = skyrl_generator_output(documents)
    assert skyrl["prompt_token_ids"] == out["prompt_ids"] and skyrl["response_ids"] == out["completion_ids"]
    assert skyrl["loss_masks"] == out["env_mask"] and skyrl["rollout_logprobs"] == out["logprobs"]
    assert skyrl["rewards"] == [0.0, 1.0] and skyrl["stop_reasons"] == ["tool_calls", "tool_calls"]
    assert skyrl["rollout_metrics"] == {"sessions": 2, "sessions_without_reward": 0, "sessions_not_trainable": 0}


def test_a_session_without_a_trainable_sequence_is_given_with_nothing_to_train():
    untrainable = {"session": "s", "reward": None, "sequences": [
        {"sequence_index": 0, "role": "agent", "trainable": False, "input_ids": [1, 2, 3], "loss_mask": [0, 1, 1],
         "logprobs": [0.0, -1.0, -2.0], "prompt_len": 1, "n_turns": 1, "n_trainable": 2,
         "finish_reasons": ["length"]}]}
    assert main_sequence(untrainable)[1] is False
    fields = verl_agent_loop_fields(untrainable)
    assert fields["response_mask"] == [0, 0] and fields["response_ids"] == [2, 3]
    assert skyrl_generator_output([untrainable])["rollout_metrics"]["sessions_not_trainable"] == 1
    with pytest.raises(ValueError, match="no sequence"):
        verl_agent_loop_fields({"session": "e", "sequences": []})


TRL_PYTHON = os.environ.get("TRL_PYTHON")
_TRL_SCRIPT = textwrap.dedent("""
    import itertools, json, sys
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
    from trl import GRPOConfig, GRPOTrainer
    from rollout_dataset.online.trl import SessionRollouts, builtin_agent_command, session_reward

    proxy_url, token, tokenizer_dir, harness_python, out = sys.argv[1:6]
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                         max_position_embeddings=4096))
    before = [p.detach().clone() for p in model.parameters()]
    order = itertools.count()  # a reward distinct within every group: GRPO's advantages are not all zero
    rollouts = SessionRollouts(proxy_url, token=token, command=builtin_agent_command(harness_python),
                               score=lambda prompt, document, output: float(next(order)), concurrency=2)
    args = GRPOConfig(output_dir=out, per_device_train_batch_size=4, num_generations=2, max_steps=1,
                      learning_rate=1e-2, logging_steps=1, report_to=[], use_cpu=True, save_strategy="no",
                      max_completion_length=4096, beta=0.0)
    trainer = GRPOTrainer(model=model, reward_funcs=[session_reward], args=args, processing_class=tokenizer,
                          train_dataset=Dataset.from_dict({"prompt": ["Add two numbers.", "Print three."] * 2}),
                          rollout_func=rollouts)
    trainer.train()
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    print(json.dumps({"sessions": len(rollouts.sessions), "changed": changed,
                      "log": [h for h in trainer.state.log_history if "loss" in h][:1]}))
""")


def _httpx_only(folder: Path) -> Path:
    """A folder holding httpx and its dependencies only (links into this venv), for a trainer's venv without httpx."""
    import anyio
    import certifi
    import h11
    import httpcore
    import httpx
    import idna
    import sniffio

    folder.mkdir()
    for module in (httpx, httpcore, h11, anyio, sniffio, idna, certifi):
        (folder / module.__name__).symlink_to(Path(module.__file__).parent)
    return folder


@pytest.mark.trl
@pytest.mark.skipif(not TRL_PYTHON, reason="opt-in: TRL_PYTHON = a Python with trl 1.16 and torch")
def test_trl_grpo_trains_a_step_on_sessions_pulled_from_the_api(proxy, tmp_path):
    from rollout_dataset.tokenizers import BUILTIN_TOKENIZER_DIR

    path = os.pathsep.join([str(REPO), str(_httpx_only(tmp_path / "httpx-only"))])
    env = {**proxy.harness_env, "PYTHONPATH": path, "TRL_EXPERIMENTAL_SILENCE": "1"}
    done = subprocess.run([TRL_PYTHON, "-c", _TRL_SCRIPT, proxy.base_url, TOKEN, str(BUILTIN_TOKENIZER_DIR),
                           sys.executable, str(tmp_path / "out")], capture_output=True, text=True, timeout=900,
                          cwd=tmp_path, env={**env, "HARNESS_PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["sessions"] == 4 and result["changed"] and result["log"], result


@pytest.mark.harness
def test_mini_swe_agent_runs_unmodified_as_the_rollout_s_harness(tmp_path):
    from rollout_dataset.harness.presets import find_mini

    steps = [{"text": "Writing it.", "tool_calls": [{"name": "bash", "arguments": {
                 "command": "printf 'print(3)\\n' > solution.py"}}]},
             {"text": "Done.", "tool_calls": [{"name": "bash", "arguments": {
                 "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}]}]
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "MSWEA_CONFIGURED": "true", "MSWEA_COST_TRACKING": "ignore_errors", "MSWEA_SILENT_STARTUP": "1"}
    command = [find_mini(), "-m", "openai/{model}", "-c", "mini.yaml", "-c", "model.model_kwargs.api_base={base_url}",
               "-c", "model.model_kwargs.api_key=unused", "-c", "agent.step_limit=4", "-l", "0", "-t", "{prompt}",
               "--yolo", "--exit-immediately", "-o", "{workdir}/trajectory.json"]
    with run_backend_in_thread(policy="script", script={"steps": steps, "final": "Done."}) as backend, \
            CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path / "traces", session_api=True,
                         session_api_token=TOKEN) as proxy:
        rollouts = SessionRollouts(proxy.base_url, token=TOKEN, command=command, score=score, env=env)
        out = rollouts(["Print three."])
    assert out["session_reward"] == [1.0] and sum(out["env_mask"][0]) > 0
    assert len(out["completion_ids"][0]) == len(out["logprobs"][0]) == len(out["env_mask"][0])
