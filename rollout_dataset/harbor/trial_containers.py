"""The containers of one Harbor trial under Harbor's ``podman``/``docker`` environment, found and removed.

Harbor names a trial's compose project after the trial (``<trial name>__env``, lower-cased, see
`compose_project`); the compose frontend labels each container it starts with that project. Harbor
removes them when the trial ends, but not when Harbor itself is killed (kill -9, a wall-time limit)
or its compose frontend dies: `remove_trial_containers` is the sweep after every trial, so nothing of
a rollout is left running. The engine's shared namespace is also why each trial needs a name of its
own: two trials named alike share one project, and one's ``down --rmi local`` removes the other's image.
"""

from __future__ import annotations

import re
import shutil
import subprocess

__all__ = ["CONTAINER_ENVIRONMENTS", "compose_project", "trial_container_names", "remove_trial_containers"]

#: Harbor environment types whose trials run as containers of the local engine of the same name
CONTAINER_ENVIRONMENTS = frozenset({"podman", "docker"})
_PROJECT_LABELS = ("com.docker.compose.project", "io.podman.compose.project")
_TIMEOUT_S = 60.0


def compose_project(trial_name: str) -> str:
    """Harbor's compose project name of a trial (its ``_sanitize_docker_compose_project_name``).

    Args:
        trial_name: the trial's name (``--trial-name``).

    Returns:
        The project name.
    """
    name = f"{trial_name}__env".lower()
    if not re.match(r"^[a-z0-9]", name):
        name = "0" + name
    return re.sub(r"[^a-z0-9_-]", "-", name)


def trial_container_names(engine: str, trial_name: str) -> list[str]:
    """The containers (running or not) of a trial's compose project.

    Args:
        engine: ``podman`` or ``docker``.
        trial_name: the trial's name.

    Returns:
        Their names, sorted (empty when the engine is not installed or answers nothing).
    """
    if shutil.which(engine) is None:
        return []
    names: set[str] = set()
    for label in _PROJECT_LABELS:
        try:
            proc = subprocess.run([engine, "ps", "-a", "--format", "{{.Names}}", "--filter",
                                   f"label={label}={compose_project(trial_name)}"],
                                  capture_output=True, text=True, timeout=_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode == 0:
            names.update(line.strip() for line in proc.stdout.splitlines() if line.strip())
    return sorted(names)


def remove_trial_containers(engine: str, trial_name: str) -> list[str]:
    """Force-remove whatever containers of a trial are left (killed first when running), and its network.

    Args:
        engine: ``podman`` or ``docker``.
        trial_name: the trial's name.

    Returns:
        The names of the containers that were left (and are now removed).
    """
    names = trial_container_names(engine, trial_name)
    try:
        if names:
            subprocess.run([engine, "rm", "-f", *names], capture_output=True, timeout=_TIMEOUT_S)
        networks = subprocess.run([engine, "network", "ls", "--format", "{{.Name}}", "--filter",
                                   f"label=com.docker.compose.project={compose_project(trial_name)}"],
                                  capture_output=True, text=True, timeout=_TIMEOUT_S).stdout.split()
        if networks:  # the compose frontend's network of the project, left when it was killed
            subprocess.run([engine, "network", "rm", "-f", *networks], capture_output=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        pass
    return names
