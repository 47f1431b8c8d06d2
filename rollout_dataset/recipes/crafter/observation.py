"""The text observation of a Crafter state, and its parser.

The observation is what the agent reads each turn: step budget, vitals, inventory, achievements
so far, and a character map of the area around the player with a legend and the nearest thing of
each kind. The format is declared once here (`SYMBOLS` and the line headers); `parse_observation`
reads it back, so a scripted policy sees exactly what a language model sees.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from rollout_dataset.recipes.crafter.world import ACHIEVEMENTS, CrafterState

__all__ = [
    "SYMBOLS",
    "NAMES_BY_SYMBOL",
    "WALKABLE",
    "DIRECTIONS",
    "ParsedObservation",
    "render_observation",
    "parse_observation",
    "describe_offset",
]

#: map name -> one character on the map.
SYMBOLS: dict[str, str] = {
    "grass": ".",
    "sand": ":",
    "path": "_",
    "water": "~",
    "stone": "#",
    "tree": "T",
    "lava": "!",
    "coal": "c",
    "iron": "i",
    "diamond": "d",
    "table": "t",
    "furnace": "f",
    "player": "@",
    "cow": "C",
    "zombie": "Z",
    "skeleton": "S",
    "arrow": "*",
    "plant": "p",
    "outside": " ",
}
NAMES_BY_SYMBOL: dict[str, str] = {v: k for k, v in SYMBOLS.items()}
#: tiles the player can walk onto (Crafter's walkable materials).
WALKABLE: frozenset[str] = frozenset({"grass", "sand", "path"})
#: direction word -> (dx, dy); y grows downwards (north is up).
DIRECTIONS: dict[str, tuple[int, int]] = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
_FACING_WORD = {v: k for k, v in DIRECTIONS.items()}
_MAP_HEADER = "Map"
_LEGEND_HEADER = "Legend:"


@dataclass
class ParsedObservation:
    """An observation read back from text.

    Attributes:
        step: env steps taken.
        max_steps: the episode's step budget.
        facing: (dx, dy) the player faces.
        sleeping: whether the player sleeps.
        vitals: health/food/drink/energy.
        inventory: items with a positive count (vitals excluded).
        achievements: achievements unlocked so far.
        grid: rows of map names, `grid[row][col]`, north first; the player is at the centre.
    """

    step: int = 0
    max_steps: int = 0
    facing: tuple[int, int] = (0, 1)
    sleeping: bool = False
    vitals: dict[str, int] = field(default_factory=dict)
    inventory: dict[str, int] = field(default_factory=dict)
    achievements: list[str] = field(default_factory=list)
    grid: list[list[str]] = field(default_factory=list)

    @property
    def centre(self) -> tuple[int, int]:
        """(col, row) of the player on the grid."""
        return (len(self.grid[0]) // 2, len(self.grid) // 2) if self.grid else (0, 0)

    def at(self, col: int, row: int) -> str:
        """The name on the grid at (col, row); `outside` beyond the map."""
        if 0 <= row < len(self.grid) and 0 <= col < len(self.grid[row]):
            return self.grid[row][col]
        return "outside"


def describe_offset(dx: int, dy: int) -> str:
    """Words for a relative position, e.g. `2 left, 1 up` (`here` for 0, 0).

    Args:
        dx: columns to the right (negative: left).
        dy: rows downwards (negative: up).

    Returns:
        The description.
    """
    parts = []
    if dx:
        parts.append(f"{abs(dx)} {'right' if dx > 0 else 'left'}")
    if dy:
        parts.append(f"{abs(dy)} {'down' if dy > 0 else 'up'}")
    return ", ".join(parts) or "here"


def _fmt_counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "nothing"


def render_observation(state: CrafterState, legend: bool = True) -> str:
    """The text the agent reads for a state.

    Args:
        state: the state (see `CrafterWorld.state`).
        legend: include the map legend (the harness shows it in the first observation only).

    Returns:
        A multi-line observation: status, vitals, inventory, achievements, map, legend, nearest.
    """
    w = len(state.semantic)
    h = len(state.semantic[0]) if w else 0
    px, py = state.player_pos
    x0, y0 = state.view_origin
    rows = []
    seen: dict[str, tuple[int, int]] = {}
    for row in range(h):
        chars = []
        for col in range(w):
            name = state.semantic[col][row] or "outside"
            chars.append(SYMBOLS.get(name, "?"))
            dx, dy = x0 + col - px, y0 + row - py
            if name not in ("player", "outside", "grass") and (dx, dy) != (0, 0):
                best = seen.get(name)
                if best is None or abs(dx) + abs(dy) < abs(best[0]) + abs(best[1]):
                    seen[name] = (dx, dy)
        rows.append("".join(chars))
    fx, fy = state.facing
    ahead_col, ahead_row = px + fx - x0, py + fy - y0
    ahead = "outside"
    if 0 <= ahead_col < w and 0 <= ahead_row < h:
        ahead = state.semantic[ahead_col][ahead_row] or "outside"
    vitals = state.vitals()
    unlocked = state.unlocked
    lines = [
        f"Crafter step {state.step} of {state.max_steps} ({state.max_steps - state.step} left). "
        f"You are {'asleep' if state.sleeping else 'awake'}, facing {_FACING_WORD.get(state.facing, 'down')} ({ahead}).",
        "Vitals: " + ", ".join(f"{k} {v}/9" for k, v in vitals.items()),
        "Inventory: " + _fmt_counts(state.items()),
        f"Achievements ({len(unlocked)}/{len(ACHIEVEMENTS)}): " + (", ".join(unlocked) or "none yet"),
        f"{_MAP_HEADER} ({w} wide x {h} tall, north up, you are @ at the centre):",
        *(f"|{r}|" for r in rows),
        *([_LEGEND_HEADER + " " + ", ".join(f"{sym}={name}" for name, sym in SYMBOLS.items() if name != "outside")
           + ", blank=outside the world"] if legend else []),
        "Nearest: " + ("; ".join(f"{name} {describe_offset(*off)}" for name, off in
                                 sorted(seen.items(), key=lambda kv: (abs(kv[1][0]) + abs(kv[1][1]), kv[0])))
                       or "nothing but grass"),
    ]
    if state.done:
        lines.append("The episode is over" + (" (you died)." if state.dead else " (step budget reached)."))
    return "\n".join(lines)


_STEP_RE = re.compile(r"Crafter step (\d+) of (\d+)\b.*?You are (asleep|awake), facing (\w+)")
_COUNT_RE = re.compile(r"([a-z_]+) (\d+)(?:/9)?")


def parse_observation(text: str) -> ParsedObservation | None:
    """Read an observation back (the last one when `text` holds several).

    Args:
        text: text holding an observation made by `render_observation`.

    Returns:
        The parsed observation, or None when the text holds none.
    """
    start = text.rfind("Crafter step ")
    if start < 0:
        return None
    lines = text[start:].splitlines()
    obs = ParsedObservation()
    m = _STEP_RE.search(lines[0])
    if not m:
        return None
    obs.step, obs.max_steps = int(m.group(1)), int(m.group(2))
    obs.sleeping = m.group(3) == "asleep"
    obs.facing = DIRECTIONS.get(m.group(4), (0, 1))
    in_map = False
    for line in lines[1:]:
        if line.startswith("Vitals:"):
            obs.vitals = {k: int(v) for k, v in _COUNT_RE.findall(line[len("Vitals:"):])}
        elif line.startswith("Inventory:"):
            obs.inventory = {k: int(v) for k, v in _COUNT_RE.findall(line[len("Inventory:"):])}
        elif line.startswith("Achievements"):
            rest = line.split(":", 1)[1].strip()
            obs.achievements = [] if rest == "none yet" else [a.strip() for a in rest.split(",") if a.strip()]
        elif line.startswith(_MAP_HEADER + " ("):
            in_map = True
        elif in_map and line.startswith("|") and line.endswith("|"):
            obs.grid.append([NAMES_BY_SYMBOL.get(ch, "outside") for ch in line[1:-1]])
        elif in_map:
            break  # the map ends at the legend or the nearest-things line
    if not obs.grid:
        return None
    return obs
