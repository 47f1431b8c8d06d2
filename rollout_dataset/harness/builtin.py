"""The built-in harness: a tool-calling coding agent over the chat completions API.

Every model call carries the full tool manifest. The loop stops when the model calls `submit`,
answers without a tool call, uses up its turn budget, or runs out of time. The first model call
answering 4xx/5xx raises `UpstreamStatusError` at once (a misconfigured server must not look like
a bad agent); a later failure ends the rollout with ``stop_reason="upstream_error"``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from rollout_dataset.harness.chat import ChatAgentBase, ChatRunResult
from rollout_dataset.harness.tools import SOLUTION_FILE, ToolBox, tool_manifest

__all__ = ["AgentResult", "BuiltinAgent", "DEFAULT_SYSTEM_PROMPT"]

logger = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful programmer working in a sandboxed directory. Solve the task by writing a Python 3 "
    f"program to {SOLUTION_FILE} that reads standard input and writes standard output. Use the tools: "
    "write_file to write code, run_examples to check it on the worked examples, run for shell commands, "
    "and submit when you are done."
)


@dataclass
class AgentResult(ChatRunResult):
    """What one run of the built-in agent did: the loop's `ChatRunResult` (stop_reason: submit,
    final_answer, turn_budget, timeout or upstream_error), and

    Args:
        ran_code: whether any tool call executed code.
        error: the failure message when stop_reason is upstream_error.
        messages: the final conversation.
        decisions: per tool-using turn, ``{turn, tools, changed_solution, ran_code, examples_passed}``.
    """

    ran_code: bool
    error: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)


class BuiltinAgent(ChatAgentBase):
    """A tool-calling coding agent speaking the OpenAI chat completions API.

    Args:
        base_url: the API base URL (ends in ``/v1``), e.g. the recording proxy's.
        model: the model name to request.
        tools: the `ToolBox` executing tool calls in the workdir.
        api_key: sent as a bearer token (never logged).
        max_turns: turn budget (model calls).
        timeout_s: wall-time budget of the whole run.
        seed: the request `seed` (the rollout seed); None to omit it.
        temperature: sampling temperature.
        max_tokens: completion cap per call.
        system_prompt: the system message.
        report_url: the URL named in errors (default: the request URL), e.g. the upstream behind a proxy.
        transport: an httpx transport (tests).

    Raises:
        ValueError: a budget out of range.
    """

    def __init__(self, base_url: str, model: str, tools: ToolBox, *, api_key: str | None = None,
                 max_turns: int = 20, timeout_s: float = 900.0, seed: int | None = None,
                 temperature: float = 1.0, max_tokens: int = 2048, system_prompt: str = DEFAULT_SYSTEM_PROMPT,
                 report_url: str | None = None, transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(base_url, model, api_key=api_key, max_turns=max_turns, timeout_s=timeout_s, seed=seed,
                         temperature=temperature, max_tokens=max_tokens, report_url=report_url, transport=transport)
        self.tools = tools
        self.system_prompt = system_prompt

    def run(self, instruction: str) -> AgentResult:
        """Run the agent on one task statement until it stops.

        Args:
            instruction: the task statement (the user message).

        Returns:
            What the agent did.

        Raises:
            UpstreamStatusError: the FIRST model call answered 4xx/5xx.
            UpstreamError: the first model call could not reach the server.
        """
        deadline = time.monotonic() + self.timeout_s
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.system_prompt},
                                          {"role": "user", "content": instruction}]
        counts: Counter[str] = Counter()
        ran_code = False
        decisions: list[dict[str, Any]] = []
        chat = self.chat_client()

        def result(reason: str, error: str | None = None) -> AgentResult:
            return AgentResult(reason, chat.calls, reason == "timeout", dict(sorted(counts.items())), ran_code,
                               error, messages, decisions)

        with chat:
            for turn in range(self.max_turns):
                step = chat.turn(self.request_body(messages, tool_manifest()), deadline)
                if step.assistant is None:
                    return result(step.stop_reason or "upstream_error", step.error)
                messages.append(step.assistant)
                if not step.tool_calls:
                    return result("final_answer")
                decision: dict[str, Any] = {"turn": turn, "tools": [], "changed_solution": False, "ran_code": False,
                            "examples_passed": None}
                submitted = False
                for tc in step.tool_calls:
                    name = tc["function"]["name"]
                    counts[name] += 1
                    outcome = self.tools.execute(name, tc["function"]["arguments"],
                                                 timeout_s=deadline - time.monotonic())
                    ran_code = ran_code or outcome.ran_code
                    decision["tools"].append(name)
                    decision["changed_solution"] |= outcome.changed_solution
                    decision["ran_code"] |= outcome.ran_code
                    if outcome.examples_passed is not None:
                        decision["examples_passed"] = outcome.examples_passed
                    messages.append({"role": "tool", "tool_call_id": tc["id"], "content": outcome.content})
                    submitted = submitted or outcome.submitted
                decisions.append(decision)
                if submitted:
                    return result("submit")
        return result("turn_budget")
