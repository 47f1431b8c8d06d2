"""Harbor (PyPI `harbor`) tasks and its terminus-2 agent, run through the recording proxy.

- `bwrap_environment`: a Harbor `BaseEnvironment` on bubblewrap (`--env
  rollout_dataset.harbor.bwrap_environment:BwrapEnvironment`). It runs inside Harbor's own venv
  (Python >= 3.12), so it imports only Harbor, the standard library and `reaper` (stdlib only);
- `reaper`: kills an environment's processes and removes its root once Harbor is gone;
- `tasks`: Harbor task folders (`task.toml`, `instruction.md`, `tests/`, `solution/`) as a task source;
- `adapter`: runs `harbor trials start` with terminus-2 for one capture and reads its result.

Nothing here is imported by this package's own `__init__`: the project's venv never imports Harbor.
"""
