"""The files of an artifact folder: one definition of their names, imported wherever one is read or written.

An artifact folder is what one `capture` writes (see docs/dataset.md): the sealed trace, the rollout
document (graph, sequences, findings), the turns document, the task and its tests, the summary and
the readable samples. This module imports nothing of the package, so every layer can use it.
"""

from __future__ import annotations

__all__ = [
    "ARTIFACT_FILES",
    "ARTIFACT_JSON_SCHEMAS",
    "HELD_OUT_TESTS_FILE",
    "ROLLOUT_FILE",
    "SAMPLES_FILE",
    "SUMMARY_FILE",
    "TASK_FILE",
    "TRACE_FILE",
    "TRAJECTORY_FILE",
    "DERIVED_ARTIFACT_FILES",
    "TURNS_FILE",
    "VISIBLE_TESTS_FILE",
]

#: the session's records, chained and sealed (see `rollout_dataset.trace_integrity`).
TRACE_FILE = "trace.json"
#: the rollout document: graph, sequences with loss masks and logprobs, roles, findings.
ROLLOUT_FILE = "rollout.json"
#: the agent's turns, one per call.
TURNS_FILE = "turns.json"
#: the task as the agent saw it, and the capture's configuration.
TASK_FILE = "task.json"
#: the tests the agent could see.
VISIBLE_TESTS_FILE = "visible_tests.txt"
#: the tests held out from the agent (the verifier's).
HELD_OUT_TESTS_FILE = "held_out_tests.json"
#: the rollout's summary: ids, reward, counts, capture level, validation. A batch also writes a
#: `summary/summary.json` of its own (schema `batch_summary`).
SUMMARY_FILE = "summary.json"
#: the sequences rendered for a person, special tokens shown.
SAMPLES_FILE = "samples.md"
#: the rollout as an ATIF v1.8 trajectory (Harbor's interchange format; `rollout_dataset.atif`).
TRAJECTORY_FILE = "trajectory.json"

#: every file an artifact folder written by `capture` holds, in the order they are checked.
ARTIFACT_FILES: tuple[str, ...] = (
    TRACE_FILE,
    ROLLOUT_FILE,
    TURNS_FILE,
    TASK_FILE,
    VISIBLE_TESTS_FILE,
    HELD_OUT_TESTS_FILE,
    SUMMARY_FILE,
    SAMPLES_FILE,
)

#: files `capture` also writes, derived from the ones above (so a folder written without them, by an
#: older capture or by hand, stays valid; `rollout-dataset export --format atif` writes them for any folder).
DERIVED_ARTIFACT_FILES: tuple[str, ...] = (TRAJECTORY_FILE,)

#: file name -> JSON schema name (`rollout_dataset/schema/schemas/<name>.schema.json`), for its JSON documents.
ARTIFACT_JSON_SCHEMAS: dict[str, str] = {
    TRACE_FILE: "trace",
    ROLLOUT_FILE: "rollout",
    TURNS_FILE: "turns",
    TASK_FILE: "task",
    HELD_OUT_TESTS_FILE: "held_out_tests",
    SUMMARY_FILE: "summary",
}
