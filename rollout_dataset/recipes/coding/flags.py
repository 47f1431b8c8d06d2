"""The `rollout-dataset capture` flags that are the coding environment's own.

The CLI adds them to the ``--env coding options`` group and refuses them with another ``--env``
(`rollout_dataset.envs.base.CaptureFlag`); each `dest` is a field of `CaptureConfig`, except
``--sandbox-ro`` whose values become ``sandbox_ro_paths``.
"""

from __future__ import annotations

from rollout_dataset.envs.base import CaptureFlag

__all__ = ["CODING_FLAGS"]

CODING_FLAGS: tuple[CaptureFlag, ...] = (
    CaptureFlag("--task-index", "which task of the selected list", default=0, type=int),
    CaptureFlag("--n-prompts", "size of the selected task list", default=64, type=int),
    CaptureFlag("--tasks", "builtin | FILE (.jsonl/.parquet) | DIR[:SPLIT] (a local dataset folder, read by datasets) | "
                           "hf:ORG/NAME[:SPLIT] | harbor-builtin | DIR of Harbor task folders (task.toml, instruction.md, "
                           "tests/test.sh)", default="builtin"),
    CaptureFlag("--harness", 'builtin | cmd:"COMMAND" ({base_url} {model} {task_file} {workdir}) | '
                             "mini-swe-agent | opencode | codex | claude-code | terminus-2 (Harbor tasks; make harbor) | "
                             "harbor:opencode|codex|claude-code|mini-swe-agent (Harbor's agent inside the task's "
                             "Podman container; docs/harbor.md)",
                default="builtin"),
    CaptureFlag("--harbor-env", "where terminus-2 runs a Harbor task: auto (bwrap for a task that needs no image, else "
                                "the first of docker, podman, singularity that works here) | bwrap | any Harbor "
                                "environment type (docker, podman, singularity, daytona, modal, e2b, runloop, ...; "
                                "docs/harbor.md)", default="auto", metavar="ENV"),
    CaptureFlag("--policy", "local backend policy: oracle | script | echo", default="oracle"),
    CaptureFlag("--script", "script file of the local backend's script policy"),
    CaptureFlag("--keep-workdir", "copy the agent's working directory to OUT/workdir", default=False,
                action="store_true"),
    CaptureFlag("--sandbox-ro", "a file or folder an external harness needs read-only in its sandbox (repeatable); "
                                "the program its command runs (by absolute path) is exposed anyway",
                action="append", metavar="PATH"),
    CaptureFlag("--unsafe-sandbox", "run the agent's code even where the allow-list sandbox (bubblewrap) cannot be "
                                    "built: limits only, no isolation (summary.json records isolation: unsafe)",
                default=False, action="store_true"),
)
