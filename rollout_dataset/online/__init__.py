"""Online RL over the proxy's session API: each rollout an unmodified harness run through the proxy in a
session of its own, its sequences pulled from the API (docs/session-api.md).

- `rollout_dataset.online.trl`: TRL GRPO's ``rollout_func`` (`SessionRollouts`) and a reward function
  that reads the sessions' rewards (`session_reward`); standard library, httpx and this package's
  client only, so it runs in a trainer's own venv.
- `rollout_dataset.online.agent_loops`: a session's sequences as verl's ``AgentLoopOutput`` fields and
  SkyRL's ``GeneratorOutput`` (pure functions over the API's documents).
- `rollout_dataset.online.builtin_agent`: the built-in coding agent as a command (``python -m``), the
  default harness of the recipe.
"""
