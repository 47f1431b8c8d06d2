"""What of an imported ATIF trajectory the dataset's typed columns do not hold, and the trajectory back from it.

An import turns each model step into a trace record (the chat so far, the answer, ids and logprobs):
the `trace`, `turns` and `sequences` configs hold that. Everything else a trajectory holds (its
version, agent name and version, `notes`, every `extra`, `final_metrics`, step `model_name`,
`cost_usd`, observations no later request shows, image parts, subagent refs) must not be lost, so
the import keeps the whole document in `summary.imported_from.atif`, with two kinds of stand-ins for
what the typed columns already hold (so nothing is stored twice):

- a string of 32 characters or more that a trace record holds (a message's content, a tool result,
  reasoning) becomes ``{"rollout_dataset:sha256": <its SHA-256>}``;
- at capture level `tokens`, a model step's `metrics.prompt_token_ids` / `completion_token_ids` /
  `logprobs` become ``{"rollout_dataset:ids": [<call index>, <field>]}``.

`restore` puts them back from the records an export rebuilds (from a dataset or a folder), so
``export(import(x))`` is ``x``; logprobs come back as the dataset stores them (float32: docs/atif.md).
A source object that itself looks like a stand-in is wrapped (``{"rollout_dataset:literal": ...}``)
and given back as it was. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

__all__ = ["residue", "restore", "as_float32", "MIN_REF_CHARS"]

SHA_KEY = "rollout_dataset:sha256"
IDS_KEY = "rollout_dataset:ids"
LITERAL_KEY = "rollout_dataset:literal"
_MARKERS = (SHA_KEY, IDS_KEY, LITERAL_KEY)
#: strings shorter than this stay in the residue as they are (a reference would not be shorter).
MIN_REF_CHARS = 32
#: a model step's metrics fields that the `turns`/`sequences` configs hold at level `tokens` -> the record's field.
ID_FIELDS = {"prompt_token_ids": "prompt_token_ids", "completion_token_ids": "completion_token_ids",
             "logprobs": "per_token_logps"}


def as_float32(values: Iterable[float | None]) -> list[float | None]:
    """Logprobs as the dataset stores them (float32, the `turns`/`sequences` column type), as Python floats.

    Args:
        values: logprobs (None kept).

    Returns:
        Each value rounded to the nearest float32.
    """
    return [None if v is None else float(np.float32(v)) for v in values]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _strings(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if len(item) >= MIN_REF_CHARS:
                yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def record_strings(records: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """SHA-256 -> text of every long string in the records' requests and answers.

    Args:
        records: trace records (an import's, or the ones an export rebuilt).

    Returns:
        The map `residue` references into and `restore` resolves from.
    """
    out: dict[str, str] = {}
    for record in records:
        for text in _strings([record.get("request"), record.get("response")]):
            out.setdefault(_sha(text), text)
    return out


def residue(doc: Any, records: Sequence[Mapping[str, Any]], id_steps: Mapping[int, int]) -> Any:
    """The trajectory with what the records hold replaced by stand-ins (see the module docstring).

    Args:
        doc: the trajectory as read.
        records: its trace records (from the import).
        id_steps: ``id(step dict) -> call index`` for the model steps whose ids and logprobs the
            records hold (level `tokens`); empty otherwise.

    Returns:
        A new JSON value; `doc` is not changed.
    """
    held = set(record_strings(records))

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            if len(value) >= MIN_REF_CHARS:
                sha = _sha(value)
                if sha in held:
                    return {SHA_KEY: sha}
            return value
        if isinstance(value, list):
            if all(type(v) in (int, float) for v in value):  # ids, logprobs: nothing to look into
                return list(value)
            return [walk(v) for v in value]
        if not isinstance(value, dict):
            return value
        call = id_steps.get(id(value))
        metrics = value.get("metrics")
        if call is not None and isinstance(metrics, dict):
            out = {k: walk(v) for k, v in value.items() if k != "metrics"}
            out["metrics"] = {k: ({IDS_KEY: [call, k]} if k in ID_FIELDS and v is not None else walk(v))
                              for k, v in metrics.items()}
            out = {k: out[k] for k in value}  # the source's key order
        else:
            out = {k: walk(v) for k, v in value.items()}
        if any(k in _MARKERS for k in value):
            return {LITERAL_KEY: out}
        return out

    return walk(doc)


def restore(kept: Any, records: Sequence[Mapping[str, Any]]) -> Any:
    """The trajectory a residue was made from, its stand-ins resolved from the records.

    Args:
        kept: `residue`'s value (from `summary.imported_from.atif`).
        records: the rollout's trace records as an export rebuilds them.

    Returns:
        The trajectory (logprobs as the records hold them).

    Raises:
        ValueError: a stand-in the records cannot resolve (a request cell cut to the cell limit,
            a call missing), naming it.
    """
    strings = record_strings(records)
    by_index = {r.get("index"): r for r in records}

    def walk(value: Any) -> Any:
        if isinstance(value, list):
            return [walk(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1 and SHA_KEY in value:
            text = strings.get(value[SHA_KEY]) if isinstance(value[SHA_KEY], str) else None
            if text is None:
                raise ValueError(f"a text of the imported trajectory (sha256 {value[SHA_KEY]}) is in no call's "
                                 "request or answer (a cell cut to the cell limit?)")
            return text
        if len(value) == 1 and IDS_KEY in value:
            marker = value[IDS_KEY]
            if not (isinstance(marker, list) and len(marker) == 2 and marker[1] in ID_FIELDS):
                raise ValueError(f"{IDS_KEY} {marker!r} is no [call index, metrics field] reference")
            index, field = marker
            record = by_index.get(index)
            if record is None or record.get(ID_FIELDS[field]) is None:
                raise ValueError(f"call {index}: its {field} are not in the dataset")
            values = list(record[ID_FIELDS[field]])
            return as_float32(values) if field == "logprobs" else values
        if len(value) == 1 and LITERAL_KEY in value and isinstance(value[LITERAL_KEY], dict):
            return {k: walk(v) for k, v in value[LITERAL_KEY].items()}
        return {k: walk(v) for k, v in value.items()}

    return walk(kept)
