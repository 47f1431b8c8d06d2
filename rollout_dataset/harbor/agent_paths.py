"""Where the host's copy of an installed agent appears inside a task's container (standard library only:
imported both by the capture, `rollout_dataset.harbor.installed`, and inside Harbor's venv,
`rollout_dataset.harbor.offline_agents`)."""

from __future__ import annotations

__all__ = ["WHEELS_TARGET", "PYTHON_MARKER"]

#: where the host's mini-swe-agent folder (``pip install --target`` for the container's Python) is mounted
WHEELS_TARGET = "/opt/rollout-agents/mini-swe-agent"
#: the file in that folder naming the Python version it was built for (``3.11``)
PYTHON_MARKER = ".rollout-python-version"
