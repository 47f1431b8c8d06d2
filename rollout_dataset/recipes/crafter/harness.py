"""The Crafter harness: a tool-calling agent loop over the chat completions API.

Each turn the model reads a text observation (see `observation.py`; the map legend only in the
first one, to keep prompts short) and calls the `act` tool with
a short list of Crafter actions; the harness takes them in the world and answers with what
happened plus the next observation. The loop stops when the episode ends (step budget or death),
the model answers without a tool call, the turn budget or the time budget runs out, or a model
call fails. Like the built-in coding agent, a FIRST model call answering 4xx/5xx raises at once.

Every tool-using turn is one decision: its achievements afterwards go to an `AchievementTracker`
(the batch's stepwise-reward interface), so stepwise rewards need no second copy of the rules.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from rollout_dataset.rewards.stepwise import AchievementSnapshot, AchievementTracker, CounterAchievements
from rollout_dataset.recipes.crafter.observation import render_observation
from rollout_dataset.recipes.crafter.world import ACHIEVEMENTS, ACTIONS, CrafterWorld
from rollout_dataset.harness.chat import ChatAgentBase, ChatRunResult

__all__ = [
    "ACT_TOOL",
    "MAX_ACTIONS_PER_CALL",
    "SYSTEM_PROMPT",
    "CrafterAgentResult",
    "CrafterAgent",
    "act_tool_manifest",
    "crafter_achievements",
]

logger = logging.getLogger(__name__)

MAX_ACTIONS_PER_CALL = 8
ACT_TOOL = "act"

SYSTEM_PROMPT = (
    "You play Crafter, a 2D survival game, through the `act` tool. Each observation shows your vitals "
    "(health, food, drink, energy), inventory, achievements so far and a map around you (you are @). "
    "Call `act` with 1 to {n} actions, taken in order. Moving toward a tile you cannot enter turns you to "
    "face it; `do` collects or attacks what you face (trees give wood, water gives drink, cows give food, "
    "stone needs a wood pickaxe); `place_table` needs wood; `make_*` needs a nearby table. Unlock as many "
    "achievements as you can before the steps run out. Actions: {actions}."
)


def act_tool_manifest(max_actions: int = MAX_ACTIONS_PER_CALL) -> list[dict[str, Any]]:
    """The tools offered to the model: only `act`.

    Args:
        max_actions: the most actions one call may take.

    Returns:
        The OpenAI `tools` list.
    """
    return [
        {
            "type": "function",
            "function": {
                "name": ACT_TOOL,
                "description": f"Take 1 to {max_actions} Crafter actions in order; returns what happened and the new observation.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "actions": {
                            "type": "array",
                            "items": {"type": "string", "enum": list(ACTIONS)},
                            "minItems": 1,
                            "maxItems": max_actions,
                            "description": "Crafter action names, e.g. [\"move_left\", \"do\"].",
                        }
                    },
                    "required": ["actions"],
                    "additionalProperties": False,
                },
            },
        }
    ]


def crafter_achievements() -> CounterAchievements:
    """Crafter's achievements behind the batch's `EnvironmentAchievements` interface.

    Returns:
        A `CounterAchievements` over Crafter's 22 names (state: name -> count).
    """
    return CounterAchievements(ACHIEVEMENTS, env="crafter")


@dataclass
class CrafterAgentResult(ChatRunResult):
    """What one Crafter episode did: the loop's `ChatRunResult` (stop_reason: episode_done,
    final_answer, turn_budget, timeout or upstream_error), and

    Attributes:
        env_steps: Crafter steps taken.
        crafter_return: Crafter's own reward summed over the episode.
        achievements: achievement name -> count at the end.
        unlocked: achievements unlocked at least once, sorted.
        dead: the player died.
        decisions: per tool-using turn: `{turn, actions, invalid, env_steps, reward, newly_unlocked}`.
        timeline: achievements after each decision (for the stepwise rewards).
        error: the failure message when stop_reason is upstream_error.
        messages: the final conversation.
    """

    env_steps: int
    crafter_return: float
    achievements: dict[str, int]
    unlocked: list[str]
    dead: bool
    decisions: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[AchievementSnapshot] = field(default_factory=list)
    error: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)


def _parse_actions(arguments: Any, max_actions: int) -> tuple[list[str] | None, str | None]:
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError as exc:
        return None, f"arguments are not valid JSON ({exc.msg}); send {{\"actions\": [\"move_left\", \"do\"]}}"
    actions = args.get("actions") if isinstance(args, dict) else None
    if not isinstance(actions, list) or not actions or not all(isinstance(a, str) for a in actions):
        return None, "'actions' must be a non-empty list of action names, e.g. [\"move_left\", \"do\"]"
    if len(actions) > max_actions:
        return None, f"'actions' has {len(actions)} actions; at most {max_actions} per call"
    unknown = [a for a in actions if a not in ACTIONS]
    if unknown:
        return None, f"unknown action(s) {unknown}; valid: {', '.join(ACTIONS)}"
    return actions, None


class CrafterAgent(ChatAgentBase):
    """Plays one Crafter episode with a model behind an OpenAI-compatible chat API.

    Args:
        base_url: the API base URL (ends in `/v1`), e.g. the recording proxy's.
        model: the model name to request.
        api_key: sent as a bearer token (never logged).
        max_turns: model-call budget.
        max_actions: actions per `act` call (1..8 by default 8).
        timeout_s: wall-time budget of the episode.
        seed: the request `seed`; None to omit it.
        temperature: sampling temperature.
        max_tokens: completion cap per call.
        report_url: the URL named in errors (default: the request URL).
        transport: an httpx transport (tests).

    Raises:
        ValueError: a budget out of range.
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, max_turns: int = 30,
                 max_actions: int = MAX_ACTIONS_PER_CALL, timeout_s: float = 900.0, seed: int | None = None,
                 temperature: float = 1.0, max_tokens: int = 512, report_url: str | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        if not 1 <= max_actions <= 64:
            raise ValueError(f"max_actions must be in 1..64, got {max_actions}")
        super().__init__(base_url, model, api_key=api_key, max_turns=max_turns, timeout_s=timeout_s, seed=seed,
                         temperature=temperature, max_tokens=max_tokens, report_url=report_url, transport=transport)
        self.max_actions = max_actions

    def run(self, world: CrafterWorld) -> CrafterAgentResult:
        """Play the episode until it stops.

        Args:
            world: the episode (reset here).

        Returns:
            What happened.

        Raises:
            UpstreamStatusError: the FIRST model call answered 4xx/5xx.
            UpstreamError: the first model call could not reach the server.
        """
        deadline = time.monotonic() + self.timeout_s
        state = world.reset()
        tracker = AchievementTracker(crafter_achievements(), initial_state=state.achievements)
        prompt = SYSTEM_PROMPT.format(n=self.max_actions, actions=", ".join(ACTIONS))
        messages: list[dict[str, Any]] = [{"role": "system", "content": prompt},
                                          {"role": "user", "content": render_observation(state)}]
        counts: Counter[str] = Counter()
        decisions: list[dict[str, Any]] = []
        chat = self.chat_client()

        def result(reason: str, error: str | None = None) -> CrafterAgentResult:
            end = world.state
            return CrafterAgentResult(
                stop_reason=reason, model_calls=chat.calls, timed_out=reason == "timeout",
                tool_calls_by_name=dict(sorted(counts.items())), env_steps=end.step,
                crafter_return=round(world.total_reward, 6), achievements=dict(end.achievements),
                unlocked=end.unlocked, dead=end.dead, decisions=decisions, timeline=tracker.timeline,
                error=error, messages=messages)

        with chat:
            for turn in range(self.max_turns):
                if world.state.done:
                    return result("episode_done")
                step = chat.turn(self.request_body(messages, act_tool_manifest(self.max_actions)), deadline)
                if step.assistant is None:
                    return result(step.stop_reason or "upstream_error", step.error)
                messages.append(step.assistant)
                if not step.tool_calls:
                    return result("final_answer")
                decision: dict[str, Any] = {"turn": turn, "actions": [], "invalid": 0, "env_steps": 0, "reward": 0.0,
                            "newly_unlocked": []}
                for tc in step.tool_calls:
                    name = tc["function"]["name"]
                    counts[name] += 1
                    content = self._execute(world, name, tc["function"]["arguments"], decision)
                    messages.append({"role": "tool", "tool_call_id": tc["id"], "content": content})
                decision["reward"] = round(decision["reward"], 6)
                decision["newly_unlocked"] = sorted(set(decision["newly_unlocked"]))
                decisions.append(decision)
                tracker.after_decision(turn, world.state.achievements)
        return result("episode_done" if world.state.done else "turn_budget")

    def _execute(self, world: CrafterWorld, name: str, arguments: Any, decision: dict[str, Any]) -> str:
        refusal = None
        actions: list[str] | None = None
        if name != ACT_TOOL:
            refusal = f"Error: unknown tool {name!r}; the only tool is {ACT_TOOL!r}."
        elif world.state.done:
            refusal = "The episode is over; no action was taken."
        else:
            actions, problem = _parse_actions(arguments, self.max_actions)
            if actions is None:
                refusal = f"Error: {problem}. No action was taken."
        if refusal is not None or actions is None:
            decision["invalid"] += 1
            return f"{refusal}\n\n" + render_observation(world.state, legend=False)
        outcome = world.step(actions)
        decision["actions"].extend(outcome.actions)
        decision["env_steps"] += len(outcome.actions)
        decision["reward"] += outcome.reward
        decision["newly_unlocked"].extend(outcome.newly_unlocked)
        took = ", ".join(outcome.actions)
        unlocked = ", ".join(outcome.newly_unlocked) or "nothing new"
        return (f"Took {len(outcome.actions)} action(s): {took}. Reward {outcome.reward:+.1f}. "
                f"Unlocked: {unlocked}.\n\n" + render_observation(outcome.state, legend=False))
