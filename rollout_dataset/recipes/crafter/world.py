"""A headless Crafter episode: seeded world, action names, state snapshots, a step budget.

`CrafterWorld` wraps `crafter.Env` for a text-only agent. Pixels are never rendered (the agent
reads a text observation), which makes a step much cheaper without changing the world: the
world's randomness does not depend on rendering. The seed decides the world; the same seed and
the same actions give the same episode.

Crafter generates worlds with pure-Python simplex noise (seconds for 64 x 64), so freshly reset
worlds are kept in a small process-wide cache and each episode plays on a deep copy: rollouts of
the same seed (a batch runs several) generate the world once, and a copy plays exactly like a
fresh generation (the copy carries the world's random state too).
"""

from __future__ import annotations

import copy
import functools
import logging
import threading
from collections import OrderedDict
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


@functools.lru_cache(maxsize=2)
def _env_class(pixels: bool) -> type:
    """crafter.Env made reproducible (and, unless `pixels`, headless).

    Crafter keeps each chunk's creatures in a set, ordered by memory address, and despawns a
    randomly indexed member of it: the same seed could then play differently from one process (or
    one copied world) to the next. Here a chunk's objects are handed over sorted by position (one
    object per cell), so the seed alone decides the episode.
    """
    import crafter

    def _balance_object(self: Any, chunk: Any, objs: Any, *args: Any, **kwargs: Any) -> Any:  # crafter's hook
        ordered = sorted(objs, key=lambda obj: (int(obj.pos[0]), int(obj.pos[1])))
        return crafter.Env._balance_object(self, chunk, ordered, *args, **kwargs)

    namespace: dict[str, Any] = {"_balance_object": _balance_object, "__doc__": _env_class.__doc__}
    if not pixels:
        namespace["_obs"] = lambda self: None  # skip rendering pixels; the world is unchanged
    return type("ReproducibleCrafterEnv" if pixels else "HeadlessCrafterEnv", (crafter.Env,), namespace)


_CACHE_SIZE = 16
_CACHE: "OrderedDict[tuple[int, tuple[int, int], bool], Any]" = OrderedDict()
_CACHE_LOCK = threading.Lock()


def _fresh_env(seed: int, area: tuple[int, int], length: int, pixels: bool, reuse: bool) -> Any:
    """A just-reset `crafter.Env` for `seed`, copied from the cache when `reuse` allows."""
    cls = _env_class(bool(pixels))
    if not reuse:
        env = cls(area=area, seed=seed, length=length, reward=True)
        env.reset()
        return env
    key = (int(seed), (int(area[0]), int(area[1])), bool(pixels))
    with _CACHE_LOCK:  # generation is CPU-bound Python: serialising it costs nothing
        template = _CACHE.get(key)
        if template is None:
            template = cls(area=area, seed=seed, length=length, reward=True)
            template.reset()
            _CACHE[key] = template
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
        else:
            _CACHE.move_to_end(key)
        textures = template._textures  # read-only image cache: shared, not copied
        env = copy.deepcopy(template, memo={id(textures): textures})
    env._length = length
    return env


@dataclass
class CrafterWorld:
    """One Crafter episode with a step budget.

    Args:
        seed: decides the world.
        max_steps: env steps before the episode ends (>= 1).
        view: (width, height) of the area around the player reported in states (odd numbers).
        area: world size (Crafter's default 64 x 64).
        render_pixels: render Crafter's image observation too (not needed by text agents).
        reuse_worlds: start from a cached copy of the seed's generated world (same episode, faster).

    Raises:
        ValueError: `max_steps` < 1 or an even/non-positive view size.
    """

    seed: int
    max_steps: int = 60
    view: tuple[int, int] = (11, 9)
    area: tuple[int, int] = (64, 64)
    render_pixels: bool = False
    reuse_worlds: bool = True
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
        self._env = _fresh_env(int(self.seed), self.area, self.max_steps, self.render_pixels, self.reuse_worlds)
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
