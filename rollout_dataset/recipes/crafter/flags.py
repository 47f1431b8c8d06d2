"""The `rollout-dataset capture` flags that are Crafter's own (``--env crafter options``).

Each `dest` is a field of `CrafterRolloutConfig`; a flag not given leaves the configuration's
default (`rollout_dataset.envs.base.CaptureFlag`).
"""

from __future__ import annotations

import argparse

from rollout_dataset.envs.base import CaptureFlag

__all__ = ["CRAFTER_FLAGS", "parse_pair"]


def parse_pair(text: str) -> tuple[int, int]:
    """Parse ``W,H`` (or ``WxH``, or one number for a square).

    Args:
        text: the flag's value.

    Returns:
        ``(width, height)``.

    Raises:
        argparse.ArgumentTypeError: not one or two integers.
    """
    parts = [p for p in text.lower().replace("x", ",").split(",") if p.strip()]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not W,H (e.g. 64,64)") from None
    if len(values) == 1:
        values = values * 2
    if len(values) != 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not W,H (e.g. 64,64)")
    return values[0], values[1]


CRAFTER_FLAGS: tuple[CaptureFlag, ...] = (
    CaptureFlag("--max-steps", "game steps per episode (default 100)", type=int),
    CaptureFlag("--max-actions", "actions per act call (default 8)", type=int),
    CaptureFlag("--area", "world size (default 64,64)", type=parse_pair, metavar="W,H"),
)
