"""The compiled schema check (jsonschema-rs) is only a quick yes: it never accepts a document that the
reference check (the `jsonschema` package) rejects, and rejections keep the reference's messages."""

from __future__ import annotations

import copy
import json

import pytest

from support.synthetic_dataset import write_synthetic_rollout
from rollout_dataset.schema import _validator, fast_schema_valid, schema_errors
from rollout_dataset.schema.check import FILE_SCHEMAS


def _reference_errors(document, name):
    return list(_validator(name).iter_errors(document))


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fast") / "r"
    write_synthetic_rollout(folder, n_turns=3, context_tokens=128, with_retry=True)
    return {name: json.loads((folder / fname).read_text()) for fname, name in FILE_SCHEMAS.items()}


def _mutations(docs):
    """(schema, document) pairs, each off its schema in one way."""
    out = []

    def mutate(name, fn):
        doc = copy.deepcopy(docs[name])
        fn(doc)
        out.append((name, doc))

    mutate("summary", lambda d: d.pop("rollout_id"))
    mutate("summary", lambda d: d.update(rollout_id="X" * 32))
    mutate("summary", lambda d: d.update(agent_turns="3"))
    mutate("summary", lambda d: d.update(trainable=1))
    mutate("summary", lambda d: d.update(unknown_field=True))
    mutate("task", lambda d: d.update(task_index=1.5))
    mutate("turns", lambda d: d["turns"][0]["prompt_ids"].__setitem__(3, 2.5))
    mutate("turns", lambda d: d["turns"][0]["prompt_ids"].__setitem__(3, True))
    mutate("turns", lambda d: d["turns"][1].update(per_token_logps=["x"] + d["turns"][1]["per_token_logps"][1:]))
    mutate("trace", lambda d: d["calls"][1].update(status="200"))
    mutate("trace", lambda d: d["calls"][1].pop("call_id"))
    mutate("trace", lambda d: d["calls"][0].update(capture_level="all"))
    mutate("trace", lambda d: d["calls"][2].update(prev_sha256="0" * 63))
    mutate("trace", lambda d: d.update(schema_version=2))
    mutate("rollout", lambda d: d["sequences"][0].update(input_ids=None))
    mutate("held_out_tests", lambda d: d["tests"].append({"input": 1, "output": "x"}))
    return out


def test_the_fast_check_accepts_valid_documents(documents):
    for name, doc in documents.items():
        assert not _reference_errors(doc, name)
        assert fast_schema_valid(doc, name), name


def test_the_fast_check_never_accepts_what_the_reference_rejects(documents):
    mutations = _mutations(documents)
    for name, doc in mutations:
        reference = _reference_errors(doc, name)
        assert reference, (name, "the mutation should be invalid")
        assert not fast_schema_valid(doc, name), (name, reference[0].message)
        assert schema_errors(doc, name)  # and the reported failures are the reference's


def test_where_the_fast_check_is_stricter_the_reference_decides(documents):
    doc = copy.deepcopy(documents["summary"])
    doc["rollout_id"] += "\n"  # Python's `$` matches before a final newline, Rust's does not
    assert not fast_schema_valid(doc, "summary")
    assert schema_errors(doc, "summary") == [] == _reference_errors(doc, "summary")  # the verdict is unchanged


def test_values_beyond_64_bits_get_the_same_verdict(documents):
    doc = copy.deepcopy(documents["turns"])
    doc["turns"][0]["prompt_ids"][0] = 2**70
    assert fast_schema_valid(doc, "turns") and _reference_errors(doc, "turns") == []
    doc["turns"][0]["n_prompt_ids"] = 2.0**70 + 0.5
    assert not fast_schema_valid(doc, "turns") or not _reference_errors(doc, "turns")
