"""Tamper evidence for trace records: a hash chain over each session's records, and a seal.

Every record the proxy writes carries ``prev_sha256``: the SHA-256 of the canonical encoding of the
record written just before it in the same session file (``null`` for the first one). Deleting,
reordering, inserting or editing a record therefore breaks the chain at the next record. What a
chain cannot show by itself is a cut tail (the last records removed) or an edit of the very last
record; for that the proxy keeps, in its own memory, each session's `TraceSeal` (how many records
it wrote and the digest of the last one). `capture` checks the trace it reads against the seal the
proxy hands it and stores the seal in the artifact's ``trace.json``, where `validate` (and so
`build`) checks it again.

Two orders, each defined here once. The chain follows the order the proxy WROTE records, which is
the order calls ended: a harness that sends two requests at once (opencode's first calls, subagent
tools, parallel tool runners) gets the one that finishes first written first. Everything else (the
artifact's ``trace.json``, the graph, sequences, turns, every dataset config) lists calls in ARRIVAL
order, by their ``index`` (`in_arrival_order`). `chain_failures(..., listed="any")` checks the chain
of records listed in any order by following each record's link to its predecessor.

The digest is taken over a canonical encoding of the parsed record (keys sorted, compact, UTF-8),
not over the line's bytes, so the same check works on the ``<session>.jsonl`` lines and on the
records copied into ``trace.json``. It is a function of the JSON value only: orjson's encoding with
sorted keys, or, for values orjson refuses (integers beyond 64 bits, lone surrogates, nesting
deeper than 255), the standard library's with sorted keys. (orjson writes NaN as ``null``, so a
NaN replaced by ``null`` is the one edit the digest does not see.)

There is no secret key: the chain shows accidents and tampering by anyone who does not recompute
it (an agent truncating or editing a file); the defence against an agent that could recompute it
is that no sandbox can see the trace files at all.

Pure functions only; trainer-facing layers import this module without the proxy server.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import orjson

from rollout_dataset.errors import TraceIntegrityError

__all__ = [
    "CHAIN_FIELD",
    "SEAL_FIELD",
    "TraceSeal",
    "canonical_bytes",
    "record_digest",
    "chain_failures",
    "in_arrival_order",
    "written_order",
    "verify_chain",
    "chain",
    "reseal",
]

#: the field of each record holding its predecessor's digest (null for a session's first record).
CHAIN_FIELD = "prev_sha256"
#: the key of ``trace.json`` holding the proxy's seal of the session.
SEAL_FIELD = "seal"


@dataclass(frozen=True)
class TraceSeal:
    """What the proxy wrote to one session file: the number of records and the last one's digest.

    Attributes:
        records: how many records the session file holds.
        head_sha256: digest of the last record (None when there is none).
    """

    records: int
    head_sha256: str | None

    def to_dict(self) -> dict[str, Any]:
        """The seal as stored in ``trace.json``.

        Returns:
            ``{"records": n, "head_sha256": hex or None}``.
        """
        return {"records": self.records, "head_sha256": self.head_sha256}

    @classmethod
    def from_dict(cls, data: Any) -> "TraceSeal":
        """Read a stored seal.

        Args:
            data: the ``seal`` object of ``trace.json``.

        Returns:
            The seal.

        Raises:
            ValueError: it is not ``{"records": int >= 0, "head_sha256": str|null}``.
        """
        if not isinstance(data, dict) or not isinstance(data.get("records"), int) or isinstance(
                data.get("records"), bool) or data["records"] < 0 or not isinstance(
                data.get("head_sha256"), (str, type(None))):
            raise ValueError("a seal is {\"records\": integer >= 0, \"head_sha256\": hex string or null}")
        return cls(data["records"], data["head_sha256"])


def canonical_bytes(record: Any) -> bytes:
    """The canonical encoding of a JSON value: keys sorted, compact, UTF-8.

    Args:
        record: a JSON value (a parsed record, or one about to be written).

    Returns:
        The bytes the digest is taken over.

    Raises:
        TypeError: the value is not JSON.
    """
    try:
        return orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError: big ints, lone surrogates, deep nesting
        text = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8", "surrogatepass")


def record_digest(record: Any) -> str:
    """The SHA-256 (hex) of a record's canonical encoding, chain field included.

    Args:
        record: a trace record.

    Returns:
        64 lowercase hex digits.
    """
    return hashlib.sha256(canonical_bytes(record)).hexdigest()


def in_arrival_order(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records in the order the proxy received their requests: by ``index`` (the one definition).

    The sort is stable, and a record without an integer ``index`` keeps its place after the indexed
    ones, so a malformed record is still there for the schema check to name.

    Args:
        records: a session's records, e.g. in the order they were written (calls ended).

    Returns:
        A new list, by arrival index.
    """
    listed = list(records)
    return sorted(listed, key=lambda r: (0, r["index"]) if isinstance(r, dict) and type(r.get("index")) is int
                  else (1, 0))


