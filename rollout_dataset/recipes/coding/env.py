"""The coding environment: a task of a task set, a harness in the allow-list sandbox, a verifier.

It wraps the packages that do the work (`rollout_dataset.tasks`: task sets and selection;
`rollout_dataset.harness`: the built-in agent and external harnesses; `rollout_dataset.sandbox`:
the sandbox and the verifier) behind the `Environment` seam, so the one capture pipeline
(`rollout_dataset.capture.pipeline`) runs it like any other. Its configuration is `CaptureConfig`.

- task: index `task_index` of the list `load_tasks(tasks, n_prompts, seed)`; its held-out tests
  produce the reward and never reach the agent (the task files, the output folder and the batch's
  rollouts folder are outside the sandbox's root, and masked besides);
- run: the built-in harness, or an external one (`cmd:`, mini-swe-agent, opencode, codex) whose
  first failed model call stops it at once;
- score: `solution.py` on the held-out tests in fresh sandboxes; penalties; the leakage scan;
- the local backend's player: `oracle` (`recipes/coding/policy.py`).
"""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path
from typing import Any, Mapping

from rollout_dataset.recipes.coding.config import CaptureConfig
from rollout_dataset.recipes.coding.flags import CODING_FLAGS
from rollout_dataset.envs.base import AgentContext, AgentOutcome, CaptureSettings, EnvironmentBase, Score, TaskInfo
from rollout_dataset.recipes.coding.harbor_tasks import TERMINUS_HARNESS
from rollout_dataset.recipes.coding.statement import SOLUTION_NOTE, harness_statement

__all__ = ["CodingEnvironment", "CodingEpisode", "coding_task_count"]

logger = logging.getLogger(__name__)

_TASK_COUNT_LOCK = threading.Lock()
_TASK_COUNTS: dict[tuple[str, int], int] = {}


def coding_task_count(tasks: str, n_prompts: int) -> int:
    """How many tasks the capture's task list holds for `(tasks, n_prompts)` (seed 0), cached."""
    key = (tasks, n_prompts)
    with _TASK_COUNT_LOCK:
        if key not in _TASK_COUNTS:
            from rollout_dataset.tasks import load_tasks

            _TASK_COUNTS[key] = len(load_tasks(source=tasks, n_prompts=n_prompts, seed=0))
        return _TASK_COUNTS[key]


