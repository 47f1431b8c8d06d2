"""The `oracle` policy: solves built-in coding tasks through the harness's tools, imperfectly on purpose.

It recognises the task from the statement in the conversation through the lookup it is given
(`find_task(instruction) -> task | None`; the coding environment registers the policy with the
built-in task set's lookup, `rollout_dataset.recipes.coding.policy`) and drives the tools it finds in
the request:

- the built-in harness (`write_file`, `run_examples`, `submit`): write `solution.py`, run the
  examples, submit;
- no tools and terminus-2's JSON prompt (``"keystrokes"``; Harbor's terminus-2): the same steps as
  keystroke batches in its JSON answer format, then ``"task_complete": true`` twice (it asks to confirm);
- a `bash` tool, any case (mini-swe-agent, opencode; Claude Code's `Bash`): the same steps as shell commands, then
  ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` (mini-swe-agent's end marker) or a final text.

A seeded draw (the request's `seed`, else 0, together with the task id) decides whether the first
attempt is wrong (`p_wrong`). A wrong attempt corrupts the reference answer on some inputs; after
seeing the example run the oracle fixes it (with probability `p_fix`), or submits it anyway when
the examples happened to pass or the draw says so. The reward always comes from the real
verifier, so rewards vary across seeds: 1.0 for a correct submission, below 1.0 otherwise.

The policy is stateless: everything it needs (what it already did, what the run printed) is read
from the conversation, so a request replayed gives the same answer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from rollout_dataset.backend.policies import (
    PolicyOutput,
    PolicyRequest,
    ToolCallSpec,
    message_text,
)
from rollout_dataset.sandbox.verify import DEFAULT_SOLUTION_FILE as SOLUTION_FILE  # the one definition

__all__ = ["OraclePlan", "OraclePolicy", "oracle_plan", "wrong_solution"]

logger = logging.getLogger(__name__)

MINI_DONE = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


@dataclass(frozen=True)
class OraclePlan:
    """How the oracle plays one (task, seed).

    Args:
        wrong_first: the first solution written is wrong on some inputs.
        fix: after a failing example run, write the reference and try again.
        modulus: the wrong attempt corrupts inputs whose character sum is divisible by this.
    """

    wrong_first: bool
    fix: bool
    modulus: int


def oracle_plan(task_id: str, seed: int | None, p_wrong: float = 0.5, p_fix: float = 0.5) -> OraclePlan:
    """The seeded plan for one task and seed.

    Args:
        task_id: the task's id.
        seed: the rollout seed (None counts as 0).
        p_wrong: chance of a wrong first attempt.
        p_fix: chance of fixing it after a failing run.

    Returns:
        The plan.
    """
    digest = hashlib.sha256(f"{seed or 0}:{task_id}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    wrong = rng.random() < p_wrong
    fix = rng.random() < p_fix
    return OraclePlan(wrong_first=wrong, fix=fix, modulus=rng.choice((2, 3)))


def wrong_solution(reference: str, modulus: int) -> str:
    """A plausible first attempt that is wrong on some inputs.

    It runs the reference logic and appends a stray digit to the answer whenever the input's
    character sum is divisible by `modulus` (an off-by-one-style bug the examples may or may not
    reveal).

    Args:
        reference: the reference solution's source.
        modulus: 2 or 3.

    Returns:
        Python source reading stdin and writing stdout.
    """
    return (
        "# first attempt: reuses the core logic, but the output step is buggy on some inputs\n"
        "import subprocess\nimport sys\n\n"
        f"CORE = {reference!r}\n\n"
        "data = sys.stdin.read()\n"
        "out = subprocess.run([sys.executable, '-c', CORE], input=data, capture_output=True, text=True).stdout\n"
        f"if sum(map(ord, data)) % {modulus} == 0:\n"
        "    out = out.rstrip('\\n') + '1\\n'\n"
        "sys.stdout.write(out)\n"
    )


def _find_task(messages: list[dict[str, Any]], find_task: Callable[[str], Any] | None) -> Any:
    if find_task is None:
        return None
    for m in messages:
        if m.get("role") == "user":
            task = find_task(message_text(m.get("content")))
            if task is not None:
                return task
    return None


def _history(messages: list[dict[str, Any]]) -> tuple[list[tuple[str, dict]], str]:
    """The assistant's tool calls so far (name, parsed arguments) and the last tool result."""
    calls: list[tuple[str, dict]] = []
    last_result = ""
    for m in messages:
        if m.get("role") == "assistant":
            for tc in m.get("tool_calls") or []:
                fn = tc.get("function", {}) if isinstance(tc, Mapping) else {}
                raw = fn.get("arguments")
                try:
                    args = json.loads(raw) if isinstance(raw, str) and raw else (raw or {})
                except ValueError:
                    args = {}
                calls.append((str(fn.get("name", "")), args if isinstance(args, dict) else {}))
        elif m.get("role") == "tool":
            last_result = message_text(m.get("content"))
        elif m.get("role") == "user" and calls:
            last_result = message_text(m.get("content"))  # mini-swe-agent's text observations
    return calls, last_result


