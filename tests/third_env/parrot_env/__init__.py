"""A third environment, outside `rollout_dataset`: the agent is asked to say a word, twice.

The worked example of docs/architecture.md "Write your own environment": one config dataclass,
one episode (run, score, task, metadata), one environment (settings, prepare, batch config),
registered through the entry point `parrot = parrot_env:ParrotEnvironment` of the group
`rollout_dataset.environments` (see `pyproject.toml`; the tests find it through the
`parrot_env-0.1.0.dist-info` folder next to this package, without installing anything).
The local backend plays it with the built-in `echo` policy, which repeats the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx

from rollout_dataset.envs import AgentOutcome, CaptureFlag, CaptureSettings, EnvironmentBase, Score, TaskInfo

WORDS = ("apple", "river", "copper", "lantern", "meadow", "quartz", "saffron", "tundra")


@dataclass
class ParrotConfig:
    """One rollout: the word is `word`, else `WORDS[seed % 8]`; the agent gets `max_turns` turns (1..4)."""

    env_name: ClassVar[str] = "parrot"

    out_dir: str | Path = "parrot_artifact"
    seed: int = 0
    rollout_seed: int | None = None
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    max_turns: int = 2
    timeout_s: float = 60.0
    rollout_id: str | None = None
    tokenizer: str | None = None
    push_repo: str | None = None
    push_private: bool | None = None
    word: str | None = None  # `capture --word`, the plugin's own flag

    def __post_init__(self) -> None:
        if not 1 <= self.max_turns <= 4:
            raise ValueError(f"max_turns: {self.max_turns} is out of range (1..4)")


class ParrotEpisode:
    session = None  # the proxy session is named by the rollout id
    harness = "parrot-agent"

    def __init__(self, config: ParrotConfig) -> None:
        self.config = config
        self.word = config.word or WORDS[config.seed % len(WORDS)]
        self.prompts = [f"Say the word {self.word}."] + ["Again, please."] * (config.max_turns - 1)
        self.rollout_seed = config.seed if config.rollout_seed is None else config.rollout_seed

    def run(self, agent: Any) -> AgentOutcome:
        """A plain chat loop against the proxy's session URL (any OpenAI-compatible client works)."""
        messages: list[dict[str, Any]] = []
        replies = []
        with httpx.Client(timeout=self.config.timeout_s) as client:
            for prompt in self.prompts:
                messages.append({"role": "user", "content": prompt})
                response = client.post(f"{agent.base_url}/chat/completions",
                                       headers={"Authorization": f"Bearer {agent.api_key}"},
                                       json={"model": agent.model, "messages": messages, "max_tokens": 32,
                                             "seed": self.rollout_seed})
                if response.status_code >= 400:  # the pipeline names a failed first call from the trace
                    return AgentOutcome("upstream_error", errors=[{"kind": "upstream_error",
                                                                   "message": f"HTTP {response.status_code}"}])
                reply = response.json()["choices"][0]["message"]["content"] or ""
                messages.append({"role": "assistant", "content": reply})
                replies.append(reply)
        return AgentOutcome("final_answer", state=replies)

    def score(self, records: list[dict[str, Any]], turns: dict[str, Any], outcome: AgentOutcome, agent: Any) -> Score:
        said = sum(self.word in reply for reply in outcome.state or [])
        reward = said / len(self.prompts)
        return Score(env_reward=reward, reward_after_penalties=reward,
                     samples_header={"reward": reward, "passed": f"{said}/{len(self.prompts)} turns"})

    def task(self, outcome: AgentOutcome) -> TaskInfo:
        return TaskInfo(env="parrot", task_id=f"parrot-{self.word}", task_index=0, title=f"Say {self.word}",
                        instruction=self.prompts[0], source="parrot_env", dataset_seed=self.config.seed,
                        rollout_seed=self.rollout_seed, n_prompts=len(WORDS),
                        config={"max_turns": self.config.max_turns, "model": self.config.model})

    def rollout_metadata(self, rollout_id: str, model: str, outcome: AgentOutcome) -> dict[str, Any]:
        return {"env": "parrot", "task_id": f"parrot-{self.word}", "rollout_id": rollout_id, "model": model,
                "harness": self.harness, "rollout_seed": self.rollout_seed}

    def summary_fields(self, facts: Any, outcome: AgentOutcome) -> dict[str, Any]:
        return {}

    def extra_files(self, outcome: AgentOutcome) -> dict[str, Any]:
        return {}


class ParrotEnvironment(EnvironmentBase):
    name = "parrot"
    description = "say the word you are asked to say (a test plugin)"
    default_policy = "echo"
    capture_flags = (CaptureFlag("--word", "the word to say (default: one of eight, by --seed)"),)

    def config_class(self) -> type:
        return ParrotConfig

    def capture_settings(self, config: ParrotConfig) -> CaptureSettings:
        return CaptureSettings(out_dir=Path(config.out_dir), base_url=config.base_url, model=config.model,
                               api_key=config.api_key, rollout_id=config.rollout_id, tokenizer=config.tokenizer,
                               backend_policy=self.default_policy, push_repo=config.push_repo,
                               push_private=config.push_private)

    def prepare(self, config: ParrotConfig) -> ParrotEpisode:
        return ParrotEpisode(config)

    def batch_config(self, config: Any, job: Any, options: Any) -> ParrotConfig:
        settings = job.settings
        return ParrotConfig(out_dir=job.artifact_dir, seed=job.seed, rollout_seed=job.seed * 1000 + job.rollout_idx,
                            base_url=settings.get("base_url"), model=settings.get("model"), rollout_id=job.rollout_id,
                            tokenizer="builtin" if settings.get("local_backend") else None,
                            max_turns=min(int(settings.get("max_turns") or 2), 4))
