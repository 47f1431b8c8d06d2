"""A headless Crafter episode: seeded world, action names, state snapshots, a step budget.

`CrafterWorld` wraps `crafter.Env` for a text-only agent. Pixels are never rendered (the agent
reads a text observation), which makes a step about 5x cheaper without changing the world: the
world's randomness does not depend on rendering. The seed decides the world; the same seed and
the same actions give the same episode.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

__all__ = [
    "ACTIONS",
    "ACHIEVEMENTS",
    "MATERIALS",
    "CrafterState",
    "StepOutcome",
    "CrafterWorld",
]

logger = logging.getLogger(__name__)


def _constants() -> Any:
    import crafter.constants

    return crafter.constants


#: Crafter's action names, in the order of its action indices.
ACTIONS: tuple[str, ...] = tuple(_constants().actions)
#: Crafter's 22 achievement names.
ACHIEVEMENTS: tuple[str, ...] = tuple(_constants().achievements)
#: Crafter's material names (terrain tiles).
MATERIALS: tuple[str, ...] = tuple(_constants().materials)

_VITALS = ("health", "food", "drink", "energy")


@dataclass(frozen=True)
class CrafterState:
    """What the agent may know about the episode at one moment.

    Attributes:
        step: env steps taken so far.
        max_steps: the episode's step budget.
        player_pos: (x, y) of the player; x grows to the right, y grows downwards.
        facing: (dx, dy) the player faces.
        sleeping: whether the player sleeps.
        inventory: item -> count, vitals (health, food, drink, energy) included.
        achievements: achievement name -> times achieved (all 22 names).
        semantic: the world's semantic map as nested lists `[x][y]` of names (material or
            creature, `None` outside the world), cropped to the view around the player.
        view_origin: world (x, y) of `semantic[0][0]`.
        done: the episode ended (death or step budget).
        dead: the player died.
    """

    step: int
    max_steps: int
    player_pos: tuple[int, int]
    facing: tuple[int, int]
    sleeping: bool
    inventory: dict[str, int]
    achievements: dict[str, int]
    semantic: list[list[str | None]]
    view_origin: tuple[int, int]
    done: bool
    dead: bool

    @property
    def unlocked(self) -> list[str]:
        """Achievements achieved at least once, sorted."""
        return sorted(name for name, count in self.achievements.items() if count > 0)

    def vitals(self) -> dict[str, int]:
        """health, food, drink and energy."""
        return {name: int(self.inventory.get(name, 0)) for name in _VITALS}

    def items(self) -> dict[str, int]:
        """Inventory items other than vitals with a positive count."""
        return {k: int(v) for k, v in self.inventory.items() if k not in _VITALS and v > 0}


@dataclass(frozen=True)
class StepOutcome:
    """What a list of actions did.

    Attributes:
        actions: the actions actually taken (a list stops early when the episode ends).
        reward: Crafter's own reward summed over those steps.
        newly_unlocked: achievements unlocked for the first time by these steps, sorted.
        state: the state afterwards.
    """

    actions: list[str]
    reward: float
    newly_unlocked: list[str]
    state: CrafterState


def _headless_env_class() -> type:
    import crafter

    class _HeadlessEnv(crafter.Env):  # type: ignore[misc]
        """crafter.Env that skips rendering pixels (the world is unchanged)."""

        def _obs(self):  # noqa: D401 - crafter's hook
            return None

    return _HeadlessEnv


@dataclass
class CrafterWorld:
    """One Crafter episode with a step budget.

    Args:
        seed: decides the world.
        max_steps: env steps before the episode ends (>= 1).
        view: (width, height) of the area around the player reported in states (odd numbers).
        area: world size (Crafter's default 64 x 64).
        render_pixels: render Crafter's image observation too (not needed by text agents).

    Raises:
        ValueError: `max_steps` < 1 or an even/non-positive view size.
    """

    seed: int
    max_steps: int = 60
    view: tuple[int, int] = (11, 9)
    area: tuple[int, int] = (64, 64)
    render_pixels: bool = False
    total_reward: float = field(default=0.0, init=False)
    _env: Any = field(default=None, init=False, repr=False)
    _state: CrafterState | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise ValueError(f"max_steps: {self.max_steps!r} is out of range (an integer >= 1)")
        w, h = self.view
        if w < 1 or h < 1 or w % 2 == 0 or h % 2 == 0:
            raise ValueError(f"view: {self.view!r} must be two positive odd numbers (width, height)")

    # -- lifecycle -----------------------------------------------------------------------------
    def reset(self) -> CrafterState:
        """Start the episode (the seed decides the world).

        Returns:
            The initial state.
        """
        import crafter

        cls = crafter.Env if self.render_pixels else _headless_env_class()
        self._env = cls(area=self.area, seed=int(self.seed), length=self.max_steps, reward=True)
        self._env.reset()
        self.total_reward = 0.0
        self._state = self._snapshot(done=False, dead=False)
        logger.debug("crafter world seed=%s reset at %s", self.seed, self._state.player_pos)
        return self._state

    @property
    def state(self) -> CrafterState:
        """The current state.

        Raises:
            RuntimeError: `reset()` was not called.
        """
        if self._state is None:
            raise RuntimeError("CrafterWorld.reset() must be called before reading the state")
        return self._state

    def step(self, actions: Sequence[str]) -> StepOutcome:
        """Take actions in order until they run out or the episode ends.

        Args:
            actions: Crafter action names (see `ACTIONS`).

        Returns:
            What happened.

        Raises:
            ValueError: an unknown action name (nothing is taken then).
            RuntimeError: `reset()` was not called.
        """
        state = self.state
        unknown = [a for a in actions if a not in ACTIONS]
        if unknown:
            raise ValueError(f"unknown Crafter action(s) {unknown}; valid: {', '.join(ACTIONS)}")
        before = set(state.unlocked)
        taken: list[str] = []
        reward = 0.0
        done = state.done
        dead = state.dead
        for name in actions:
            if done:
                break
            _obs, r, done, info = self._env.step(ACTIONS.index(name))
            taken.append(name)
            reward += float(r)
            dead = bool(info.get("discount", 1.0) == 0.0)
        self.total_reward += reward
        self._state = self._snapshot(done=bool(done), dead=dead)
        newly = sorted(set(self._state.unlocked) - before)
        return StepOutcome(actions=taken, reward=reward, newly_unlocked=newly, state=self._state)

    # -- internals -----------------------------------------------------------------------------
    def _names(self) -> dict[int, str]:
        world = self._env._world
        names = {i: m for m, i in world._mat_ids.items() if m is not None}
        for cls, i in self._env._sem_view._obj_ids.items():
            names[i] = cls.__name__.lower()
        return names

    def _snapshot(self, *, done: bool, dead: bool) -> CrafterState:
        env = self._env
        player = env._player
        semantic = env._sem_view()
        names = self._names()
        px, py = int(player.pos[0]), int(player.pos[1])
        w, h = self.view
        x0, y0 = px - w // 2, py - h // 2
        grid: list[list[str | None]] = []
        for x in range(x0, x0 + w):
            column: list[str | None] = []
            for y in range(y0, y0 + h):
                inside = 0 <= x < semantic.shape[0] and 0 <= y < semantic.shape[1]
                column.append(names.get(int(semantic[x, y])) if inside else None)
            grid.append(column)
        return CrafterState(
            step=int(env._step or 0),
            max_steps=self.max_steps,
            player_pos=(px, py),
            facing=(int(player.facing[0]), int(player.facing[1])),
            sleeping=bool(player.sleeping),
            inventory={k: int(v) for k, v in player.inventory.items()},
            achievements={name: int(player.achievements.get(name, 0)) for name in ACHIEVEMENTS},
            semantic=grid,
            view_origin=(x0, y0),
            done=done or int(env._step or 0) >= self.max_steps,
            dead=dead,
        )
