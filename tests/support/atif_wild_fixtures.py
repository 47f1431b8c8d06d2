"""The ATIF fixtures of tests/data/atif_wild: project-written trajectories with the shapes of files others publish.

Each file is written here, by this project, with its own task, commands, outputs and ids; none is
copied. They have the shapes the public files `bench/atif_import.py --wild` measures have (their
sources are recorded as repo@commit in that bench's results, not committed here):

- `terminus-2/`: ATIF-v1.5 terminus-2 runs. A run whose context was summarised (token ids and
  logprobs on every model step; a system step whose observation refers to the three summarisation
  subagent files, then a user prompt that restarts the chat), those three subagent files
  (questions, answers, summary; copied context steps), a linear-history run whose summarisation
  continues in a `cont-1` file (`continued_trajectory_ref`), and a run whose commands time out.
- `openhands/`: an ATIF-v1.5 OpenHands run: tool definitions, no model name, system steps,
  results naming their calls.
- `mini-swe-agent/`: ATIF-v1.7 as Harbor's mini-swe-agent converter writes it (empty messages,
  `bash` calls, cached tokens, usage details in `extra`, `llm_call_count`, `notes`).
- `qa-runner/`: ATIF-v1.7 of a browser QA runner: `trajectory_id`, reasoning, results naming
  their calls, an image part, `extra` on the document and on `final_metrics`.

Run `python tests/support/atif_wild_fixtures.py` to write them again (tests check they are current).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).resolve().parents[1] / "data" / "atif_wild"
MODEL = "openai/gpt-4o"
SUMMARISED = "terminus-2/countdown-summarised.atif.json"
_SUMMARISED_SESSION = "countdown-summarised-0001"
_LINEAR_SESSION = "countdown-linear-0002"


def _ids(start: int, n: int) -> list[int]:
    return [start + (k * 37) % 997 for k in range(n)]


def _logprobs(seed: int, n: int) -> list[float]:
    """Negative logprobs that float32 does not hold exactly (so a round trip exercises the normalisation)."""
    return [-round(0.013 + ((seed + k) * 7 % 13) * 0.0417, 4) for k in range(n)]


def _tokens(prompt: list[int], completion_start: int, n_completion: int, cost: float,
            cached: bool = False) -> dict[str, Any]:
    completion = _ids(completion_start, n_completion)
    metrics: dict[str, Any] = {"prompt_tokens": len(prompt), "completion_tokens": n_completion}
    if cached:
        metrics["cached_tokens"] = 0
    metrics.update(cost_usd=cost, prompt_token_ids=prompt, completion_token_ids=completion,
                   logprobs=_logprobs(completion_start, n_completion))
    return metrics


def _final(steps: list[dict[str, Any]], cached: bool = True) -> dict[str, Any]:
    metrics = [s["metrics"] for s in steps if "metrics" in s]
    out: dict[str, Any] = {"total_prompt_tokens": sum(m.get("prompt_tokens", 0) for m in metrics),
                           "total_completion_tokens": sum(m.get("completion_tokens", 0) for m in metrics)}
    if cached:
        out["total_cached_tokens"] = sum(m.get("cached_tokens", 0) for m in metrics)
    out["total_cost_usd"] = round(sum(m.get("cost_usd", 0) for m in metrics), 6)
    return out


def _keys(call_id: str, keys: str, duration: float = 0.2) -> dict[str, Any]:
    return {"tool_call_id": call_id, "function_name": "send_keys", "arguments": {"keystrokes": keys, "duration": duration}}


def _agent(step_id: int, message: str, **fields: Any) -> dict[str, Any]:
    return {"step_id": step_id, "source": "agent", "model_name": MODEL, "message": message, **fields}


def _result(content: Any, call_id: str | None = None) -> dict[str, Any]:
    return {"observation": {"results": [({"source_call_id": call_id} if call_id else {}) | {"content": content}]}}


TASK = ("Create /srv/countdown.txt holding the numbers 3, 2, 1 and the word liftoff, one per line, "
        "then check it with cat.")
QUESTIONS = ("You take over a terminal task from another agent. Before reading its summary, list the "
             "questions you need answered about the state of the machine.")
QUESTIONS_ANSWER = "1. Does /srv/countdown.txt exist yet?\n2. Which lines does it hold?\n3. Was the result checked?"
SUMMARY_REQUEST = "Summarise what you have done so far on the task, so that another agent can continue it."
SUMMARY = ("Started a shell in /srv. Wrote 3 and 2 to /srv/countdown.txt with printf. The lines 1 and "
           "liftoff are still missing, and nothing was checked yet.")
ANSWERS_REQUEST = "Another agent will continue your work. Answer its questions:\n" + QUESTIONS_ANSWER
ANSWERS = "1. Yes.\n2. Two lines: 3 and 2.\n3. No, cat has not been run on it."
RESTART = ("You continue a task another agent started.\nTask: " + TASK + "\nSummary of its work: " + SUMMARY
           + "\nIts answers to your questions:\n" + ANSWERS)
_NOTE = {"note": "context copied from the parent trajectory before summarisation"}


def _pre_summary(with_tokens: bool) -> list[dict[str, Any]]:
    """The task and the three model steps before the context was summarised."""
    p1 = _ids(300, 48)
    p2 = p1 + _ids(1200, 14) + _ids(40, 6)
    p3 = p2 + _ids(1300, 16) + _ids(60, 9)
    steps = [{"step_id": 1, "source": "user", "message": TASK},
             _agent(2, "Going to /srv first.", tool_calls=[_keys("call_a1", "cd /srv\n")], **_result("root@box:/srv#")),
             _agent(3, "Writing the first two lines.",
                    tool_calls=[_keys("call_a2", "printf '3\\n' > countdown.txt\n"),
                                _keys("call_a3", "printf '2\\n' >> countdown.txt\n")],
                    **_result("root@box:/srv# printf '3\\n' > countdown.txt\nroot@box:/srv# printf '2\\n' >> countdown.txt")),
             _agent(4, "Two lines are written; the context is long, summarising.",
                    tool_calls=[_keys("call_a4", "wc -l countdown.txt\n")], **_result("2 countdown.txt"))]
    for step, prompt, start, n, cost in ((steps[1], p1, 1200, 14, 0.00031), (steps[2], p2, 1300, 16, 0.00042),
                                         (steps[3], p3, 1400, 11, 0.00051)):
        step["metrics"] = _tokens(prompt, start, n, cost) if with_tokens else \
            {"prompt_tokens": len(prompt), "completion_tokens": n, "cost_usd": cost}
    return steps


def _refs(session: str, stem: str) -> dict[str, Any]:
    refs = [(f"{session}-summarization-1-summary", "summary", "summary of the first three steps"),
            (f"{session}-summarization-1-questions", "questions", "questions of the agent that takes over"),
            (f"{session}-summarization-1-summary", "answers", "answers to those questions")]
    return {"step_id": 5, "source": "system", "message": "The context was summarised by three subagent calls.",
            "observation": {"results": [{"subagent_trajectory_ref": [
                {"session_id": sid, "trajectory_path": f"{stem}.summarization-1-{kind}.atif.json",
                 "extra": {"summary": text}} for sid, kind, text in refs]}]}}


def _document(session: str, name: str, steps: list[dict[str, Any]], extra: dict[str, Any],
              **top: Any) -> dict[str, Any]:
    return {"schema_version": "ATIF-v1.5", "session_id": session,
            "agent": {"name": name, "version": "2.0.0", "model_name": MODEL, "extra": extra},
            "steps": steps, "final_metrics": _final(steps), **top}


def terminus_files() -> dict[str, dict[str, Any]]:
    """The terminus-2 trajectories, by path under the fixture folder."""
    run_extra = {"parser": "json", "temperature": 0.6}
    restart = _ids(5000, 120)
    after = restart + _ids(2100, 18) + _ids(80, 5)
    main = _pre_summary(True) + [
        _refs(_SUMMARISED_SESSION, "countdown-summarised"),
        {"step_id": 6, "source": "user", "message": RESTART},
        _agent(7, "Adding the last two lines.", tool_calls=[_keys("call_b1", "printf '1\\nliftoff\\n' >> countdown.txt\n")],
               **_result("root@box:/srv#"), metrics=_tokens(restart, 2100, 18, 0.00093)),
        _agent(8, "Checking the file.", tool_calls=[_keys("call_b2", "cat countdown.txt\n")],
               **_result("3\n2\n1\nliftoff"), metrics=_tokens(after, 2200, 9, 0.00061)),
        _agent(9, "The file holds the four lines; done.",
               tool_calls=[{"tool_call_id": "call_b3_task_complete", "function_name": "mark_task_complete", "arguments": {}}],
               **_result("Task marked complete."), metrics=_tokens(after + _ids(2200, 9) + _ids(90, 4), 2300, 7, 0.00066))]
    child = {"parent_session_id": _SUMMARISED_SESSION, "summarization_index": 1}
    copied = [dict(s, is_copied_context=True) | ({"extra": _NOTE} if s["source"] == "agent" else {})
              for s in _pre_summary(False)[:3]]
    for step in copied:
        step.pop("metrics", None)
    questions = [{"step_id": 1, "source": "user", "message": QUESTIONS},
                 _agent(2, QUESTIONS_ANSWER, metrics=_tokens(_ids(7000, 40), 7100, 22, 0.00019, cached=True))]
    summary = copied + [{"step_id": 4, "source": "user", "message": SUMMARY_REQUEST},
                        _agent(5, SUMMARY, metrics=_tokens(_ids(7200, 90), 7300, 31, 0.00044, cached=True))]
    answers = copied + [{"step_id": 4, "source": "user", "message": SUMMARY_REQUEST, "is_copied_context": True},
                        _agent(5, SUMMARY, is_copied_context=True, extra={"note": "the summary this subagent wrote"}),
                        {"step_id": 6, "source": "user", "message": ANSWERS_REQUEST},
                        _agent(7, ANSWERS, metrics=_tokens(_ids(7400, 130), 7500, 19, 0.00052, cached=True))]
    linear = [dict(s) for s in _pre_summary(False)] + [_refs(_LINEAR_SESSION, "countdown-linear")]
    for step in linear[1:4]:  # linear history: plain messages, the terminal output as an observation
        step.pop("tool_calls")
    cont_copied = [{"step_id": 1, "source": "user", "message": TASK, "is_copied_context": True},
                   {"step_id": 2, "source": "user", "message": QUESTIONS, "is_copied_context": True},
                   _agent(3, QUESTIONS_ANSWER, is_copied_context=True),
                   {"step_id": 4, "source": "user", "message": RESTART, "is_copied_context": True}]
    cont = cont_copied + [
        _agent(5, "printf '1\\nliftoff\\n' >> /srv/countdown.txt", **_result("root@box:/srv#"),
               metrics={"prompt_tokens": 164, "completion_tokens": 18, "cost_usd": 0.00093}),
        _agent(6, "cat /srv/countdown.txt", **_result("3\n2\n1\nliftoff"),
               metrics={"prompt_tokens": 187, "completion_tokens": 9, "cost_usd": 0.00061}),
        _agent(7, "The countdown file is complete.", **_result("Are you sure? Reply again to mark the task complete."),
               metrics={"prompt_tokens": 205, "completion_tokens": 7, "cost_usd": 0.00066}),
        _agent(8, "Yes, it is complete.", **_result("Task marked complete."),
               metrics={"prompt_tokens": 230, "completion_tokens": 6, "cost_usd": 0.00058})]
    sleep = _ids(600, 52)
    timeout = [{"step_id": 1, "source": "user", "message": "Run the nightly backup script /opt/backup.sh and report its exit code."},
               _agent(2, "Starting the backup.", tool_calls=[_keys("call_t1", "/opt/backup.sh; echo rc=$?\n", 1.0)],
                      **_result("root@box:~# /opt/backup.sh; echo rc=$?\ncopying 1 of 40000 files"),
                      metrics=_tokens(sleep, 2600, 12, 0.00028)),
               _agent(3, "Still copying; waiting.", tool_calls=[_keys("call_t2", "", 60.0)],
                      **_result("[command timed out after 60.0 seconds]"),
                      metrics=_tokens(sleep + _ids(2600, 12) + _ids(70, 9), 2700, 8, 0.00033)),
               _agent(4, "Still copying; waiting.", tool_calls=[_keys("call_t3", "", 60.0)],
                      **_result("[command timed out after 60.0 seconds]"),
                      metrics=_tokens(sleep + _ids(2600, 12) + _ids(70, 9) + _ids(2700, 8) + _ids(75, 6), 2700, 8,
                                      0.00035))]
    sub = "terminus-2-summarization"
    return {
        SUMMARISED: _document(_SUMMARISED_SESSION, "terminus-2", main, run_extra),
        "terminus-2/countdown-summarised.summarization-1-questions.atif.json": _document(
            f"{_SUMMARISED_SESSION}-summarization-1-questions", f"{sub}-questions", questions, child),
        "terminus-2/countdown-summarised.summarization-1-summary.atif.json": _document(
            f"{_SUMMARISED_SESSION}-summarization-1-summary", f"{sub}-summary", summary, child),
        "terminus-2/countdown-summarised.summarization-1-answers.atif.json": _document(
            f"{_SUMMARISED_SESSION}-summarization-1-summary", f"{sub}-answers", answers, child),
        "terminus-2/countdown-linear.atif.json": _document(_LINEAR_SESSION, "terminus-2", linear, run_extra,
                                                           continued_trajectory_ref="countdown-linear.cont-1.atif.json"),
        "terminus-2/countdown-linear.cont-1.atif.json": _document(_LINEAR_SESSION, "terminus-2", cont,
                                                                  run_extra | {"continuation_index": 1}),
        "terminus-2/backup-timeout.atif.json": _document("backup-timeout-0003", "terminus-2", timeout, run_extra),
    }


def _function(name: str, description: str, **properties: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {k: {"type": "string", "description": v} for k, v in properties.items()},
        "required": list(properties)}}}


def openhands_file() -> dict[str, Any]:
    """An OpenHands-shaped trajectory (ATIF-v1.5, no model name)."""
    steps = [{"step_id": 1, "source": "system", "message": "You are a coding agent working in /workspace. "
              "Use the tools to change files; call finish when the task is done."},
             {"step_id": 2, "source": "user", "message": "Create notes.md containing the line: ship on Friday"},
             {"step_id": 3, "source": "system", "message": "Workspace ready: /workspace (empty)."},
             {"step_id": 4, "source": "system", "message": "Runtime: sandbox-7"},
             {"step_id": 5, "source": "agent", "message": "I will create the file with the editor.",
              "tool_calls": [{"tool_call_id": "toolu_e01", "function_name": "file_editor",
                              "arguments": {"command": "create", "path": "/workspace/notes.md",
                                            "file_text": "ship on Friday\n"}}],
              **_result("File created successfully at: /workspace/notes.md", "toolu_e01"),
              "metrics": {"prompt_tokens": 140, "completion_tokens": 38, "cost_usd": 0.00052}},
             {"step_id": 6, "source": "agent", "message": "notes.md is written.",
              "tool_calls": [{"tool_call_id": "toolu_e02", "function_name": "finish",
                              "arguments": {"message": "Created /workspace/notes.md with the requested line."}}],
              "metrics": {"prompt_tokens": 196, "completion_tokens": 21, "cost_usd": 0.00041}}]
    tools = [_function("run_command", "Run a shell command in the sandbox.", command="the command line"),
             _function("file_editor", "Create or edit a file.", command="create or replace", path="absolute path",
                       file_text="the file's content"),
             _function("finish", "End the task.", message="what was done")]
    return {"schema_version": "ATIF-v1.5", "session_id": "notes-file-0004",
            "agent": {"name": "openhands", "version": "0.9.1", "tool_definitions": tools,
                      "extra": {"agent_class": "CodeActAgent"}},
            "steps": steps, "final_metrics": _final(steps, cached=False)}


def mini_swe_agent_file() -> dict[str, Any]:
    """A trajectory with the shape Harbor's mini-swe-agent converter writes (ATIF-v1.7)."""
    model = "deepseek/deepseek-chat"
    calls = [("grep -n header tools/csvtool.py", "12:def read(path, header=True):\n30:    if header:", 1410, 52, 1280, 18),
             ("sed -n 28,36p tools/csvtool.py", "    if header:\n        rows = rows[2:]\n    return rows", 1602, 61, 1408, 22),
             ("sed -i 's/rows\\[2:\\]/rows[1:]/' tools/csvtool.py && python -m pytest -q tests/test_csv.py",
              "4 passed in 0.21s", 1790, 70, 1536, 31),
             ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff",
              "diff --git a/tools/csvtool.py b/tools/csvtool.py\n-        rows = rows[2:]\n+        rows = rows[1:]",
              1905, 44, 1792, 9)]
    steps: list[dict[str, Any]] = [
        {"step_id": 1, "source": "system", "message": "You are a careful engineer fixing bugs with one bash command per reply."},
        {"step_id": 2, "source": "user", "message": "<task>csvtool.read drops the first data row when header=True. "
         "Fix it in tools/csvtool.py.</task>\nReply with exactly one bash code block."}]
    for k, (command, output, prompt, completion, cached, reasoning) in enumerate(calls):
        cost = round(prompt * 2.7e-7 + completion * 1.1e-6 - cached * 2e-7, 9)
        steps.append({"step_id": k + 3, "timestamp": f"2026-03-02T09:1{k}:05.{k}41207+00:00", "source": "agent",
                      "model_name": model, "message": "",
                      "tool_calls": [{"tool_call_id": f"call_m{k}_{'0' * 6}{k}f3a9", "function_name": "bash",
                                      "arguments": {"command": command}}],
                      **_result(f"<returncode>0</returncode>\n<output>\n{output}\n</output>"),
                      "metrics": {"prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": cached,
                                  "cost_usd": cost,
                                  "extra": {"prompt_tokens_details": {"cached_tokens": cached},
                                            "completion_tokens_details": {"reasoning_tokens": reasoning}}},
                      "llm_call_count": 1})
    final = _final(steps) | {"total_steps": len(steps),
                             "extra": {"total_reasoning_tokens": sum(c[5] for c in calls)}}
    return {"schema_version": "ATIF-v1.7", "session_id": "csvtool-header-0005",
            "agent": {"name": "mini-swe-agent", "version": "1.1.0", "model_name": model, "extra": {
                "original_format": "mini-swe-agent-1.1",
                "agent_config": {"system_template": "You are a careful engineer fixing bugs with one bash command per reply.",
                                 "instance_template": "<task>{{task}}</task>\nReply with exactly one bash code block.",
                                 "step_limit": 40, "cost_limit": 1.5, "output_path": None}}},
            "steps": steps, "notes": "Converted from a mini-swe-agent trajectory by Harbor's converter",
            "final_metrics": final}


