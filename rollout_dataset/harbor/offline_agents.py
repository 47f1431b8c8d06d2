"""Harbor installed agents whose install does not need the internet (``--agent module:Class``).

`OfflineMiniSweAgent` is Harbor's `MiniSweAgent`, unchanged but for `install`: Harbor's installs ``uv`` with
``curl https://astral.sh/uv/install.sh`` and then a Python from GitHub, neither reachable here. Instead,
the host prepares mini-swe-agent and its packages once for the container's Python
(`rollout_dataset.harbor.installed.prepare_mini_swe_agent`: ``pip install --target`` from PyPI for that version) and the
capture mounts that folder read-only at `WHEELS_TARGET`; `install` checks the container's ``python3`` is
the version it was built for and writes ``/usr/local/bin/mini-swe-agent``, which puts the folder on
``sys.path`` of its own process only (no ``PYTHONPATH``: the commands the agent runs, and the task's
verifier, see the container's Python as the task left it).

It runs inside Harbor's venv, so it imports only Harbor, the standard library and `agent_paths`.
"""

from __future__ import annotations

import shlex


from harbor.agents.installed.mini_swe_agent import MiniSweAgent
from harbor.environments.base import BaseEnvironment

from rollout_dataset.harbor.agent_paths import PYTHON_MARKER, WHEELS_TARGET

__all__ = ["OfflineMiniSweAgent"]

_LAUNCHER = f"""#!/bin/sh
exec python3 -c 'import sys; sys.path.insert(0, "{WHEELS_TARGET}"); sys.argv[0] = "mini-swe-agent"
from minisweagent.run.mini import app
sys.exit(app())' "$@"
"""


class OfflineMiniSweAgent(MiniSweAgent):
    """Harbor's mini-swe-agent, installed from the folder the host mounted (see the module docstring)."""

    async def install(self, environment: BaseEnvironment) -> None:
        marker = f"{WHEELS_TARGET}/{PYTHON_MARKER}"
        script = (
            "set -e; "
            f"if [ ! -f {marker} ]; then echo 'no mini-swe-agent folder is mounted at {WHEELS_TARGET}' >&2; exit 1; fi; "
            f"want=$(cat {marker}); "
            "have=$(python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])' 2>/dev/null || echo none); "
            'if [ "$want" != "$have" ]; then echo "mini-swe-agent was prepared for Python $want; '
            'the container has python3 $have" >&2; exit 1; fi; '
            f"printf %s {shlex.quote(_LAUNCHER)} > /usr/local/bin/mini-swe-agent; "
            "chmod 755 /usr/local/bin/mini-swe-agent; mini-swe-agent --help >/dev/null"
        )
        await self.exec_as_root(environment, command=script)