def written_order(records: Sequence[Any]) -> list[int] | None:
    """The positions of `records` in the order the proxy wrote them, found by following the chain.

    Args:
        records: a session's chained records listed in any order (e.g. by arrival).

    Returns:
        Positions into `records`, first written first; None when the links do not make exactly one
        chain through every record (a record missing, edited, duplicated or unchained), so the
        caller checks the listed order and names the first break there.
    """
    by_previous: dict[Any, int] = {}
    for position, record in enumerate(records):
        if not isinstance(record, dict) or CHAIN_FIELD not in record:
            return None
        previous = record[CHAIN_FIELD]
        if not (previous is None or isinstance(previous, str)) or previous in by_previous:
            return None
        by_previous[previous] = position
    order: list[int] = []
    link: str | None = None
    while link in by_previous:  # from the first record (link None) to the last
        position = by_previous.pop(link)
        order.append(position)
        link = record_digest(records[position])
    return order if len(order) == len(records) else None


def chain_failures(records: Sequence[Any], seal: TraceSeal | None = None, listed: str = "written") -> list[tuple[int, str]]:
    """Every place where a session's records break their chain or disagree with a seal.

    A trace none of whose records has the chain field (written before chaining existed) is
    accepted unchained, unless a seal is given.

    Args:
        records: the session's records.
        seal: the proxy's seal, when known.
        listed: ``"written"`` when `records` are in the order the proxy wrote them (a ``.jsonl``
            file: moving a line breaks the chain); ``"any"`` when they may be listed in another
            order (``trace.json`` lists them by arrival): the chain is then followed link by link.

    Returns:
        ``(record position, reason)`` pairs, positions into `records`; empty when the chain (and
        seal) hold.
    """
    if listed == "any":
        order = written_order(records)
        if order is not None:
            failures = chain_failures([records[p] for p in order], seal)
            return [(order[p] if p < len(order) else p, reason) for p, reason in failures]
    elif listed != "written":
        raise ValueError(f"listed must be 'written' or 'any', not {listed!r}")
    out: list[tuple[int, str]] = []
    chained = any(isinstance(r, dict) and CHAIN_FIELD in r for r in records)
    if chained or seal is not None:
        previous: str | None = None
        for position, record in enumerate(records):
            if not isinstance(record, dict) or CHAIN_FIELD not in record:
                out.append((position, f"has no {CHAIN_FIELD} (every record of a chained trace carries one)"))
            elif record[CHAIN_FIELD] != previous:
                what = "the first record's must be null" if previous is None else (
                    f"the previous record's digest is {previous}")
                out.append((position, f"{CHAIN_FIELD} is {record[CHAIN_FIELD]!r} but {what}: a record before it "
                                      "was deleted, inserted, reordered or edited"))
            previous = record_digest(record)
        if seal is not None:
            if seal.records != len(records):
                out.append((len(records), f"the proxy wrote {seal.records} record(s) but the trace holds "
                                          f"{len(records)}: records were removed or added"))
            elif records and previous != seal.head_sha256:
                out.append((len(records) - 1, f"the last record's digest {previous} is not the {seal.head_sha256} "
                                              "the proxy sealed: it was edited"))
    return out


def verify_chain(records: Sequence[Any], source: str, seal: TraceSeal | None = None) -> None:
    """Raise on the first break of a session's chain or seal.

    Args:
        records: the session's records in file order.
        source: the file the records came from, for the message.
        seal: the proxy's seal, when known.

    Raises:
        TraceIntegrityError: naming the file and the record position.
    """
    failures = chain_failures(records, seal)
    if failures:
        position, reason = failures[0]
        raise TraceIntegrityError(source, position, reason)


def chain(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give records a valid chain, in order (for writers other than the proxy, e.g. synthetic traces).

    Args:
        records: records in file order (copied, not changed).

    Returns:
        The records with ``prev_sha256`` set.
    """
    out: list[dict[str, Any]] = []
    previous: str | None = None
    for record in records:
        record = {**record, CHAIN_FIELD: previous}
        previous = record_digest(record)
        out.append(record)
    return out


def reseal(trace_document: dict[str, Any]) -> dict[str, Any]:
    """Re-chain and re-seal a ``trace.json`` document that trusted code changed after checking it.

    The capture checks the proxy's file against the proxy's seal first; when it then redacts a
    secret from the records, the copy it writes gets a fresh chain and seal, so ``validate`` and
    ``build`` still catch any later edit of the artifact.

    Args:
        trace_document: ``{"calls": [...], "seal": {...}, ...}`` (copied, not changed).

    Returns:
        The document with its calls chained and a seal over them.
    """
    calls = chain(trace_document.get("calls") or [])
    head = record_digest(calls[-1]) if calls else None
    return {**trace_document, "calls": calls, SEAL_FIELD: TraceSeal(len(calls), head).to_dict()}