class _TraceWatch:
    """Polls a session's trace file; says stop when the first generation call failed or the context is full."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = -1
        self.failed: dict[str, Any] | None = None

    def __call__(self) -> str | None:
        from rollout_dataset.capture.model_server import first_call_failure
        from rollout_dataset.proxy import read_trace
        from rollout_dataset.proxy.context_fit import CONTEXT_EXHAUSTED, exhausted_call

        try:
            size = self.path.stat().st_size
        except OSError:
            return None
        if size == self.size:
            return None
        self.size = size
        records = read_trace(self.path)
        self.failed = first_call_failure(records)
        if self.failed:
            return "upstream_error"
        return CONTEXT_EXHAUSTED if exhausted_call(records) is not None else None


class CodingEpisode:
    """One coding rollout: its task chosen, its harness resolved (see `CodingEnvironment.prepare`)."""

    session = None  # the proxy session is named by the rollout id

    def __init__(self, config: CaptureConfig, task: Any, preset: Any, isolation: str) -> None:
        self.config = config
        self.task_ = task
        self.preset = preset
        self.isolation = isolation
        self.harness = config.harness
        from rollout_dataset.tasks.harbor_format import harbor_task_dir

        self.harbor_dir = harbor_task_dir(task)  # a Harbor task: its instruction.md already says where the work goes
        self.statement = task.instruction if self.harbor_dir else harness_statement(task.instruction)
        self.box: Any = None
        self.exit_code: int | None = None
        self.model: str | None = None
        self.harbor_run: Any = None
        self.harbor_facts: dict[str, Any] | None = None
        self.harbor_choice: Any = None  # terminus-2: the environment chosen in `prepare` (`harbor.environments`)

    def harness_version(self) -> str | None:
        """The installed version of the harness preset (`summary.json` provenance), None if unknown."""
        from rollout_dataset.harness.versions import harness_version

        return harness_version(self.harness)

    def run(self, agent: AgentContext) -> AgentOutcome:
        """The harness in the allow-list sandbox, against the proxy's session URL (terminus-2: Harbor runs it)."""
        if self.preset is not None and _runs_in_harbor(self.preset.name):
            if self.harbor_dir is None:  # _check_harbor_harness refuses this before a rollout starts
                from rollout_dataset.errors import ConfigError

                raise ConfigError(f"--harness {self.preset.name} runs Harbor tasks; task {self.task_.task_id!r} is not one")
            return self._run_terminus(self.harbor_dir, agent)
        from rollout_dataset.recipes.coding.hiding import capture_hidden_paths
        from rollout_dataset.harness import BuiltinAgent, ToolBox, resolve_harness, run_external_harness
        from rollout_dataset.harness.presets import CONTEXT_AWARE_PRESETS
        from rollout_dataset.harness.tools import sandbox_runner
        from rollout_dataset.sandbox import Sandbox

        config, task, preset = self.config, self.task_, self.preset
        self.model = agent.model
        if preset is not None and preset.name in CONTEXT_AWARE_PRESETS and config.fit_context:
            preset = resolve_harness(config.harness, context_tokens=agent.context_length(),
                                     output_tokens=config.max_tokens_cap) or preset
        # held-out isolation: the agent's code runs in the allow-list root (none of the task files, this
        # rollout's folder, its siblings or the trace are in it); these paths are masked as a second line
        hidden = capture_hidden_paths(task, agent.out_dir, config.hide_paths)
        box = self.box = agent.stack.enter_context(Sandbox(hide_paths=hidden, unsafe=config.unsafe_sandbox))
        if preset is None:
            toolbox = ToolBox(box.workdir, [(t.input, t.output) for t in task.visible_tests], sandbox_runner(box))
            builtin = BuiltinAgent(agent.base_url, agent.model, toolbox, api_key=agent.api_key,
                                   max_turns=config.max_turns, timeout_s=config.timeout_s,
                                   seed=config.effective_rollout_seed, temperature=config.temperature,
                                   max_tokens=config.max_tokens, report_url=agent.report_url)
            result = builtin.run(self.statement)
            errors = [{"kind": "upstream_error", "message": result.error}] if result.error else []
            return AgentOutcome(result.stop_reason, result.timed_out, errors, result.decisions)
        watch = _TraceWatch(agent.trace_path)
        ext = run_external_harness(preset.command, base_url=agent.base_url, model=agent.model, workdir=box.workdir,
                                   instruction=self.statement, api_key=agent.api_key,
                                   timeout_s=config.timeout_s, env=preset.env, should_stop=watch,
                                   hide_paths=hidden, ro_paths=[*preset.ro_paths, *config.sandbox_ro_paths],
                                   unsafe=config.unsafe_sandbox)
        stop_reason, self.exit_code = ext.stop_reason, ext.exit_code
        watch()  # the last calls' records
        if ext.stop_reason == "upstream_error" or watch.failed:
            from rollout_dataset.capture.model_server import first_call_failure
            from rollout_dataset.proxy import read_trace

            agent.raise_first_call(watch.failed or first_call_failure(read_trace(agent.trace_path)) or {})
        errors = []
        if ext.stop_reason == "harness_exit" and ext.exit_code not in (0, None):
            errors.append({"kind": "harness_error", "message":
                           f"{preset.name} exited with status {ext.exit_code}: {ext.stderr_tail[-600:]}"})
            stop_reason = "harness_error"
        return AgentOutcome(stop_reason, ext.timed_out, errors, [])

    def _run_terminus(self, harbor_dir: Path, agent: AgentContext) -> AgentOutcome:
        """Harbor's trial of the task, through the proxy: terminus-2 (calls from the host, in the bubblewrap or a
        container environment), or an installed agent inside the task's container (``harbor:NAME``)."""
        import tempfile
        import uuid

        from rollout_dataset.harbor.adapter import run_terminus
        from rollout_dataset.harbor.installed import installed_agent, run_installed_agent
        from rollout_dataset.recipes.coding.harbor_tasks import INCOMPLETE, marked_complete, terminus_agent_kwargs

        config = self.config
        trials = Path(agent.stack.enter_context(tempfile.TemporaryDirectory(prefix="rollout-harbor-trial-")))
        context = agent.context_length() if config.fit_context else None
        kwargs = terminus_agent_kwargs(temperature=config.temperature, max_tokens=config.max_tokens,
                                       seed=config.effective_rollout_seed, context_tokens=context,
                                       max_turns=config.max_turns)
        watch = _TraceWatch(agent.trace_path)
        fields = self.task_.metadata["harbor"]
        # the agent's budget: --timeout-s, or the task's [agent] timeout_sec when shorter
        budget = min(config.timeout_s, float(fields.get("agent_timeout_sec") or config.timeout_s))
        verifier_timeout = float(fields.get("verifier_timeout_sec") or 600.0)
        # Harbor names the environment (a compose project, under Podman) after the trial: one name per rollout, so
        # two rollouts running at once never share, or tear down, each other's containers
        trial_name = f"rd-{uuid.uuid4().hex[:16]}"
        installed = installed_agent(config.harness)
        if installed is not None:
            run = self.harbor_run = run_installed_agent(harbor_dir, trials, agent=installed, base_url=agent.base_url,
                                                        model=agent.model, api_key=agent.api_key, timeout_s=budget,
                                                        should_stop=watch, verifier_timeout_s=verifier_timeout,
                                                        trial_name=trial_name)
        else:
            run = self.harbor_run = run_terminus(harbor_dir, trials, base_url=agent.base_url, model=agent.model,
                                                 api_key=agent.api_key, timeout_s=budget, agent_kwargs=kwargs,
                                                 should_stop=watch, environment=self.harbor_choice.name,
                                                 verifier_timeout_s=verifier_timeout, trial_name=trial_name)
        watch()
        if run.stop_reason == "upstream_error" or watch.failed:
            from rollout_dataset.capture.model_server import first_call_failure
            from rollout_dataset.proxy import read_trace

            agent.raise_first_call(watch.failed or first_call_failure(read_trace(agent.trace_path)) or {})
        self.exit_code = run.exit_code
        errors, stop_reason = [], run.stop_reason
        if run.exception and run.stop_reason != "timeout":
            errors.append({"kind": "harness_error", "message": f"Harbor's trial raised {run.exception}"[:800]})
        elif run.stop_reason == "harness_exit" and run.exit_code not in (0, None):
            errors.append({"kind": "harness_error", "message": f"harbor exited with status {run.exit_code}: "
                                                               f"{run.stderr_tail[-600:]}"})
        if errors and stop_reason == "harness_exit":
            stop_reason = "harness_error"
        elif (installed is None and stop_reason == "harness_exit" and run.trajectory is not None
              and not marked_complete(run.trajectory)):
            stop_reason = INCOMPLETE  # e.g. its tmux session was killed: terminus-2 then ends quietly
            logger.warning("terminus-2 ended without marking the task complete")
        return AgentOutcome(stop_reason, run.stop_reason == "timeout", errors, [])

    def _score_harbor(self, harbor_dir: Path, records: list[dict[str, Any]], outcome: AgentOutcome) -> Score:
        """The task's own verifier: Harbor's (terminus-2) or tests/test.sh on the harness's files; the leakage scan."""
        from rollout_dataset.recipes.coding.harbor_tasks import (crosscheck_trajectory, harbor_leak_needles,
                                                                 verify_harbor_task)
        from rollout_dataset.recipes.coding.leakage import scan_for_leaks

        task, fields = self.task_, dict(self.task_.metadata.get("harbor") or {})
        run = self.harbor_run
        asked = fields.get("network_mode")
        facts: dict[str, Any] = {"task_dir": str(harbor_dir),
                                 "network": {"asked": asked, "given": _network_given(self.harness, fields)}}
        if run is not None:
            reward, why = run.reward, None
            if reward is None:
                why = run.exception or "Harbor's verifier gave no reward"
            choice = self.harbor_choice
            if choice is not None:  # terminus-2: the environment `prepare` chose
                facts.update(choice.facts())  # environment, base_image, what was checked, notes
                # the bwrap environment never has a network; Harbor's own apply the task's network_mode
                facts["network"]["given"] = "none" if choice.network_given == "none" else asked
            else:  # an installed agent: Harbor's podman environment with the proxy's port carried in
                from rollout_dataset.harbor.installed import PROXIED_PODMAN_SPEC

                facts["environment"] = PROXIED_PODMAN_SPEC
            main = run.trajectory
            if run.step_trajectories:  # a multi-step task: its steps' trajectories, in step order, checked as one
                main = {"steps": [s for name in run.step_trajectories for s in run.step_trajectories[name].get("steps") or []]}
            facts.update({"trial": run.trial_dir.name, "reward_source": "harbor_verifier",
                          "exception": run.exception, "rewards": run.rewards, "wall_s": round(run.wall_s, 3),
                          "trajectory": crosscheck_trajectory(main, records, run.subagent_trajectories)})
            if self.harness != TERMINUS_HARNESS:  # an installed agent's ATIF carries no token ids to match
                facts["trajectory"] = {"agent_steps": sum(1 for step in (run.trajectory or {}).get("steps") or []
                                                          if step.get("source") == "agent"),
                                       "calls": facts["trajectory"]["calls"], "findings": []}
            if run.steps:
                facts["steps"] = run.steps
        else:
            reward, why = verify_harbor_task(harbor_dir, self.box.workdir, fields)
            facts.update({"environment": "rollout-bwrap", "reward_source": "tests/test.sh", "exception": None})
            if reward is not None and why:
                facts["verifier_note"] = why  # a verifier killed by a signal: scored 0, and why
        if reward is not None and not (math.isfinite(reward) and 0.0 <= reward <= 1.0):
            reward, why = None, f"the verifier's reward {reward!r} is not a number in [0, 1]"  # a summary's env_reward
        self.harbor_facts = facts
        needles = harbor_leak_needles(self.statement, list(task.metadata.get("held_out_text") or []))
        hits = scan_for_leaks(self.statement, needles, records, None)
        return Score(env_reward=reward, reward_after_penalties=reward, held_out_tests=0, verifier=True,
                     unscored_reason=why if reward is None else None, leakage_hits=[h.to_dict() for h in hits],
                     samples_header={"task": task.task_id, "reward": reward})

    def score(self, records: list[dict[str, Any]], turns: dict[str, Any], outcome: AgentOutcome,
              agent: AgentContext) -> Score:
        """`solution.py` on the held-out tests, penalties, the leakage scan (and `--keep-workdir`);
        a Harbor task's own verifier for a Harbor task."""
        if self.harbor_dir is not None:
            return self._score_harbor(self.harbor_dir, records, outcome)
        from rollout_dataset.documents import agent_tool_counts
        from rollout_dataset.recipes.coding.leakage import scan_for_leaks
        from rollout_dataset.recipes.coding.workdir import copy_workdir
        from rollout_dataset.rewards.penalties import compute_penalties, reward_after_penalties
        from rollout_dataset.sandbox import verify_solution

        config, task = self.config, self.task_
        verdict = verify_solution(task, self.box.workdir, unsafe=config.unsafe_sandbox)
        hits = scan_for_leaks(self.statement, task.held_out_tests, records, self.box.workdir)
        if config.keep_workdir:
            copy_workdir(self.box.workdir, agent.out_dir, agent.secrets)
        by_name = agent_tool_counts(turns)
        ran_code = None if self.preset is not None else any(d.get("ran_code") for d in outcome.decisions)
        penalties = compute_penalties(by_name, ran_code, config.penalties)
        env_reward = verdict.env_reward
        passed = verdict.passed if env_reward is not None else None
        return Score(env_reward=env_reward, reward_after_penalties=reward_after_penalties(env_reward, penalties),
                     penalties=penalties, held_out_tests=len(task.held_out_tests), held_out_passed=passed,
                     verifier=True, unscored_reason=verdict.unscored_reason,
                     leakage_hits=[h.to_dict() for h in hits],
                     samples_header={"task": task.task_id, "reward": env_reward,
                                     "passed": f"{passed}/{len(task.held_out_tests)}" if passed is not None else None})

    def task(self, outcome: AgentOutcome) -> TaskInfo:
        """The coding task as `task.json` records it."""
        from rollout_dataset.tasks.model import visible_tests_text

        config, task = self.config, self.task_
        return TaskInfo(env="coding", task_id=task.task_id, task_index=config.task_index, title=task.title,
                        instruction=task.instruction, source=task.source, dataset_seed=config.seed,
                        rollout_seed=config.effective_rollout_seed, n_prompts=config.n_prompts,
                        config={**config.public_dict(), "model": self.model, "statement_suffix": SOLUTION_NOTE},
                        held_out_tests=[{"input": t.input, "output": t.output} for t in task.held_out_tests],
                        visible_tests=visible_tests_text(task))

    def rollout_metadata(self, rollout_id: str, model: str, outcome: AgentOutcome) -> dict[str, Any]:
        """`rollout.json` metadata."""
        return {"rollout_id": rollout_id, "task_id": self.task_.task_id, "model": model, "harness": self.harness,
                "env": "coding", "rollout_seed": self.config.effective_rollout_seed}

    def summary_fields(self, facts: Mapping[str, Any], outcome: AgentOutcome) -> dict[str, Any]:
        """The harness's exit code, the sandbox's isolation, provenance, continuity, context fitting."""
        fields = {"harness_exit_code": self.exit_code, "isolation": self.isolation, "provenance": facts["provenance"],
                  "continuity": facts["continuity"], "context_fit": facts["context_fit"]}
        if self.harbor_facts is not None:
            fields["harbor"] = self.harbor_facts
        return fields

    def extra_files(self, outcome: AgentOutcome) -> dict[str, Any]:
        """terminus-2: Harbor's ATIF trajectory (`harbor_trajectory.json`; a multi-step task's, one per step:
        `harbor_trajectory.step-NAME.json`) and its summarisation subagents' (`harbor_trajectory.NAME.json`); else none (the batch replays the trace for the timeline)."""
        from rollout_dataset.recipes.coding.harbor_tasks import HARBOR_TRAJECTORY_FILE

        run = self.harbor_run
        if run is None or not (run.trajectory or run.step_trajectories):
            return {}
        stem = HARBOR_TRAJECTORY_FILE.removesuffix(".json")
        files = {HARBOR_TRAJECTORY_FILE: run.trajectory} if run.trajectory else {}
        files.update({f"{stem}.step-{name}.json": doc for name, doc in run.step_trajectories.items()})
        files.update({f"{stem}.{name}.json": doc for name, doc in run.subagent_trajectories.items()})
        return files


