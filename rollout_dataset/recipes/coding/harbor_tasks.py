"""Harbor tasks in the coding environment: terminus-2's run, and the reward from the task's own verifier.

- `--harness terminus-2` (Harbor tasks only): Harbor runs terminus-2 on the task in the bubblewrap
  environment (`rollout_dataset.harbor.adapter.run_terminus`); the reward is what Harbor's verifier
  wrote; Harbor's ATIF trajectory is kept as `HARBOR_TRAJECTORY_FILE` and cross-checked against the
  trace (`crosscheck_trajectory`), any disagreement a finding in ``summary.json``'s ``harbor`` field;
- any other harness on a Harbor task: the harness works in its sandbox's working directory (the
  task's ``workdir``, ``/app`` by default, is that folder), then `verify_harbor_task` copies it into a
  fresh task root, adds ``tests/`` and runs ``tests/test.sh`` there as Harbor would;
- leakage: every line of 24+ characters of the task's ``tests/`` files that is not in the statement is
  searched for in every recorded request (`harbor_leak_needles`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Mapping

from rollout_dataset.files import read_regular_file

__all__ = ["INCOMPLETE", "marked_complete", "HARBOR_TRAJECTORY_FILE", "TERMINUS_HARNESS", "MIN_NEEDLE_CHARS", "harbor_leak_needles",
           "terminus_agent_kwargs", "verify_harbor_task", "read_reward", "crosscheck_trajectory"]

logger = logging.getLogger(__name__)

#: the artifact file holding Harbor's own ATIF trajectory of a terminus-2 rollout
HARBOR_TRAJECTORY_FILE = "harbor_trajectory.json"
#: the harness name
TERMINUS_HARNESS = "terminus-2"
#: the stop reason of a terminus-2 run that ended without marking the task complete (its tmux session
#: ended, its turn budget ran out, or it gave up): Harbor's verifier still scores what it left
INCOMPLETE = "ended_without_task_complete"
#: the context terminus-2 is told when the server's is not known (`--no-fit-context`, no /v1/models length)
UNKNOWN_CONTEXT_TOKENS = 32768
#: lines of tests/ shorter than this are not searched for (they occur anywhere)
MIN_NEEDLE_CHARS = 24
#: the largest reward file read (a verifier's reward.txt holds one number)
REWARD_FILE_MAX_BYTES = 65536


def harbor_leak_needles(statement: str, held_out_text: list[str]) -> list[dict[str, str]]:
    """The held-out lines of a Harbor task, as pseudo-tests for the leakage scan.

    Args:
        statement: what the agent was told.
        held_out_text: the text of the task's ``tests/`` files.

    Returns:
        ``[{"input": line, "output": ""}]``, each line once.
    """
    seen: dict[str, None] = {}
    for text in held_out_text:
        for line in text.splitlines():
            line = line.strip()
            if len(line) >= MIN_NEEDLE_CHARS and line not in statement:
                seen.setdefault(line)
    return [{"input": line, "output": ""} for line in seen]


def terminus_agent_kwargs(*, temperature: float, max_tokens: int, seed: int, context_tokens: int | None,
                          max_turns: int) -> dict[str, Any]:
    """terminus-2's kwargs: sampling it does not send itself, the context it must fit in, the turn budget.

    Returns:
        ``llm_call_kwargs`` (temperature, max_tokens, seed), ``model_info`` (Harbor requires it for a
        ``hosted_vllm/`` model; `UNKNOWN_CONTEXT_TOKENS` when the context is not known) and ``max_turns``.
    """
    return {"llm_call_kwargs": {"temperature": temperature, "max_tokens": int(max_tokens), "seed": int(seed)},
            "max_turns": int(max_turns),
            "model_info": {"max_input_tokens": int(context_tokens or UNKNOWN_CONTEXT_TOKENS),
                           "max_output_tokens": int(max_tokens), "input_cost_per_token": 0.0,
                           "output_cost_per_token": 0.0}}


def marked_complete(trajectory: Mapping[str, Any]) -> bool:
    """Whether terminus-2 marked the task complete (ATIF: a ``mark_task_complete`` tool call in a step)."""
    for step in trajectory.get("steps") or []:
        for call in step.get("tool_calls") or []:
            if isinstance(call, Mapping) and call.get("function_name") == "mark_task_complete":
                return True
    return False


def read_reward(logs_dir: Path) -> tuple[float | None, str | None]:
    """The reward a Harbor verifier wrote (``reward.txt``, else ``reward.json``'s ``reward``).

    Returns:
        ``(reward, None)``, or ``(None, why)`` when there is none or it is not a number.
    """
    text_file, json_file = logs_dir / "reward.txt", logs_dir / "reward.json"
    for file in (text_file, json_file):
        if file.is_symlink():  # read on the host, its target would be a host file
            return None, f"the verifier's {file.name} is a symlink to {os.readlink(file)!r}, not a file; refused"
    try:
        if text_file.is_file():
            return float(read_regular_file(text_file, REWARD_FILE_MAX_BYTES).decode("utf-8", errors="replace").strip()), None
        if json_file.is_file():
            value = json.loads(read_regular_file(json_file, REWARD_FILE_MAX_BYTES)).get("reward")
            return (float(value), None) if isinstance(value, (int, float)) else (None, "reward.json has no numeric reward")
    except (ValueError, OSError, AttributeError) as exc:
        return None, f"the verifier's reward file is not a number ({exc})"
    return None, "the verifier wrote no /logs/verifier/reward.txt or reward.json"


def verify_harbor_task(task_dir: Path, workdir: Path, harbor_fields: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """Run a Harbor task's ``tests/test.sh`` on the files a harness left in `workdir`.

    A fresh task root (`rollout_dataset.harbor.bwrap_root.TaskRoot`): the working files copied to the
    task's ``workdir`` (else its Dockerfile's ``WORKDIR``, else ``/app``), ``tests/`` to ``/tests``;
    ``bash /tests/test.sh`` runs with the Dockerfile's ``ENV`` values, the task's verifier timeout, no
    network; every process it started is killed after.

    Returns:
        ``(reward, None)``; ``(None, why)`` when the verifier could not give a reward; ``(0.0, why)`` when
        ``test.sh`` was killed by a signal (which only the code under test, or the kernel for its memory,
        can send inside the task root).
    """
    from rollout_dataset.harbor.bwrap_root import TIMEOUT_EXIT, TaskRoot
    from rollout_dataset.harbor.environments import read_dockerfile

    dockerfile = read_dockerfile(task_dir / "environment" / "Dockerfile")
    where = harbor_fields.get("workdir") or dockerfile.get("workdir") or "/app"
    root = TaskRoot(where, dockerfile.get("env") or {}, memory_mb=harbor_fields.get("memory_mb"))
    try:
        root.build()
        shutil.copytree(workdir, root.host_path(where), symlinks=True, dirs_exist_ok=True)
        shutil.copytree(task_dir / "tests", root.host_path("/tests"), dirs_exist_ok=True)
        code, output = root.run("bash /tests/test.sh", float(harbor_fields.get("verifier_timeout_sec") or 600.0))
        if code == TIMEOUT_EXIT:
            return None, f"the verifier timed out after {harbor_fields.get('verifier_timeout_sec')} s"
        if code < 0 or 128 < code <= 128 + 64:
            # Only what test.sh started shares its PID namespace: the code under test killed it (perhaps after
            # writing a reward), or the kernel did for its memory. Its reward file is not read; the run scores 0,
            # not null, so that sabotaging the verifier never beats failing it.
            signal_number = abs(code) if code < 0 else code - 128
            return 0.0, f"the verifier was killed by signal {signal_number}; its reward file was not read (scored 0)"
        try:
            logs = root.host_path("/logs/verifier")
        except PermissionError as exc:  # the verifier's run (the solution it ran) linked it out of the root
            return None, f"the verifier's reward folder {exc}; refused"
        return read_reward(logs)
    finally:
        root.close()


def crosscheck_trajectory(trajectory: Mapping[str, Any] | None, records: list[dict[str, Any]],
                          subagents: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Compare Harbor's ATIF trajectories with the proxy's trace: token ids, logprobs, step count.

    Every agent step carrying ``metrics.completion_token_ids``, of the main trajectory and of each
    subagent's (terminus-2's summarisation calls), is matched with a recorded call whose sampled ids
    are the same; its logprobs must equal the call's to 5 decimals. A step no call matches, and a call
    no step matches, are findings.

    Returns:
        ``{"agent_steps", "subagent_steps", "calls", "matched", "subagent_calls", "findings": [...]}``:
        ``subagent_calls`` maps each subagent (``summarization-1-summary``, ...) to the trace indices of
        its calls (the graph has no structural mark for them: terminus-2 sends no tools, so they are
        roots labelled ``agent`` like its main chain); ``findings`` is empty when they agree.
    """
    calls = [r for r in records if (r.get("response") or {}).get("choices")]
    if not trajectory:
        return {"agent_steps": 0, "subagent_steps": 0, "calls": len(calls), "matched": 0, "subagent_calls": {},
                "findings": ["no Harbor trajectory"]}
    pending: dict[tuple[int, ...], list[dict[str, Any]]] = {}
    for record in calls:
        pending.setdefault(tuple(record["response"]["choices"][0].get("token_ids") or ()), []).append(record)
    findings: list[str] = []
    counts = {"main": 0, "sub": 0}
    subagent_calls: dict[str, list[Any]] = {}
    matched = 0
    sources = [("main", "", trajectory), *(("sub", f"{name} ", doc) for name, doc in sorted((subagents or {}).items()))]
    for kind, label, doc in sources:
        for step in doc.get("steps") or []:
            metrics = step.get("metrics") or {}
            if step.get("source") != "agent" or not metrics.get("completion_token_ids"):
                continue
            counts[kind] += 1
            same = pending.get(tuple(metrics["completion_token_ids"])) or []
            if not same:
                findings.append(f"{label}step {step.get('step_id')}: no recorded call sampled its token ids")
                continue
            record = same.pop(0)
            if kind == "sub":
                subagent_calls.setdefault(label.strip(), []).append(record.get("index"))
            content = (record["response"]["choices"][0].get("logprobs") or {}).get("content") or []
            theirs = metrics.get("logprobs")
            if theirs is not None and content and [round(float(x), 5) for x in theirs] != \
                    [round(float(c.get("logprob")), 5) for c in content]:
                findings.append(f"{label}step {step.get('step_id')}: logprobs differ from call {record.get('index')}")
                continue
            matched += 1
    unmatched = sum(len(v) for v in pending.values())
    if unmatched:
        findings.append(f"{unmatched} recorded call(s) match no trajectory step")
    return {"agent_steps": counts["main"], "subagent_steps": counts["sub"], "calls": len(calls), "matched": matched,
            "subagent_calls": subagent_calls, "findings": findings}
