"""A scripted Crafter player for the local backend: reads the observation, emits `act` tool calls.

The policy is a small heuristic, so the whole Crafter path runs offline and achievements really
vary with the world the seed draws: drink when thirsty, eat a cow when hungry, sleep when tired,
otherwise climb Crafter's tech tree (wood -> table -> wood pickaxe and sword -> stone -> stone
pickaxe, place stone, saplings), exploring when nothing useful is in view. It reads only the text
observation in the conversation (`rollout_dataset.recipes.crafter.observation`), exactly what a model
would read, and plans up to `max_actions` actions per call by breadth-first search on the map.

`crafter_actions(messages, seed)` is the pure decision function; `CrafterPolicy` wraps it for the
local backend (one `act` tool call per turn, or a short text when there is no observation) and is
registered as the `crafter` policy when this module is imported.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from typing import Any, Mapping, Sequence

from rollout_dataset.backend.policies import PolicyOutput, PolicyRequest, ToolCallSpec, message_text, register_policy
from rollout_dataset.recipes.crafter.observation import DIRECTIONS, WALKABLE, ParsedObservation, parse_observation

__all__ = ["crafter_actions", "CrafterPolicy", "ACT_TOOL_NAME", "latest_observation"]

logger = logging.getLogger(__name__)

ACT_TOOL_NAME = "act"
_MOVE = {v: f"move_{k}" for k, v in DIRECTIONS.items()}
_PLACEABLE = frozenset({"grass", "sand", "path"})


def _recipes() -> tuple[dict[str, Any], dict[str, Any]]:
    import crafter.constants

    return crafter.constants.place, crafter.constants.make


def latest_observation(messages: Sequence[Mapping[str, Any]]) -> ParsedObservation | None:
    """The newest Crafter observation in a conversation (user or tool messages).

    Args:
        messages: the chat messages of the request.

    Returns:
        The parsed observation, or None when no message holds one.
    """
    for message in reversed(messages):
        if message.get("role") in ("user", "tool"):
            parsed = parse_observation(message_text(message.get("content")))
            if parsed is not None:
                return parsed
    return None


class _Planner:
    """Plans actions on a copy of the observed grid, simulating moves and facing."""

    def __init__(self, obs: ParsedObservation, budget: int, rng: random.Random) -> None:
        self.obs = obs
        self.grid = [row[:] for row in obs.grid]
        self.pos = obs.centre
        self.facing = obs.facing
        self.budget = budget
        self.rng = rng
        self.actions: list[str] = []
        self.inv = dict(obs.inventory)

    # grid helpers --------------------------------------------------------------------------
    def at(self, col: int, row: int) -> str:
        if 0 <= row < len(self.grid) and 0 <= col < len(self.grid[row]):
            return self.grid[row][col]
        return "outside"

    def ahead(self) -> tuple[int, int]:
        return self.pos[0] + self.facing[0], self.pos[1] + self.facing[1]

    def near(self, name: str, radius: int = 1) -> bool:
        c, r = self.pos
        return any(self.at(c + dx, r + dy) == name for dx in range(-radius, radius + 1)
                   for dy in range(-radius, radius + 1))

    def visible(self, name: str) -> bool:
        return any(name in row for row in self.grid)

    def left(self) -> int:
        return self.budget - len(self.actions)

    def emit(self, action: str) -> None:
        if self.left() <= 0:
            return
        self.actions.append(action)
        if action.startswith("move_"):
            d = DIRECTIONS[action[len("move_"):]]
            self.facing = d
            target = (self.pos[0] + d[0], self.pos[1] + d[1])
            if self.at(*target) in WALKABLE:
                self.grid[self.pos[1]][self.pos[0]] = "grass" if self.pos == self.obs.centre else self.at(*self.pos)
                self.pos = target

    # movement ------------------------------------------------------------------------------
    def path_to(self, targets: frozenset[str]) -> list[tuple[int, int]] | None:
        """BFS over walkable tiles to a tile next to a target; returns the steps' directions."""
        start = self.pos
        queue = deque([start])
        prev: dict[tuple[int, int], tuple[tuple[int, int], tuple[int, int]] | None] = {start: None}
        order = list(DIRECTIONS.values())
        while queue:
            cell = queue.popleft()
            for d in order:
                nxt = (cell[0] + d[0], cell[1] + d[1])
                if self.at(*nxt) in targets:
                    steps = [d]
                    cur = cell
                    while prev[cur] is not None:
                        parent, move = prev[cur]  # type: ignore[misc]
                        steps.append(move)
                        cur = parent
                    return list(reversed(steps))
                if nxt not in prev and self.at(*nxt) in WALKABLE:
                    prev[nxt] = (cell, d)
                    queue.append(nxt)
        return None

    def go_and_do(self, targets: frozenset[str], times: int = 1) -> bool:
        """Walk next to the nearest target, face it and `do` it `times` times."""
        steps = self.path_to(targets)
        if steps is None:
            return False
        for d in steps:  # the last step faces the target (not walkable: only turns)
            if self.at(self.pos[0] + d[0], self.pos[1] + d[1]) in targets:
                if self.facing != d:
                    self.emit(_MOVE[d])
                break
            self.emit(_MOVE[d])
        if self.left() > 0 and self.at(*self.ahead()) in targets:
            for _ in range(times):
                self.emit("do")
        return True

    def face_placeable(self) -> bool:
        """Face a tile where something can be placed (turning costs a move)."""
        if self.at(*self.ahead()) in _PLACEABLE:
            return True
        for d in DIRECTIONS.values():
            nxt = (self.pos[0] + d[0], self.pos[1] + d[1])
            if self.at(*nxt) in _PLACEABLE:
                self.emit(_MOVE[d])  # steps onto it, now facing the next tile that way
                return self.at(*self.ahead()) in _PLACEABLE
        return False

    def explore(self) -> None:
        dirs = list(DIRECTIONS.values())
        first = dirs[(self.rng.randrange(4) + self.obs.step // 24) % 4]
        for d in [first, *[x for x in dirs if x != first]]:
            nxt = (self.pos[0] + d[0], self.pos[1] + d[1])
            if self.at(*nxt) in WALKABLE:
                while self.left() > 0 and self.at(self.pos[0] + d[0], self.pos[1] + d[1]) in WALKABLE:
                    self.emit(_MOVE[d])
                return
            if self.at(*nxt) == "tree":
                self.emit(_MOVE[d])
                self.emit("do")
                return
        self.emit(_MOVE[first])


def crafter_actions(messages: Sequence[Mapping[str, Any]], seed: int | None = None, max_actions: int = 8) -> list[str]:
    """Choose the next actions from the newest observation in a conversation.

    Args:
        messages: the chat messages (the observation is read from user/tool messages).
        seed: the request's seed; decides exploration directions with the observation's step.
        max_actions: actions per call (>= 1).

    Returns:
        Up to `max_actions` Crafter action names; `["noop"]` when there is no observation.
    """
    obs = latest_observation(messages)
    if obs is None:
        return ["noop"]
    rng = random.Random(f"crafter:{int(seed or 0)}:{obs.step}")
    plan = _Planner(obs, max(1, int(max_actions)), rng)
    place, make = _recipes()
    inv = obs.inventory
    vit = obs.vitals
    got = set(obs.achievements)
    wood, stone = inv.get("wood", 0), inv.get("stone", 0)
    table_cost = int(place["table"]["uses"].get("wood", 1))

    if obs.sleeping:
        return ["noop"] * min(plan.budget, 4)
    if vit.get("energy", 9) <= 2:
        return ["sleep"] * plan.budget
    if vit.get("drink", 9) <= 6 and plan.visible("water") and plan.go_and_do(frozenset({"water"}), 9 - vit["drink"]):
        return plan.actions
    if vit.get("food", 9) <= 5 and plan.visible("cow") and plan.go_and_do(frozenset({"cow"}), 5):
        return plan.actions

    table_near = plan.near("table")
    if table_near:
        for tool in ("wood_pickaxe", "wood_sword", "stone_pickaxe", "stone_sword"):
            uses = make[tool]["uses"]
            if inv.get(tool, 0) == 0 and all(inv.get(k, 0) >= v for k, v in uses.items()):
                plan.emit(f"make_{tool}")
                for k, v in uses.items():
                    inv[k] = inv.get(k, 0) - v
                inv[tool] = 1
        if plan.actions:
            return plan.actions
    has_pickaxe = inv.get("wood_pickaxe", 0) > 0
    if stone >= 1 and "place_stone" not in got and plan.face_placeable():
        plan.emit("place_stone")
        return plan.actions
    need_wood = 1 if table_near else table_cost + 1
    if not has_pickaxe or inv.get("wood_sword", 0) == 0:
        if plan.visible("table") and wood >= 1 and plan.go_and_do(frozenset({"table"}), 0):
            return plan.actions
        if wood >= need_wood and not plan.visible("table") and plan.face_placeable():
            plan.emit("place_table")
            return plan.actions
        if plan.go_and_do(frozenset({"tree"}), min(need_wood - wood + 1, 4) if wood < need_wood else 2):
            return plan.actions
    if has_pickaxe:
        if plan.visible("coal") and plan.go_and_do(frozenset({"coal"}), 1):
            return plan.actions
        if stone < 3 and plan.visible("stone") and plan.go_and_do(frozenset({"stone"}), 1):
            return plan.actions
        if inv.get("stone_pickaxe", 0) == 0 and stone >= 1:
            if wood < 1 and plan.go_and_do(frozenset({"tree"}), 2):
                return plan.actions
            if wood >= 1 and plan.visible("table") and plan.go_and_do(frozenset({"table"}), 0):
                return plan.actions
            if wood >= table_cost + 1 and plan.face_placeable():
                plan.emit("place_table")
                return plan.actions
    if "collect_drink" not in got and plan.visible("water") and plan.go_and_do(frozenset({"water"}), 1):
        return plan.actions
    if "eat_cow" not in got and plan.visible("cow") and plan.go_and_do(frozenset({"cow"}), 5):
        return plan.actions
    if inv.get("sapling", 0) > 0 and "place_plant" not in got and plan.at(*plan.ahead()) == "grass":
        plan.emit("place_plant")
        return plan.actions
    if "collect_sapling" not in got and plan.at(*plan.ahead()) == "grass" and rng.random() < 0.5:
        plan.emit("do")
        plan.emit("do")
    if plan.left() > 0 and plan.visible("tree") and wood < 5 and plan.go_and_do(frozenset({"tree"}), 2):
        return plan.actions
    plan.explore()
    return plan.actions or ["noop"]


class CrafterPolicy:
    """Local-backend policy that plays Crafter through the `act` tool.

    Args:
        max_actions: actions per tool call (the harness's limit, 8 by default).
    """

    def __init__(self, max_actions: int = 8, **_: Any) -> None:
        if int(max_actions) < 1:
            raise ValueError(f"max_actions must be >= 1, got {max_actions}")
        self.max_actions = int(max_actions)

    def respond(self, request: PolicyRequest) -> PolicyOutput:
        """Answer one chat request.

        Args:
            request: the backend's request (messages, tools, seed).

        Returns:
            One `act` tool call choosing the next actions; a short text (no tool call, which ends a
            harness's loop) when the conversation holds no Crafter observation or offers no `act` tool.
        """
        if latest_observation(request.messages) is None:
            return PolicyOutput(text="I can only play Crafter: there is no Crafter observation here.")
        if request.tools is not None and ACT_TOOL_NAME not in request.tool_names:
            return PolicyOutput(text="No act tool is offered, so I cannot play.")
        actions = crafter_actions(request.messages, seed=request.seed, max_actions=self.max_actions)
        return PolicyOutput(tool_calls=[ToolCallSpec(name=ACT_TOOL_NAME, arguments={"actions": actions})])


register_policy("crafter", lambda **kw: CrafterPolicy(**kw))
