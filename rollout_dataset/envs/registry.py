"""The one registry of environments: built-ins, `register_environment`, and installed plugins.

Names resolve in this order: environments registered in this process, the built-ins (`coding`,
`crafter`, imported on first use), then the entry points of the group `rollout_dataset.environments`
of the installed distributions (importlib.metadata), loaded lazily — only when the name is asked
for, or when every name is listed. A plugin declares, in its packaging metadata:

    [project.entry-points."rollout_dataset.environments"]
    guess = "my_package.env:GuessEnvironment"

The object named is an `Environment` (`rollout_dataset.envs.base`), or a class or function that
returns one when called without arguments. A plugin that fails to import or to build is a
`ConfigError` naming the entry point and the reason, never a traceback.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import threading
from typing import Any

from rollout_dataset.errors import ConfigError

__all__ = [
    "ENTRY_POINT_GROUP",
    "available_environments",
    "unregister_environment",
    "get_environment",
    "register_builtin_policies",
    "register_environment",
]

logger = logging.getLogger(__name__)

#: the entry-point group third-party packages extend.
ENTRY_POINT_GROUP = "rollout_dataset.environments"

#: the built-in environments, by `module:attribute` (imported on first use).
_BUILTIN: dict[str, str] = {
    "coding": "rollout_dataset.recipes.coding.env:CodingEnvironment",
    "crafter": "rollout_dataset.recipes.crafter.env:CrafterEnvironment",
}

#: the modules that register the built-in environments' scripted players with the local backend on
#: import (`oracle` for coding, `crafter`); the backend's policy registry is explicit.
_BUILTIN_PLAYERS: tuple[str, ...] = (
    "rollout_dataset.recipes.coding.policy",
    "rollout_dataset.recipes.crafter.policy",
)

_REGISTERED: dict[str, Any] = {}  # register_environment's entries
_LOADED: dict[str, tuple[str, Any]] = {}  # built-ins and plugins: (what was loaded, the environment), on first use
_LOCK = threading.RLock()


def register_environment(environment: Any, name: str | None = None) -> None:
    """Register (or replace) an environment in this process.

    Args:
        environment: an `Environment` (an object with `name`, `prepare`, `capture_settings`, ...).
        name: the `--env` name (default `environment.name`).

    Raises:
        ConfigError: no name.
    """
    key = name or getattr(environment, "name", None)
    if not key:
        raise ConfigError("register_environment: the environment has no name")
    with _LOCK:
        _REGISTERED[str(key)] = environment


def unregister_environment(name: str) -> None:
    """Forget an environment registered in this process (a no-op for a name never registered).

    Built-ins and entry-point plugins stay available: only `register_environment`'s entries go.

    Args:
        name: the `--env` name it was registered under.
    """
    with _LOCK:
        _REGISTERED.pop(name, None)


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(entry.name, entry)  # the first on sys.path wins, as for imports
    return found


def _instantiate(obj: Any) -> Any:
    return obj() if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "prepare")) else obj


def _load_builtin(name: str) -> Any:
    module, _, attr = _BUILTIN[name].partition(":")
    try:
        return _instantiate(getattr(importlib.import_module(module), attr))
    except ImportError as exc:
        raise ConfigError(f"environment {name!r} is unavailable: {exc}") from None


def _load_entry_point(entry: importlib.metadata.EntryPoint) -> Any:
    where = f"entry point {entry.name!r} = {entry.value!r} (group {ENTRY_POINT_GROUP})"
    try:
        environment = _instantiate(entry.load())
    except Exception as exc:  # noqa: BLE001 - a broken plugin is named, never a traceback
        raise ConfigError(f"{where} failed to load: {type(exc).__name__}: {exc}") from None
    for attribute in ("prepare", "capture_settings", "config_class"):
        if not callable(getattr(environment, attribute, None)):
            raise ConfigError(f"{where} is not an environment: it has no {attribute}() "
                              "(see rollout_dataset.envs.base.Environment)")
    return environment


def get_environment(name: str) -> Any:
    """The environment registered under `name`.

    Args:
        name: e.g. `coding`, `crafter`, or a plugin's name.

    Returns:
        The `Environment`.

    Raises:
        ConfigError: no environment of that name (the message lists the known ones), or its code
            cannot be imported (the message names the module or the entry point).
    """
    with _LOCK:
        if name in _REGISTERED:
            return _REGISTERED[name]
        if name in _BUILTIN:
            source = _BUILTIN[name]
            if name not in _LOADED:
                _LOADED[name] = (source, _load_builtin(name))
            return _LOADED[name][1]
        entry = _entry_points().get(name)  # a plugin is served while its entry point is installed
        if entry is None:
            _LOADED.pop(name, None)
            raise ConfigError(f"unknown environment {name!r}; known: {', '.join(available_environments())}")
        loaded = _LOADED.get(name)
        if loaded is None or loaded[0] != entry.value:  # first use, or another plugin took the name
            loaded = _LOADED[name] = (entry.value, _load_entry_point(entry))
        return loaded[1]


def available_environments() -> list[str]:
    """Every environment name: registered, built-in and installed plugins (none is imported).

    A plugin is listed while its entry point is installed (on `sys.path`), whether or not it was
    loaded before.

    Returns:
        The names, sorted.
    """
    with _LOCK:
        names = set(_REGISTERED) | set(_BUILTIN)
    try:
        names |= set(_entry_points())
    except Exception as exc:  # noqa: BLE001 - unreadable packaging metadata must not hide the built-ins
        logger.warning("entry points of %s unreadable: %s", ENTRY_POINT_GROUP, exc)
    return sorted(names)


def register_builtin_policies() -> None:
    """Register the built-in environments' players (`oracle`, `crafter`) with the local backend (idempotent).

    The edges that build a backend policy by name (the CLI `serve`, the capture's local backend, the
    batch, the demo) call this first; a plugin's player registers itself when its package is imported.
    """
    for module in _BUILTIN_PLAYERS:
        importlib.import_module(module)