def _skipped_task_folders(source: str) -> list[str]:
    """The folders of a Harbor task set that do not load (one line each; empty for any other source)."""
    from rollout_dataset.tasks.harbor_format import is_harbor_task_set, load_harbor_set

    path = Path(source[5:] if source.startswith("file:") else source).expanduser()
    if not path.is_dir() or not is_harbor_task_set(path):
        return []
    try:
        return load_harbor_set(path)[1]
    except Exception:  # noqa: BLE001 - a set that does not load at all is refused by each rollout, named
        return []


def _runs_in_harbor(harness: str) -> bool:
    """Whether Harbor runs the harness (terminus-2, or an installed agent ``harbor:NAME``)."""
    from rollout_dataset.harbor.installed import HARBOR_PREFIX

    return harness == TERMINUS_HARNESS or harness.startswith(HARBOR_PREFIX)


def _network_given(harness: str, fields: Mapping[str, Any]) -> str:
    """The network the agent had: none (terminus-2 and the built-in harnesses: the host calls the model);
    ``proxy-only`` (an installed agent on a task asking for no network: loopback and the proxy's port);
    ``public`` (an installed agent on a task that asks for it)."""
    from rollout_dataset.harbor.installed import installed_agent

    if installed_agent(harness) is None:
        return "none"
    return "public" if fields.get("network_mode") in (None, "public") else "proxy-only"