#: what terminus-2's example run prints on a failure (the command's own text spells it ``EXAMPLES-""FAILED``)
_TERMINUS_FAILED = "EXAMPLES-FAILED"


def _is_terminus(messages: list[dict[str, Any]]) -> bool:
    """terminus-2's conversation: its first user message asks for JSON with ``keystrokes``."""
    first = next((m for m in messages if m.get("role") == "user"), None)
    return first is not None and '"keystrokes"' in message_text(first.get("content"))


def _terminus_examples(task: Any) -> str:
    """One shell line running the visible examples; prints ``EXAMPLES-FAILED`` when one fails."""
    checks = [f"[ \"$(printf %s {shlex.quote(t.input)} | python3 {SOLUTION_FILE})\" = {shlex.quote(t.output.rstrip())} ]"
              for t in task.visible_tests]
    return ("if " + " && ".join(checks or ["true"]) + "; then echo EXAMPLES-""PASSED; else echo EXAMPLES-\"\"FAILED; fi\n")


def _examples_failed(result: str) -> bool:
    low = result.lower()
    return "fail" in low or "mismatch" in low or "traceback" in low


class OraclePolicy:
    """The `oracle` policy (see the module docstring).

    Args:
        p_wrong: chance of a wrong first attempt.
        p_fix: chance of fixing a wrong attempt after a failing example run.
        find_task: the task whose statement is a user message's text (`instruction -> task | None`;
            a task has `task_id`, `reference_solution`, `visible_tests`); without it no task is
            recognised.
        **_: other `make_policy` keywords are accepted and ignored.
    """

    def __init__(self, p_wrong: float = 0.5, p_fix: float = 0.5,
                 find_task: Callable[[str], Any] | None = None, **_: Any) -> None:
        if not (0 <= p_wrong <= 1 and 0 <= p_fix <= 1):
            raise ValueError(f"p_wrong and p_fix must be in [0, 1], got {p_wrong}, {p_fix}")
        self.p_wrong = p_wrong
        self.p_fix = p_fix
        self.find_task = find_task

    def respond(self, request: PolicyRequest) -> PolicyOutput:
        """Choose the next step from the conversation so far.

        Args:
            request: the request.

        Returns:
            Text and/or one tool call.
        """
        task = _find_task(request.messages, self.find_task)
        if task is None or not getattr(task, "reference_solution", None):
            return PolicyOutput(text="I do not recognise this task, so I cannot solve it.")
        plan = oracle_plan(task.task_id, request.seed, self.p_wrong, self.p_fix)
        names = set(request.tool_names)
        calls, last = _history(request.messages)
        if {"write_file", "submit"} <= names:
            return self._builtin_step(task, plan, calls, last, names)
        bash = next((name for name in request.tool_names if name.lower() == "bash"), None)  # Claude Code: "Bash"
        if bash is not None:
            return self._bash_step(task, plan, calls, last, names, bash)
        if not names and _is_terminus(request.messages):
            return PolicyOutput(text=self._terminus_step(task, plan, request.messages))
        return PolicyOutput(text=f"Here is a solution:\n```python\n{task.reference_solution}```")

    def _terminus_step(self, task: Any, plan: OraclePlan, messages: list[dict[str, Any]]) -> str:
        """terminus-2's next JSON answer: write, run the examples, fix once if they failed, complete."""
        done = sum(1 for m in messages if m.get("role") == "assistant")
        last = message_text(messages[-1].get("content")) if messages else ""

        def write(source: str) -> dict[str, Any]:
            return {"keystrokes": f"cat > {SOLUTION_FILE} <<'ORACLE_EOF'\n{source.rstrip()}\nORACLE_EOF\n",
                    "duration": 0.2}

        run = {"keystrokes": _terminus_examples(task), "duration": 1.0}
        if done == 0:
            source = wrong_solution(task.reference_solution, plan.modulus) if plan.wrong_first else \
                task.reference_solution
            answer = {"analysis": "The task is new.", "plan": f"Write {SOLUTION_FILE}, then run the examples.",
                      "commands": [write(source), run], "task_complete": False}
        elif done == 1 and plan.wrong_first and plan.fix and _TERMINUS_FAILED in last:
            answer = {"analysis": "An example failed.", "plan": "Fix the solution and run the examples again.",
                      "commands": [write(task.reference_solution), run], "task_complete": False}
        else:
            answer = {"analysis": f"{SOLUTION_FILE} is written.", "plan": "Submit.", "commands": [],
                      "task_complete": True}
        return json.dumps(answer)

    @staticmethod
    def _writes(calls: list[tuple[str, dict]]) -> int:
        return sum(1 for name, args in calls if name == "write_file" or
                   (name.lower() == "bash" and f"> {SOLUTION_FILE}" in str(args.get("command", ""))))

    def _next_action(self, plan: OraclePlan, calls: list[tuple[str, dict]], last: str) -> str:
        writes = self._writes(calls)
        if writes == 0:
            return "write_wrong" if plan.wrong_first else "write_right"
        last_kind = calls[-1][0] if calls else ""
        last_cmd = str(calls[-1][1].get("command", "")) if calls else ""
        just_wrote = last_kind == "write_file" or (last_kind.lower() == "bash" and f"> {SOLUTION_FILE}" in last_cmd)
        if just_wrote:
            return "run"
        if plan.wrong_first and writes == 1 and plan.fix and _examples_failed(last):
            return "write_right"
        return "submit"

    def _builtin_step(self, task: Any, plan: OraclePlan, calls: list, last: str, names: set) -> PolicyOutput:
        if any(name == "submit" for name, _ in calls):
            return PolicyOutput(text="I submitted my solution.")
        action = self._next_action(plan, calls, last)
        if action in ("write_wrong", "write_right"):
            source = task.reference_solution if action == "write_right" else \
                wrong_solution(task.reference_solution, plan.modulus)
            text = "Let me fix the bug and rewrite the solution." if self._writes(calls) else \
                f"I will write a solution to {SOLUTION_FILE}."
            return PolicyOutput(text=text, tool_calls=[ToolCallSpec("write_file", {"path": SOLUTION_FILE,
                                                                                   "content": source})])
        if action == "run" and "run_examples" in names:
            return PolicyOutput(text="Now I check it on the examples.", tool_calls=[ToolCallSpec("run_examples", {})])
        return PolicyOutput(text="The solution is ready.", tool_calls=[ToolCallSpec("submit", {})])

    def _bash_step(self, task: Any, plan: OraclePlan, calls: list, last: str, names: set,
                   bash: str = "bash") -> PolicyOutput:
        lone_bash = names == {bash}
        if any("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in str(a.get("command", "")) for _, a in calls):
            return PolicyOutput(text="Done.")
        action = self._next_action(plan, calls, last)
        if action in ("write_wrong", "write_right"):
            source = task.reference_solution if action == "write_right" else \
                wrong_solution(task.reference_solution, plan.modulus)
            command = f"cat > {SOLUTION_FILE} <<'ORACLE_EOF'\n{source.rstrip()}\nORACLE_EOF"
            return PolicyOutput(text=f"I will write {SOLUTION_FILE}.", tool_calls=[
                ToolCallSpec(bash, {"command": command, "description": "write the solution"})])
        if action == "run":
            parts = []
            for i, test in enumerate(task.visible_tests):
                parts.append(f"printf %s {shlex.quote(test.input)} | python3 {SOLUTION_FILE} > .out{i}; "
                             f"if [ \"$(cat .out{i})\" = {shlex.quote(test.output.rstrip())} ]; then echo example {i + 1}: "
                             f"PASS; else echo example {i + 1}: FAIL; fi; rm -f .out{i}")
            return PolicyOutput(text="Checking the examples.", tool_calls=[
                ToolCallSpec(bash, {"command": "\n".join(parts) or "true", "description": "run the examples"})])
        if lone_bash:
            return PolicyOutput(text="Finished.", tool_calls=[ToolCallSpec(bash, {"command": MINI_DONE})])
        return PolicyOutput(text=f"{SOLUTION_FILE} is written and checked.")

