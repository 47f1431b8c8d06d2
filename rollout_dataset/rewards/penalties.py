"""Rewards of one rollout: the verifier's env_reward and the documented penalties.

- ``env_reward`` = fraction of held-out tests the final `solution.py` passes under the real
  verifier; 0.0 when the agent wrote no solution (a failure); None only when the verifier could
  not run (no held-out tests, sandbox error), with the summary's ``unscored_reason`` saying why.
- ``reward_after_penalties`` = ``max(0, env_reward - sum(penalties))``; None when env_reward is None.

Penalties (`PenaltyRules`, defaults shown):

| code | rule |
| --- | --- |
| `tool_calls_over_budget` | 0.02 per tool call beyond 20, capped at 0.2 in total |
| `never_ran_code` | 0.1 when no tool call ran code (`run`, `run_examples`, `bash`, ...) |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["CODE_RUNNING_TOOLS", "PenaltyRules", "compute_penalties", "reward_after_penalties"]

#: tool names that execute code (built-in harness, mini-swe-agent, opencode and common others).
CODE_RUNNING_TOOLS = frozenset({"run", "run_examples", "bash", "shell", "execute", "exec", "terminal",
                                "run_command", "execute_command", "python"})


@dataclass(frozen=True)
class PenaltyRules:
    """The penalty rules.

    Args:
        tool_call_budget: tool calls allowed without penalty.
        per_extra_tool_call: penalty per tool call over the budget.
        max_tool_call_penalty: cap of the tool-call penalty.
        never_ran_code: penalty when no tool call ran code.
    """

    tool_call_budget: int = 20
    per_extra_tool_call: float = 0.02
    max_tool_call_penalty: float = 0.2
    never_ran_code: float = 0.1

    def __post_init__(self) -> None:
        for name in ("tool_call_budget", "per_extra_tool_call", "max_tool_call_penalty", "never_ran_code"):
            if getattr(self, name) < 0:
                raise ValueError(f"PenaltyRules.{name} must be >= 0, got {getattr(self, name)}")


def compute_penalties(tool_calls_by_name: Mapping[str, int], ran_code: bool | None = None,
                      rules: PenaltyRules = PenaltyRules()) -> list[dict[str, Any]]:
    """The penalties a rollout earns.

    Args:
        tool_calls_by_name: tool calls per name over the agent turns.
        ran_code: whether code was run; None derives it from the tool names (`CODE_RUNNING_TOOLS`).
        rules: the rules.

    Returns:
        ``{"code", "amount", "detail"}`` dicts, possibly empty.
    """
    out: list[dict[str, Any]] = []
    total = sum(tool_calls_by_name.values())
    if total > rules.tool_call_budget and rules.per_extra_tool_call > 0:
        extra = total - rules.tool_call_budget
        amount = min(rules.max_tool_call_penalty, extra * rules.per_extra_tool_call)
        out.append({"code": "tool_calls_over_budget", "amount": round(amount, 6),
                    "detail": f"{total} tool calls, budget {rules.tool_call_budget}: {extra} over x "
                              f"{rules.per_extra_tool_call} (cap {rules.max_tool_call_penalty})"})
    if ran_code is None:
        ran_code = any(count > 0 for name, count in tool_calls_by_name.items() if name in CODE_RUNNING_TOOLS)
    if not ran_code and rules.never_ran_code > 0:
        out.append({"code": "never_ran_code", "amount": rules.never_ran_code,
                    "detail": "no tool call ran code (" + ", ".join(sorted(CODE_RUNNING_TOOLS)) + ")"})
    return out


def reward_after_penalties(env_reward: float | None, penalties: list[dict[str, Any]]) -> float | None:
    """Apply penalties to the env reward.

    Args:
        env_reward: the verifier's reward, or None.
        penalties: from `compute_penalties`.

    Returns:
        ``max(0, env_reward - total penalty)``, or None when env_reward is None.
    """
    if env_reward is None:
        return None
    if not penalties:
        return env_reward
    return round(max(0.0, env_reward - sum(p["amount"] for p in penalties)), 12)
