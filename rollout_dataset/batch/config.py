"""Configuration of a batch evaluation, and reading its step rewards from files.

The `step_rewards` block (`rollout_dataset.rewards.config.StepRewardConfig`) follows the seed's
shape: `{enabled, mode, strategy, indicator_lambda, weights, k_limits}`. It can come from a TOML or JSON file (top level, under `step_rewards`, or under
`rollout.env_config.step_rewards` as in an RL training config), and flags override the file.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from rollout_dataset.errors import ConfigError
from rollout_dataset.rewards.config import STEP_KEYS, STRATEGIES, StepRewardConfig, parse_k_limits, parse_weights

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "EXECUTORS",
    "BatchConfig",
    "load_step_config",
    "load_json_mapping",
    "parse_seeds",
    "parse_env_option",
]

EXECUTORS = ("local", "ray")
#: the longest wall-time budget of one rollout (`BatchConfig.timeout_s`): one year, far inside what a
#: socket timeout holds (infinity or ~1e10 s overflow it deep inside the rollout, after the batch started).
MAX_TIMEOUT_S = 365 * 24 * 3600.0
#: the most rollouts one batch plans (seeds x rollouts per seed): every planned rollout is held in memory
#: as a job before the first runs, so `--seeds 0-999999999` must be refused, not expanded.
MAX_ROLLOUTS = 1_000_000


def _read_document(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        if path.suffix.lower() == ".toml":
            return tomllib.loads(text)
        return json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not valid {'TOML' if path.suffix.lower() == '.toml' else 'JSON'}: {exc}") from None


def load_step_config(path: str | Path) -> StepRewardConfig:
    """Read a `step_rewards` block from a TOML (`.toml`) or JSON file.

    The block is looked up at `step_rewards`, `env_config.step_rewards`,
    `rollout.env_config.step_rewards`, or is the whole document.

    Args:
        path: the file.

    Returns:
        The validated configuration.

    Raises:
        ConfigError: unreadable or unparsable file, no block found, or an invalid block.
    """
    path = Path(path)
    doc = _read_document(path)
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{path}: expected a table/object at the top level")
    candidates = [
        doc.get("step_rewards"),
        (doc.get("env_config") or {}).get("step_rewards") if isinstance(doc.get("env_config"), Mapping) else None,
    ]
    rollout = doc.get("rollout")
    if isinstance(rollout, Mapping) and isinstance(rollout.get("env_config"), Mapping):
        candidates.append(rollout["env_config"].get("step_rewards"))
    for block in candidates:
        if block is not None:
            return StepRewardConfig.from_mapping(block, source=str(path))
    if set(doc) & STEP_KEYS:
        return StepRewardConfig.from_mapping(doc, source=str(path))
    raise ConfigError(
        f"{path}: no step_rewards block (looked at step_rewards, env_config.step_rewards, "
        "rollout.env_config.step_rewards and the top level)"
    )


def load_json_mapping(path: str | Path, kind: str) -> dict[str, Any]:
    """Read a JSON object file (`--weights-json`, `--k-limits-json`) and validate it.

    Args:
        path: the file.
        kind: `weights` or `k_limits`.

    Returns:
        achievement name -> weight (float) or limit (int).

    Raises:
        ConfigError: unreadable file, not JSON, or a value of the wrong type.
    """
    path = Path(path)
    doc = _read_document(path)
    if kind == "weights":
        return parse_weights(doc, str(path))
    if kind == "k_limits":
        return parse_k_limits(doc, str(path))
    raise ValueError(f"kind must be 'weights' or 'k_limits', got {kind!r}")


def parse_env_option(text: str) -> tuple[str, Any]:
    """Parse one `--env-option KEY=VALUE`; the value is JSON when it parses as JSON, else the text.

    Examples: `max_steps=20` -> `("max_steps", 20)`, `area=[16,16]` -> `("area", [16, 16])`,
    `mode=fast` -> `("mode", "fast")`.

    Args:
        text: the flag's value.

    Returns:
        `(key, value)`.

    Raises:
        ConfigError: no `=`, or an empty key.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--env-option: {text!r} is not KEY=VALUE (example: --env-option max_steps=20)")
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


