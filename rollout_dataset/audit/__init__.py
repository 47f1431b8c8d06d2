"""The logprob audit: re-score captured sequences the way a trainer will and compare (`rollout-dataset audit`).

See docs/audit.md. Modules: `metrics` (pure math), `readers` (artifact folders, trees, datasets),
`scorers` (server `prompt_logprobs`, transformers forward pass), `run` (the audit), `writers`
(audit.json, the dataset's `audit` config and card statement).
"""

from rollout_dataset.audit.metrics import TokenDiffs, summarize
from rollout_dataset.audit.run import audit, audit_rollout, comparability
from rollout_dataset.audit.scorers import ScoreRequest, ServerScorer, TransformersScorer

__all__ = ["TokenDiffs", "summarize", "audit", "audit_rollout", "comparability", "ScoreRequest", "ServerScorer",
           "TransformersScorer"]
