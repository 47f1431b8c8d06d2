"""Harbor (PyPI `harbor`) tasks and its terminus-2 agent, run through the recording proxy (docs/harbor.md).

- `bwrap_environment`: a Harbor `BaseEnvironment` on bubblewrap (`--env
  rollout_dataset.harbor.bwrap_environment:BwrapEnvironment`). It runs inside Harbor's own venv
  (Python >= 3.12), so it imports only Harbor, the standard library, `bwrap_root` and `reaper`;
- `bwrap_root`: the task's root folder and the bwrap command line of one exec (standard library only;
  also the host-side verifier of a Harbor task run by another harness);
- `reaper`: kills an environment's processes and removes its root, at stop or once Harbor dies;
- `adapter`: runs `harbor trials start` with terminus-2 for one capture and reads its result.

Harbor task folders as a task source are `rollout_dataset.tasks.harbor_format`. Nothing here is
imported by this package's `__init__`: the project's own venv never imports Harbor.
"""