def parse_seeds(text: str) -> list[int]:
    """Parse `--seeds 0,1,5` (ranges `3-6` allowed) into a list of distinct seeds, order kept.

    Raises:
        ConfigError: an item that is not a non-negative integer or range.
    """
    seeds: list[int] = []
    seen: set[int] = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            if "-" in item[1:]:
                lo, hi = item.split("-", 1)
                values = range(int(lo), int(hi) + 1)
            else:
                values = range(int(item), int(item) + 1)
        except ValueError:
            raise ConfigError(f"--seeds: {item!r} is not an integer or a range like 3-6") from None
        if len(values) + len(seeds) > MAX_ROLLOUTS:
            raise ConfigError(f"--seeds: {item!r} makes more than {MAX_ROLLOUTS} seeds; a batch plans at most "
                              f"{MAX_ROLLOUTS} rollouts")
        for v in values:
            if v < 0:
                raise ConfigError(f"--seeds: {v} is negative; seeds are integers >= 0")
            if v not in seen:
                seen.add(v)
                seeds.append(v)
    if not seeds:
        raise ConfigError("--seeds: no seed given (example: --seeds 0,1,5)")
    return seeds


@dataclass
class BatchConfig:
    """Everything one batch needs.

    Attributes:
        out_dir: the batch folder (re-using it resumes).
        seeds: task-selection seeds; each seed picks one task.
        rollouts_per_seed: rollouts per seed (rollout_idx 0..n-1).
        strategies: step-reward strategies to report (`simple`, `complex` or both).
        step_rewards: the step-reward block (lambda, weights, k_limits); its strategy is replaced
            by each of `strategies` in turn.
        base_url: the OpenAI-compatible inference URL; None starts the local backend.
        model: model name sent to the server (None: the server's first model / the backend's).
        max_turns: agent turn budget per rollout.
        concurrency: rollouts in flight at once.
        executor: `local` (threads) or `ray`.
        progress: show a progress bar on stderr (off by default; the CLI turns it on).
        build_dataset: build `dataset/` from the artifacts at the end.
        tasks: task source passed to capture (`builtin`, a file, `hf:...`).
        n_prompts: size of the task set drawn from the source.
        timeout_s: wall-time budget of one rollout.
        env: environment family (`coding`; others register in `rollout_dataset.batch.job_runner`).
        env_options: environment settings passed to the env's runner (`--env-option KEY=VALUE`;
            Crafter reads `max_steps`, `max_actions`, `area`, `view`); empty for coding.
        argv: the command line, for the config snapshot.
        on_policy: the proxy's on-policy mode for every rollout (coding environment).
        max_tokens_cap: the proxy's cap on every call's output limit (None: none).
        fit_context: the proxy fits output limits to the model's context (default on).
        unsafe_sandbox: run the agents' code even where the allow-list sandbox cannot be built
            (`--unsafe-sandbox`; each summary.json records ``isolation: "unsafe"``).
        push_repo: the Hub dataset repo (``org/name``) the batch publishes to; None: no push
            (the library never reads ``PUSH_TO_DATASET``; the CLI fills this from it).
        push_every: with `push_repo`, push finished rollouts every this many (0: only at the end);
            see `rollout_dataset.batch.streaming`.
        push_private: make a NEW repo private.
        trust_env: the rollouts reach `base_url` honouring HTTP(S)_PROXY / NO_PROXY / SSL_CERT_FILE as
            httpx does (`rollout_dataset.proxy.trust_env`); False ignores them (``--no-trust-env``).
        more_upstreams: more model servers serving the model of `base_url` (``--upstream`` repeated): each
            rollout sticks to one, new rollouts go to the least loaded healthy one (docs/proxy.md).
    """

    out_dir: Path
    seeds: list[int]
    rollouts_per_seed: int = 3
    strategies: tuple[str, ...] = STRATEGIES
    step_rewards: StepRewardConfig = field(default_factory=StepRewardConfig)
    base_url: str | None = None
    model: str | None = None
    max_turns: int = 10
    concurrency: int = 8
    executor: str = "local"
    progress: bool = False
    build_dataset: bool = True
    tasks: str = "builtin"
    n_prompts: int = 64
    timeout_s: float = 900.0
    env: str = "coding"
    env_options: dict[str, Any] = field(default_factory=dict)
    argv: list[str] | None = None
    on_policy: bool = False
    max_tokens_cap: int | None = None
    fit_context: bool = True
    unsafe_sandbox: bool = False
    push_repo: str | None = None
    push_every: int = 0
    push_private: bool | None = None
    trust_env: bool = True
    #: what the environment's `batch_options` noted of the task source (a Harbor folder that does not
    #: load, skipped), one line each: in the config snapshot and the report's "Notes"
    notes: list[str] = field(default_factory=list)

    more_upstreams: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.more_upstreams and not self.base_url:
            raise ConfigError("more_upstreams (--upstream): more model servers need base_url (--base-url), "
                              "whose model they serve")
        if self.max_tokens_cap is not None and self.max_tokens_cap < 1:
            raise ConfigError(f"max_tokens_cap: {self.max_tokens_cap} is out of range (>= 1)")
        self.out_dir = Path(self.out_dir)
        if not self.seeds:
            raise ConfigError("seeds: at least one seed is needed (--num-seeds N or --seeds 0,1,5)")
        if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in self.seeds):
            raise ConfigError(f"seeds: expected integers >= 0, got {self.seeds!r}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"seeds: duplicates in {self.seeds!r}")
        if self.rollouts_per_seed < 1:
            raise ConfigError(f"rollouts_per_seed: {self.rollouts_per_seed} is out of range (>= 1)")
        if len(self.seeds) * self.rollouts_per_seed > MAX_ROLLOUTS:
            raise ConfigError(f"rollouts_per_seed: {len(self.seeds)} seeds x {self.rollouts_per_seed} is more than "
                              f"{MAX_ROLLOUTS} rollouts, the most a batch plans; split it into batches")
        if self.max_turns < 1:
            raise ConfigError(f"max_turns: {self.max_turns} is out of range (>= 1)")
        if self.concurrency < 1:
            raise ConfigError(f"concurrency: {self.concurrency} is out of range (>= 1)")
        if isinstance(self.n_prompts, bool) or not isinstance(self.n_prompts, int) or self.n_prompts < 1:
            raise ConfigError(f"n_prompts: {self.n_prompts!r} is out of range (an integer >= 1)")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) \
                or not math.isfinite(self.timeout_s) or not 0 < self.timeout_s <= MAX_TIMEOUT_S:
            raise ConfigError(f"timeout_s: {self.timeout_s!r} is out of range (seconds, > 0 and <= {MAX_TIMEOUT_S:.0f})")
        if self.executor not in EXECUTORS:
            raise ConfigError(f"executor: {self.executor!r} is not one of {', '.join(EXECUTORS)}")
        if not isinstance(self.env_options, Mapping) or not all(isinstance(k, str) and k for k in self.env_options):
            raise ConfigError(f"env_options: expected a mapping of option name -> value, got {self.env_options!r}")
        self.env_options = dict(self.env_options)
        if isinstance(self.push_every, bool) or not isinstance(self.push_every, int) or self.push_every < 0:
            raise ConfigError(f"push_every: {self.push_every!r} is out of range (an integer >= 0)")
        if self.push_repo is not None:
            from rollout_dataset.hub.commits import check_repo_id

            try:
                check_repo_id(self.push_repo)
            except ValueError:
                raise ConfigError(f"push_repo: {self.push_repo!r} is not of the form org/name (the CLI reads it "
                                  "from PUSH_TO_DATASET)") from None
        if self.push_every and not self.push_repo:
            raise ConfigError("push_every: needs a destination repo (push_repo; the CLI reads PUSH_TO_DATASET=org/name)")
        self.strategies = tuple(self.strategies)
        bad = [s for s in self.strategies if s not in STRATEGIES]
        if bad or not self.strategies:
            raise ConfigError(f"strategies: {bad or '[]'} not valid; choose from {', '.join(STRATEGIES)}")

    def snapshot(self) -> dict[str, Any]:
        """The configuration as JSON-ready data (no secrets are held here)."""
        return {
            "out_dir": str(self.out_dir),
            "seeds": list(self.seeds),
            "rollouts_per_seed": self.rollouts_per_seed,
            "strategies": list(self.strategies),
            "step_rewards": self.step_rewards.to_dict(),
            "base_url": self.base_url,
            "model": self.model,
            "max_turns": self.max_turns,
            "concurrency": self.concurrency,
            "executor": self.executor,
            "tasks": self.tasks,
            "n_prompts": self.n_prompts,
            "timeout_s": self.timeout_s,
            "env": self.env,
            "env_options": dict(self.env_options),
            "argv": list(self.argv) if self.argv is not None else None,
            "on_policy": self.on_policy,
            "max_tokens_cap": self.max_tokens_cap,
            "fit_context": self.fit_context,
            **({"notes": list(self.notes)} if self.notes else {}),  # only when the environment noted something
        }
