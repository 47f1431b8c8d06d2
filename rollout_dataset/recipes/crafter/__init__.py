"""Crafter as an environment family: a headless world, a text observation, a tool-calling harness.

Public API:
    `CrafterWorld` — one seeded, headless episode with a step budget.
    `render_observation`, `parse_observation` — the text the agent reads, and its parser.
    `CrafterAgent`, `act_tool_manifest`, `crafter_achievements` — the harness and its `act` tool.
    `CrafterRolloutConfig`, `run_crafter_rollout` — one rollout through the proxy to artifacts.
    `CrafterEnvironment` — Crafter behind the `Environment` seam (`rollout_dataset.recipes.crafter.env`).
"""

from __future__ import annotations

from rollout_dataset.recipes.crafter.harness import (
    ACT_TOOL,
    MAX_ACTIONS_PER_CALL,
    CrafterAgent,
    CrafterAgentResult,
    act_tool_manifest,
    crafter_achievements,
)
from rollout_dataset.recipes.crafter.env import CrafterEnvironment, run_crafter_rollout
from rollout_dataset.recipes.crafter.observation import parse_observation, render_observation
from rollout_dataset.recipes.crafter.config import CrafterRolloutConfig, task_id_for
from rollout_dataset.recipes.crafter.world import ACHIEVEMENTS, ACTIONS, CrafterState, CrafterWorld, StepOutcome

__all__ = [
    "ACHIEVEMENTS",
    "ACTIONS",
    "ACT_TOOL",
    "MAX_ACTIONS_PER_CALL",
    "CrafterAgent",
    "CrafterAgentResult",
    "CrafterEnvironment",
    "CrafterRolloutConfig",
    "CrafterState",
    "CrafterWorld",
    "StepOutcome",
    "act_tool_manifest",
    "crafter_achievements",
    "parse_observation",
    "render_observation",
    "run_crafter_rollout",
    "task_id_for",
]