def _check_harbor_harness(harness: str, task: Any, harbor_env: str = "auto") -> Any:
    """terminus-2 and Harbor's installed agents (``harbor:NAME``) run Harbor tasks only, and only those whose
    environment this host can provide; a multi-step Harbor task runs under terminus-2 only (Harbor runs its steps).

    Returns:
        terminus-2: the environment chosen (`rollout_dataset.harbor.environments.EnvironmentChoice`); else None.

    Raises:
        ConfigError: terminus-2 or an installed agent on a task that is not a Harbor task; a multi-step task
            with another harness than terminus-2.
        HarborTaskUnsupportedError: no environment asked for (`harbor_env`) can run the task here (named).
        ToolNotInstalledError: Harbor (or, for an installed agent, Podman, a relay program or the agent) is not installed.
    """
    from rollout_dataset.errors import ConfigError, ToolNotInstalledError
    from rollout_dataset.harness.requirements import require_harness_tools
    from rollout_dataset.tasks.harbor_format import HARBOR_BUILTIN_SOURCE, harbor_task_dir

    folder = harbor_task_dir(task)
    if harness != TERMINUS_HARNESS:
        steps = (task.metadata.get("harbor") or {}).get("steps") if folder is not None else None
        if steps:
            raise ConfigError(f"{folder}: a multi-step Harbor task ([[steps]] in task.toml: {len(steps)} steps, "
                              f"steps/NAME/instruction.md); only --harness {TERMINUS_HARNESS} runs it (Harbor runs its "
                              f"steps in one trial), not --harness {harness}")
        if not _runs_in_harbor(harness):
            if harbor_env != "auto":
                logger.warning("--harbor-env %s is for --harness %s; --harness %s runs in the sandbox", harbor_env,
                               TERMINUS_HARNESS, harness)
            return None
    from rollout_dataset.harbor.adapter import HARBOR_INSTALL, find_harbor
    from rollout_dataset.harbor.environments import choose_environment

    if folder is None:
        raise ConfigError(f"--harness {harness} runs Harbor tasks: use --tasks {HARBOR_BUILTIN_SOURCE} or a "
                          f"folder of Harbor task folders (task.toml, instruction.md, tests/test.sh); "
                          f"task {task.task_id!r} comes from {task.source}")
    if harness != TERMINUS_HARNESS:  # an installed agent: Harbor's podman environment, the proxy's port carried in
        if harbor_env not in ("auto", "podman"):
            logger.warning("--harbor-env %s: --harness %s runs in Harbor's podman environment", harbor_env, harness)
        require_harness_tools(harness)
        return None
    harbor = find_harbor()
    choice = choose_environment(folder, harbor_env, harbor=harbor)
    if harbor is None:
        raise ToolNotInstalledError("harbor", HARBOR_INSTALL, f"--harness {TERMINUS_HARNESS}")
    for note in choice.notes:
        logger.warning("%s: %s", folder.name, note)
    return choice


