"""Graph -> what a trainer consumes: labelled sequences with loss masks, roles, findings, documents.

Public API:

- ``export_rollout(records, *, session_id, metadata, capture_level, ...)`` -> the rollout document;
- ``turns_document(document_or_graph, records)`` -> the turns document;
- ``summarise(document)`` -> one screen of text;
- ``capture_level_of(records)``; the role names ``AGENT``, ``AUXILIARY``, ``DISCARDED``; the
  finding codes ``FINDING_CODES``.
"""

from __future__ import annotations

from rollout_dataset.export.document import CAPTURE_LEVELS, capture_level_of, export_rollout, turns_document
from rollout_dataset.export.findings import ERROR, FINDING_CODES, INFO, WARN, render_prompt_ids
from rollout_dataset.export.sequences import AGENT, AUXILIARY, DISCARDED, ROLES, PathSequence, assign_roles, build_sequences
from rollout_dataset.export.summary import summarise

__all__ = [
    "export_rollout",
    "turns_document",
    "summarise",
    "capture_level_of",
    "CAPTURE_LEVELS",
    "build_sequences",
    "assign_roles",
    "PathSequence",
    "render_prompt_ids",
    "AGENT",
    "AUXILIARY",
    "DISCARDED",
    "ROLES",
    "FINDING_CODES",
    "ERROR",
    "WARN",
    "INFO",
]
