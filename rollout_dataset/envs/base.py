"""The environment seam: what an environment gives the one capture pipeline.

An environment (coding tasks, Crafter, or a third-party package's) is a small object; everything
around it — the local backend, the recording proxy, the trace, the export, the documents, the
writing, the validation and the push — is the capture pipeline's job
(`rollout_dataset.capture.pipeline.run_capture`), identical for every environment:

    environment.prepare(config)        -> Episode      (pick the task; refuse bad settings at once)
    environment.capture_settings(config) -> CaptureSettings  (server, proxy, output folder, push)
    episode.run(AgentContext)          -> AgentOutcome (the agent plays against the proxy's base URL)
    episode.score(records, turns, ...) -> Score        (env reward, held-out tests or not, leakage)
    episode.task(outcome)              -> TaskInfo     (`task.json`, `held_out_tests.json`, `visible_tests.txt`)
    episode.rollout_metadata(...), episode.summary_fields(...), episode.extra_files(...)

Small protocols, in the spirit of tinker-cookbook's `rl/types.py` (`Env`, `EnvGroupBuilder`):
the core is small and an environment is a recipe over it. This module imports no concrete
environment and nothing of the pipeline (checked by `tests/test_layering.py`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

__all__ = [
    "AgentContext",
    "AgentOutcome",
    "CaptureFlag",
    "CaptureSettings",
    "Environment",
    "EnvironmentBase",
    "Episode",
    "Score",
    "TaskInfo",
]


@dataclass(frozen=True)
class TaskInfo:
    """What a task is, as `task.json` records it (one definition of its fields).

    Attributes:
        env: the environment's name (`--env`).
        task_id: a stable id of the task (e.g. a coding task's id, `crafter-seed-3`).
        task_index: the index the user asked for (0 where there is no list).
        title: one line for humans.
        instruction: what the agent was told (statement, first observation, ...).
        source: where the task comes from (`builtin`, a file, a dataset, the environment's name).
        dataset_seed: the seed that picked the task (a world seed for a game).
        rollout_seed: the seed of this rollout's requests.
        n_prompts: size of the task list the index points into (1 where there is no list).
        config: the settings as recorded (never a credential).
        held_out_tests: `[{"input", "output"}]` that produce the reward, never shown to the agent
            (empty for environments without tests: `held_out_tests.json` lists none, never missing).
        visible_tests: the text of `visible_tests.txt` (empty when the environment has no tests).
    """

    env: str
    task_id: str
    task_index: int
    title: str
    instruction: str
    source: str
    dataset_seed: int
    rollout_seed: int
    n_prompts: int
    config: Mapping[str, Any]
    held_out_tests: Sequence[Mapping[str, str]] = ()
    visible_tests: str = ""


@dataclass(frozen=True)
class CaptureFlag:
    """One `rollout-dataset capture` flag an environment declares as its own.

    The CLI adds every environment's flags to a group of their own (``--env NAME options``), passes
    a given value to the environment's configuration as the field named `dest`, and refuses a flag
    of another environment by name. A plugin declares its flags the same way.

    Attributes:
        flag: the option string, e.g. ``"--max-steps"``.
        help: one line for ``-h`` and the CLI reference.
        default: the value when the flag is not given (a flag is "given" when its value differs).
        type: argparse's ``type`` (None: a string, or no value for a ``store_true`` action).
        metavar: argparse's ``metavar``.
        action: argparse's ``action`` (``"store_true"``, ``"append"``) or None.
    """

    flag: str
    help: str
    default: Any = None
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    action: str | None = None

    @property
    def dest(self) -> str:
        """The argparse destination, which is also the configuration field's name."""
        return self.flag.lstrip("-").replace("-", "_")

    def argparse_options(self) -> dict[str, Any]:
        """The keywords of `ArgumentParser.add_argument` for this flag."""
        options: dict[str, Any] = {"help": self.help, "default": [] if self.action == "append" else self.default}
        for name in ("type", "metavar", "action"):
            if getattr(self, name) is not None:
                options[name] = getattr(self, name)
        return options


@dataclass(frozen=True)
class CaptureSettings:
    """What the pipeline needs from an environment's configuration (server, proxy, folder, push).

    Attributes:
        out_dir: the artifact folder.
        base_url: an OpenAI-compatible server; None starts the local backend with `backend_policy`.
        model: the model name; None: the local backend's served name, else the server's first model.
        api_key: the real key of `base_url` (the proxy sends it; the agent gets a dummy key).
        rollout_id: the rollout id (32 hex); None draws a uuid4.
        tokenizer: tokenizer for the export's re-render check and `samples.md` (None: `builtin`
            with the local backend; else the model's, when cached locally).
        backend_policy: the local backend's policy name (the environment's scripted player).
        policy_options: keywords of that policy (`make_policy(name, **options)`).
        served_model_name: the local backend's model name.
        local_max_model_len: the local backend's context length (None: the backend's default).
        on_policy: the proxy's on-policy mode.
        max_tokens_cap: the proxy lowers every output limit to at most this (None: no cap).
        fit_context: the proxy fits output limits to the model's context.
        push_repo: push the folder to this Hub repo when it validates (None: no push).
        push_private: create a new `push_repo` private (None: the Hub's default).
        trust_env: reach `base_url` honouring the environment's proxy and CA variables, as httpx's
            ``trust_env`` (`rollout_dataset.proxy.trust_env`); the local backend is always reached directly.
        more_upstreams: more model servers serving the same model as `base_url` (``--upstream`` repeated):
            the rollout's proxy places its session on the least loaded healthy one and moves it off one that
            fails (`rollout_dataset.proxy.upstream_pool`); needs `base_url`.
    """

    out_dir: Path
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    rollout_id: str | None = None
    tokenizer: str | None = None
    backend_policy: str = "echo"
    policy_options: Mapping[str, Any] = field(default_factory=dict)
    served_model_name: str = "local"
    local_max_model_len: int | None = None
    on_policy: bool = False
    max_tokens_cap: int | None = None
    fit_context: bool = False
    trust_env: bool = True
    push_repo: str | None = None
    push_private: bool | None = None
    more_upstreams: tuple[str, ...] = ()


@dataclass
class AgentContext:
    """How the agent reaches the model: given by the pipeline to `Episode.run`.

    Attributes:
        base_url: the proxy's session URL (ends in `/v1`): every call the agent makes there is recorded.
            Inside a sandbox an external harness reaches the same URL (the proxy's port is carried in).
        model: the model name to send.
        api_key: a per-rollout dummy key (the proxy drops it and sends the real one upstream).
        report_url: the upstream URL to name in error messages (redacted).
        trace_path: the session's trace file (an external harness's watcher polls it).
        stack: an exit stack open until the rollout is scored (sandboxes, temporary folders).
        secrets: values redacted from every artifact (for files an environment copies itself).
        out_dir: the artifact folder (to hide it from the agent).
        context_length: the model's `max_model_len` as the server reports it (None when unknown).
        raise_first_call: raise the named upstream error of a failed first call's trace record.
    """

    base_url: str
    model: str
    api_key: str
    report_url: str
    trace_path: Path
    stack: contextlib.ExitStack
    secrets: Sequence[str]
    out_dir: Path
    context_length: Callable[[], int | None] = lambda: None
    raise_first_call: Callable[[Mapping[str, Any]], None] = lambda record: None


@dataclass
class AgentOutcome:
    """What the agent's run ended with.

    Attributes:
        stop_reason: why it stopped (`final_answer`, `turn_budget`, `timeout`, `episode_done`, ...).
        timed_out: the wall-time budget ran out.
        errors: `[{"kind", "message"}]` of the run (an upstream error mid-rollout, a harness crash).
        decisions: per-decision records (`CaptureResult.decisions`).
        state: anything the environment keeps for scoring (its own result object).
    """

    stop_reason: str
    timed_out: bool = False
    errors: list[dict[str, str]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    state: Any = None


@dataclass
class Score:
    """How the rollout is scored (`summary.json`'s reward fields).

    Attributes:
        env_reward: the environment's reward (None: could not be scored).
        reward_after_penalties: `env_reward` after penalties (`rewards.penalties`).
        penalties: `[{"name", "value", ...}]` applied.
        held_out_tests: how many held-out tests produced the reward (0: none, e.g. a game).
        held_out_passed: how many passed (None when not scored by tests).
        verifier: scored by a verifier on held-out tests; `summary.json` then reports `unscored_reason`.
        unscored_reason: why `env_reward` is None (with `verifier`).
        leakage_hits: held-out text found where the agent could see it (`LeakHit.to_dict()`s);
            None when the environment has nothing to leak (`leakage.checked` is then false).
        samples_header: the `samples.md` header fields after the rollout id.
    """

    env_reward: float | None
    reward_after_penalties: float | None
    penalties: list[dict[str, Any]] = field(default_factory=list)
    held_out_tests: int = 0
    held_out_passed: int | None = None
    verifier: bool = False
    unscored_reason: str | None = None
    leakage_hits: list[dict[str, Any]] | None = None
    samples_header: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Episode(Protocol):
    """One prepared rollout of an environment (its task chosen, nothing started yet).

    Attributes:
        session: the proxy session's name (None: the rollout id).
        harness: the harness name recorded in `summary.json`.

    Optional: `harness_version() -> str | None`, the harness's installed version for the
    provenance in `summary.json` (coding's presets); without it the version is None.
    """

    # read-only members (properties): a class attribute of a narrower type, `session = "crafter"`,
    # satisfies them, as a plain annotation (settable, so invariant) would not
    @property
    def session(self) -> str | None:
        """The proxy session's name (None: the rollout id)."""

    @property
    def harness(self) -> str:
        """The harness name recorded in `summary.json`."""

    def run(self, agent: AgentContext) -> AgentOutcome:
        """Run the agent against `agent.base_url` until it stops.

        Raises:
            UpstreamError: the model server failed on the first call (named status and URL).
        """

    def score(self, records: list[dict[str, Any]], turns: dict[str, Any], outcome: AgentOutcome,
              agent: AgentContext) -> Score:
        """Score the rollout (held-out tests, the game's achievements, ...) while `agent.stack` is open.

        Args:
            records: the session's trace records.
            turns: the `turns.json` document (tool calls per agent turn, for penalties).
            outcome: what `run` returned.
            agent: the run's context (its stack still open).
        """

    def task(self, outcome: AgentOutcome) -> TaskInfo:
        """The task as recorded (its instruction may hold what the run showed first)."""

    def rollout_metadata(self, rollout_id: str, model: str, outcome: AgentOutcome) -> dict[str, Any]:
        """`rollout.json`'s `metadata` (env, task id, rollout id, model, harness, seeds, episode facts)."""

    def summary_fields(self, facts: Mapping[str, Any], outcome: AgentOutcome) -> dict[str, Any]:
        """The environment's own `summary.json` fields, after `errors`.

        Args:
            facts: what the pipeline knows of the capture: `provenance_target`, `model`,
                `continuity`, `context_fit` (see `rollout_dataset.capture.pipeline`).
        """

    def extra_files(self, outcome: AgentOutcome) -> dict[str, Any]:
        """Artifact files beyond the eight of every rollout: name -> JSON document or text
        (e.g. `achievements.json`, the per-decision achievement timeline)."""


class Environment(Protocol):
    """An environment family: the one registry (`rollout_dataset.envs.registry`) holds these.

    `EnvironmentBase` gives every method but `config_class`, `capture_settings` and `prepare`
    a default, so a new environment writes only what is its own.

    Attributes:
        name: the `--env` name.
        description: one line for help texts.
        default_policy: the local backend's scripted player for it (registered by the
            environment, see `rollout_dataset.envs.registry`).
        capture_flags: the `capture` flags that are this environment's own (`CaptureFlag`).
        flag_scope: how a refusal names what the flags are for (e.g. "a game environment"), or
            None to name the environment only.
    """

    # read-only members, as in `Episode`
    @property
    def name(self) -> str:
        """The `--env` name."""

    @property
    def description(self) -> str:
        """One line for help texts."""

    @property
    def default_policy(self) -> str:
        """The local backend's scripted player for it."""

    @property
    def capture_flags(self) -> Sequence[CaptureFlag]:
        """The `capture` flags that are this environment's own."""

    @property
    def flag_scope(self) -> str | None:
        """How a refusal names what the flags are for, or None to name the environment only."""

    def config_class(self) -> type:
        """The dataclass configuring one rollout (`CaptureConfig` for coding)."""

    def capture_settings(self, config: Any) -> CaptureSettings:
        """What the pipeline needs of `config`."""

    def prepare(self, config: Any) -> Episode:
        """Choose the task and check the settings, before any server starts.

        Raises:
            ConfigError / TaskIndexError / ValueError: bad settings, named.
        """

    def batch_options(self, config: Any) -> dict[str, Any]:
        """Check a `BatchConfig`'s `env_options` (and what else must hold before a batch starts).

        Raises:
            ConfigError: an option the environment does not take, or a value out of range.
        """

    def policy_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Keywords of `default_policy` for a batch's shared local backend, from `batch_options`."""

    def batch_config(self, config: Any, job: Any, options: Mapping[str, Any]) -> Any:
        """The rollout configuration of one batch job.

        Args:
            config: the `BatchConfig`.
            job: the `RolloutJob` (`seed`, `rollout_idx`, `rollout_id`, `artifact_dir`, `settings`).
            options: what `batch_options` returned.
        """

    def batch_result(self, result: Any, captured: Any) -> Any:
        """The batch's `RolloutResult` of one rollout, from the shared reading of its folder
        (`rewards.results.read_rollout_result`) and its `CaptureResult`."""

    def achievements(self, folder: Path) -> Any:
        """The timeline for stepwise rewards when the folder has no `achievements.json`:
        `(timeline, initial)` (coding replays its trace), or None."""


class EnvironmentBase:
    """Defaults for an `Environment`: no batch options, no policy options, the shared reading of
    the artifact folder as the batch result, achievements only from `achievements.json`."""

    name: str = ""
    description: str = ""
    default_policy: str = "echo"
    capture_flags: Sequence[CaptureFlag] = ()
    flag_scope: str | None = None

    def batch_options(self, config: Any) -> dict[str, Any]:
        """No options: any `--env-option` is refused (naming the environment).

        Raises:
            ConfigError: options were given.
        """
        if getattr(config, "env_options", None):
            from rollout_dataset.errors import ConfigError

            names = ", ".join(sorted(config.env_options))
            raise ConfigError(f"--env-option: the {self.name} environment takes no options (got {names})")
        return {}

    def policy_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """No keywords for the scripted player."""
        return {}

    def batch_result(self, result: Any, captured: Any) -> Any:
        """The shared reading, unchanged."""
        return result

    def achievements(self, folder: Path) -> Any:
        """None: the timeline is what `achievements.json` holds (or empty)."""
        return None
