"""Harbor's own check of its environments, run in Harbor's venv: ``python -m rollout_dataset.harbor.preflight NAME...``.

For each environment type named, Harbor's ``EnvironmentFactory.run_preflight`` runs unchanged: the
``docker`` check (a ``docker`` binary *and* ``docker info`` answering: a binary without a reachable
daemon fails), the ``podman`` one (``podman``, a compose frontend, ``podman info``), the cloud ones
(their credential variables, their SDK extra). Harbor's ``singularity`` preflight checks nothing on
the host, so the ``singularity`` binary it runs is looked for here. ``--types`` prints Harbor's
``EnvironmentType`` values instead (`rollout_dataset.harbor.environments` checks its list against them).

Prints one JSON object: ``{NAME: null}`` for an environment that passed, ``{NAME: "why not"}`` else.
Runs in Harbor's venv (Python >= 3.12): imports Harbor and the standard library only.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys

__all__ = ["check", "main"]


def check(name: str) -> str | None:
    """Harbor's preflight of one environment type.

    Args:
        name: an ``EnvironmentType`` value (``docker``, ``podman``, ``daytona``, ...).

    Returns:
        None when it passed, else Harbor's reason (one line).
    """
    from harbor.environments.factory import EnvironmentFactory
    from harbor.models.environment_type import EnvironmentType

    try:
        kind = EnvironmentType(name)
    except ValueError:
        return f"not an environment type of Harbor {_version()}"
    if kind is EnvironmentType.SINGULARITY and shutil.which("singularity") is None:
        return "the singularity binary (Apptainer or SingularityCE) is not on PATH"
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            EnvironmentFactory.run_preflight(kind)
    except SystemExit as exc:
        return _one_line(str(exc.code))
    except ImportError as exc:  # a cloud environment whose SDK extra is not installed
        return _one_line(str(exc))
    except Exception as exc:  # noqa: BLE001 - any other refusal of Harbor's, named
        return _one_line(f"{type(exc).__name__}: {exc}")
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())[:600]


def _version() -> str:
    from importlib.metadata import version

    return version("harbor")


def main(argv: list[str]) -> int:
    """Print the JSON answer for `argv` (environment type names, or ``--types``)."""
    if argv == ["--types"]:
        from harbor.models.environment_type import EnvironmentType

        print(json.dumps({"version": _version(), "types": [t.value for t in EnvironmentType]}))
        return 0
    print(json.dumps({name: check(name) for name in argv}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
