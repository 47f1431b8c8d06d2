"""Environment families beyond the built-in coding tasks, behind one small registry.

Each family names, by dotted path (so its heavy imports happen only on use), the function that
captures one rollout into an artifact folder and the runner factory `rollout-dataset batch --env`
uses (see `rollout_dataset.batch.envs`):

    get_env("crafter").rollout_function()(CrafterRolloutConfig(seed=3, out_dir="out"))
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from rollout_dataset.errors import ConfigError

__all__ = ["EnvFamily", "ENV_FAMILIES", "register_env_family", "get_env", "available_envs"]


@dataclass(frozen=True)
class EnvFamily:
    """One environment family.

    Attributes:
        name: the `--env` name.
        description: one line for help texts.
        rollout: `"module:function"` capturing one rollout (`function(config) -> CaptureResult`).
        config: `"module:Class"` of that function's configuration.
        batch_runner: `"module:factory"` for `rollout-dataset batch --env NAME`.
    """

    name: str
    description: str
    rollout: str
    config: str
    batch_runner: str

    @staticmethod
    def _load(path: str) -> Any:
        module, _, attr = path.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"environment code {path} is unavailable ({exc})") from None

    def rollout_function(self) -> Callable[..., Any]:
        """The rollout function (imported now).

        Raises:
            ConfigError: its module cannot be imported (e.g. `crafter` is not installed).
        """
        return self._load(self.rollout)

    def config_class(self) -> type:
        """The rollout configuration class (imported now).

        Raises:
            ConfigError: its module cannot be imported.
        """
        return self._load(self.config)


ENV_FAMILIES: dict[str, EnvFamily] = {
    "crafter": EnvFamily(
        name="crafter",
        description="Crafter survival game (PyPI `crafter`), played through an `act` tool; achievements as rewards",
        rollout="rollout_dataset.envs.crafter.rollout:run_crafter_rollout",
        config="rollout_dataset.envs.crafter.rollout:CrafterRolloutConfig",
        batch_runner="rollout_dataset.envs.crafter.batch:batch_runner",
    ),
}


def register_env_family(family: EnvFamily) -> None:
    """Register (or replace) an environment family.

    Args:
        family: the family.
    """
    ENV_FAMILIES[family.name] = family


def get_env(name: str) -> EnvFamily:
    """The family registered under `name`.

    Args:
        name: e.g. `crafter`.

    Returns:
        The family.

    Raises:
        ConfigError: no family of that name (the message lists the known ones).
    """
    family = ENV_FAMILIES.get(name)
    if family is None:
        raise ConfigError(f"unknown environment {name!r}; known: {', '.join(available_envs())}")
    return family


def available_envs() -> list[str]:
    """The registered family names, sorted."""
    return sorted(ENV_FAMILIES)