class CodingEnvironment(EnvironmentBase):
    """The built-in coding environment (`--env coding`, the default)."""

    name = "coding"
    description = "coding tasks (stdin -> stdout) solved by a harness in the sandbox, scored on held-out tests"
    default_policy = "oracle"
    capture_flags = CODING_FLAGS

    def config_class(self) -> type:
        """`CaptureConfig`."""
        return CaptureConfig

    def capture_settings(self, config: CaptureConfig) -> CaptureSettings:
        """The pipeline's settings of a `CaptureConfig`."""
        options: dict[str, Any] = {"script": str(config.script)} if config.policy == "script" and config.script else {}
        return CaptureSettings(
            out_dir=Path(config.out_dir), base_url=config.base_url, model=config.model,
            api_key=config.upstream_api_key, rollout_id=config.rollout_id, tokenizer=config.tokenizer,
            backend_policy=config.policy, policy_options=options, served_model_name=config.served_model_name,
            local_max_model_len=config.local_max_model_len, on_policy=config.on_policy,
            max_tokens_cap=config.max_tokens_cap, fit_context=config.fit_context,
            push_repo=config.push_repo, push_private=config.push_private, trust_env=config.trust_env,
            more_upstreams=tuple(config.more_upstreams))

    def prepare(self, config: CaptureConfig) -> CodingEpisode:
        """Resolve the harness, require the sandbox, pick the task.

        Raises:
            ValueError: an unknown harness, or a `sandbox_ro_paths` entry exposing task data.
            SandboxUnavailableError: no allow-list sandbox here and `unsafe_sandbox` is off.
            TaskIndexError / TaskSourceError: the task cannot be picked (the valid range is named).
        """
        from rollout_dataset.harness import resolve_harness
        from rollout_dataset.sandbox.isolation import check_sandbox_ro_paths, require_isolation
        from rollout_dataset.tasks import load_tasks, select_task, warn_of_held_out_leaks

        if config.policy == "script" and not config.script and not config.base_url:
            raise ValueError("--policy script needs --script FILE")
        preset = resolve_harness(config.harness)  # bad --harness fails before anything starts
        isolation = require_isolation(config.unsafe_sandbox)  # no sandbox, no untrusted code (unless opted out)
        check_sandbox_ro_paths(config.sandbox_ro_paths, [config.out_dir])
        tasks = load_tasks(config.tasks, n_prompts=config.n_prompts, seed=config.seed)
        task = select_task(tasks, config.task_index)
        warn_of_held_out_leaks(task)
        choice = _check_harbor_harness(config.harness, task, config.harbor_env)
        logger.info("task index=%d id=%s held_out=%d dataset_seed=%d rollout_seed=%d", config.task_index,
                    task.task_id, len(task.held_out_tests), config.seed, config.effective_rollout_seed)
        episode = CodingEpisode(config, task, preset, isolation)
        episode.harbor_choice = choice
        return episode

    def batch_options(self, config: Any) -> dict[str, Any]:
        """Two options: ``harness=NAME`` (``--env-option harness=claude-code``; default ``builtin``: the
        harness every rollout of the batch runs) and ``harbor_env=ENV`` (where terminus-2 runs Harbor
        tasks: ``auto``, ``bwrap`` or a Harbor environment type; `--harbor-env`); the sandbox must be
        buildable (unless `unsafe_sandbox`).

        Raises:
            ConfigError: another option, an unknown harness or environment.
            SandboxUnavailableError: the allow-list sandbox cannot be built and `unsafe_sandbox` is off.
        """
        from rollout_dataset.errors import ConfigError
        from rollout_dataset.harness.presets import PRESETS
        from rollout_dataset.sandbox.isolation import require_isolation

        options = dict(config.env_options or {})
        from rollout_dataset.harbor.environments import HARBOR_ENV_CHOICES

        harness = str(options.pop("harness", "builtin"))
        harbor_env = str(options.pop("harbor_env", "auto"))
        if options:
            names = ", ".join(sorted(options))
            raise ConfigError(f"--env-option: the coding environment takes only harness=NAME and harbor_env=ENV "
                              f"(got {names})")
        if harbor_env not in HARBOR_ENV_CHOICES:
            raise ConfigError(f"--env-option harbor_env={harbor_env}: unknown; use auto, bwrap or one of Harbor's "
                              f"environment types ({', '.join(HARBOR_ENV_CHOICES[2:])})")
        if harness != "builtin" and harness not in PRESETS and not harness.startswith("cmd:"):
            from rollout_dataset.harbor.installed import installed_agent

            try:
                known = installed_agent(harness) is not None
            except ValueError as exc:
                raise ConfigError(f"--env-option harness={harness}: {exc}") from None
            if not known:
                raise ConfigError(f"--env-option harness={harness}: unknown harness; use builtin, cmd:\"...\", "
                                  f"harbor:NAME or {' or '.join(PRESETS)}")
        require_isolation(config.unsafe_sandbox)  # agents' code runs only in the allow-list sandbox unless opted out
        config.notes.extend(_skipped_task_folders(config.tasks))
        return {"harness": harness, "harbor_env": harbor_env}

    def batch_config(self, config: Any, job: Any, options: Mapping[str, Any]) -> CaptureConfig:
        """Seed `s` runs task index `s mod (number of tasks)` of the list drawn with dataset seed 0;
        rollout `i` of it uses rollout seed `s * 1000 + i`. Each sandbox hides the batch's `rollouts/`."""
        settings = job.settings
        n_tasks = coding_task_count(settings["tasks"], settings["n_prompts"])
        return CaptureConfig(
            out_dir=job.artifact_dir, base_url=settings.get("base_url"), model=settings.get("model"),
            task_index=job.seed % n_tasks, seed=0, rollout_seed=job.seed * 1000 + job.rollout_idx,
            harness=str(options.get("harness", "builtin")), harbor_env=str(options.get("harbor_env", "auto")),
            n_prompts=settings["n_prompts"], tasks=settings["tasks"], timeout_s=settings["timeout_s"],
            max_turns=settings["max_turns"], rollout_id=job.rollout_id,
            tokenizer="builtin" if settings.get("local_backend") else None,
            hide_paths=tuple(settings.get("hide_paths") or ()), on_policy=bool(settings.get("on_policy")),
            max_tokens_cap=settings.get("max_tokens_cap"), fit_context=settings.get("fit_context", True),
            unsafe_sandbox=bool(settings.get("unsafe_sandbox")),
            trust_env=bool(settings.get("trust_env", True)) and not settings.get("local_backend"),
            more_upstreams=tuple(settings.get("more_upstreams") or ()))

    def achievements(self, folder: Path) -> Any:
        """The timeline from `achievements.json`, else replayed from `trace.json` (`recipes.coding.replay`)."""
        from rollout_dataset.recipes.coding.replay import timeline_for_artifacts

        return timeline_for_artifacts(folder)