def qa_runner_file() -> dict[str, Any]:
    """A browser QA runner's trajectory (ATIF-v1.7): reasoning, results naming their calls, an image part."""
    model = "google/gemini-2.5-flash"
    actions = [("open", "navigate", "/signup", "Opening the signup page.", "Page loaded: Create account"),
               ("type", "fill", "input[name=email]", "Typing a test address.", "Filled: qa+1@example.test"),
               ("click", "click", "button#create", "Submitting the form.", None),
               ("assert", "verify", "text=Check your inbox", "Looking for the confirmation.", "Found: Check your inbox")]
    steps: list[dict[str, Any]] = [{"step_id": 1, "timestamp": "2026-05-11T08:00:00.000Z", "source": "user",
                                    "message": "Sign up with a new address and confirm that the inbox notice appears."}]
    for k, (tool, action, target, narration, seen) in enumerate(actions):
        call = f"act-{k + 1}"
        content: Any = seen if seen is not None else [
            {"type": "text", "text": "Clicked; screenshot attached."},
            {"type": "image", "source": {"media_type": "image/png", "path": "https://qa.example.test/shots/after-create.png"}}]
        steps.append({"step_id": k + 2, "timestamp": f"2026-05-11T08:00:0{2 * k + 2}.{k}50Z", "source": "agent",
                      "model_name": model, "message": narration, "reasoning_content": f"Next: {action} {target}.",
                      "tool_calls": [{"tool_call_id": call, "function_name": tool,
                                      "arguments": {"action": action, "target": target, "narration": narration}}],
                      **_result(content, call), "metrics": {"cost_usd": 0}})
    steps.append({"step_id": 6, "timestamp": "2026-05-11T08:00:11.900Z", "source": "agent", "model_name": model,
                  "message": "The notice appeared: pass.", "reasoning_content": "All checks held.",
                  "tool_calls": [{"tool_call_id": "act-5", "function_name": "done",
                                  "arguments": {"verdict": "pass", "summary": "Signup shows the inbox notice."}}],
                  **_result("Run finished: pass", "act-5"), "metrics": {"cost_usd": 0}})
    return {"schema_version": "ATIF-v1.7", "session_id": "signup-0006", "trajectory_id": "signup-0006-run-1",
            "agent": {"name": "qa-runner", "version": "0.3.0", "model_name": model,
                      "extra": {"driver": "headless-browser", "target": "staging"}},
            "notes": "A scripted QA run: each step is one browser action and what the page showed after it.",
            "steps": steps,
            "final_metrics": {"total_prompt_tokens": 0, "total_completion_tokens": 0, "total_cached_tokens": 0,
                              "total_cost_usd": 0, "total_steps": len(steps),
                              "extra": {"verdict": "pass", "duration_ms": 11900}},
            "extra": {"target": {"name": "staging", "baseUrl": "https://staging.example.test"},
                      "artifacts": {"screenshots": ["shots/after-create.png"]}}}


def fixtures() -> dict[str, dict[str, Any]]:
    """Every fixture trajectory, by path under the fixture folder."""
    return terminus_files() | {"openhands/notes-file.atif.json": openhands_file(),
                               "mini-swe-agent/csvtool-header.atif.json": mini_swe_agent_file(),
                               "qa-runner/signup.atif.json": qa_runner_file()}


def rendered(document: dict[str, Any]) -> str:
    """A fixture as its file's text (indented, each list of numbers on one line)."""
    text = json.dumps(document, indent=2, ensure_ascii=False)
    return re.sub(r"\[\s*(-?[0-9.]+(?:,\s*-?[0-9.]+)*)\s*\]",
                  lambda m: "[" + ", ".join(re.split(r",\s*", m.group(1))) + "]", text) + "\n"


def write_fixtures(folder: Path = FOLDER) -> list[Path]:
    """Writes every fixture under `folder`.

    Args:
        folder: where to write them (one subfolder per shape).

    Returns:
        The files written.
    """
    written = []
    for name, document in fixtures().items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered(document), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for written_path in write_fixtures():
        print(written_path)
