"""Hub I/O: everything this package sends to or reads from the Hugging Face Hub.

- `dataset_push`: `push` a built dataset folder to a dataset repo, appending (`PushResult`);
- `trace_sessions`: the trace-viewer sessions, pushed to the companion ``<repo>-traces`` repo;
- `remote_compaction`: `compact_repo`, a repo's small shards merged in one commit;
- `artifact_push`: `push_artifacts`, one capture's artifact folder built and pushed;
- `commits`: the one commit protocol they all follow (``parent_commit``, retry on 409/412 with
  `RetryPolicy`, the repo-id rule, one `PublishError` per failure with every token scrubbed);
- `plans`: the pure part (where files go in a repo, which shards a commit touches), no I/O.

The Hub package imports the builder (the dataset it publishes) and the package's errors, never the
proxy, the backend, the capture pipeline or the environments; the builder imports nothing of it.
huggingface_hub is imported when a function runs, so importing this package makes no request and
stays cheap. Compacting a local dataset folder makes no request: it is
`rollout_dataset.builder.compaction.compact_local`.
"""

from __future__ import annotations

from rollout_dataset.hub.artifact_push import push_artifacts
from rollout_dataset.hub.commits import CommitOutcome, CommitPlan, RetryPolicy, commit_with_retry
from rollout_dataset.hub.dataset_push import PushResult, push
from rollout_dataset.hub.remote_compaction import AUTO_COMPACT_SHARDS, compact_repo
from rollout_dataset.hub.trace_sessions import default_traces_repo, local_sessions, push_traces

__all__ = ["push", "PushResult", "compact_repo", "AUTO_COMPACT_SHARDS", "push_traces", "default_traces_repo",
           "local_sessions", "push_artifacts", "commit_with_retry", "CommitPlan", "CommitOutcome", "RetryPolicy"]
