"""On-policy continuity in the rollout document, summed over rollouts, and on the dataset card."""

from __future__ import annotations

import json

from rollout_dataset.builder.card import card_stats, render_card
from rollout_dataset.export.continuity import continuity_summary, merge_continuity

CALLS = [{"index": 0, "role": "agent"}, {"index": 1, "role": "auxiliary"}, {"index": 2, "role": "agent"},
         {"index": 3, "role": "agent"}, {"index": 4, "role": "agent"}]


def status(s, reason=None):
    return {"status": s, "parent_index": None, "reason": reason, "detail": None, "drift": None}


def test_shares_count_agent_turns_only_and_name_the_reasons():
    recorded = {0: status("exact"), 1: status("not_repaired", "no_parent"), 2: status("repaired"),
                3: status("not_repaired", "content_changed")}
    out = continuity_summary(CALLS, recorded)
    assert (out["agent_turns"], out["exact"], out["repaired"], out["not_repaired"], out["unrecorded"]) == (4, 1, 1, 1, 1)
    assert out["exact_share"] == out["repaired_share"] == out["not_repaired_share"] == 0.25
    assert out["not_repaired_reasons"] == {"content_changed": 1}


def test_without_the_mode_there_is_no_continuity():
    assert continuity_summary(CALLS, {}) is None
    assert merge_continuity([None, None]) is None


def test_the_card_reports_the_shares_over_the_rollouts_that_used_the_mode():
    one = continuity_summary(CALLS[:3], {0: status("exact"), 2: status("repaired")})
    two = continuity_summary(CALLS[3:], {3: status("repaired"), 4: status("not_repaired", "content_changed")})
    rows = [{"rollout_id": "a", "continuity": json.dumps(one)}, {"rollout_id": "b", "continuity": json.dumps(two)},
            {"rollout_id": "c", "continuity": None}]
    merged = card_stats(rows)["continuity"]
    assert (merged["rollouts"], merged["agent_turns"], merged["repaired"]) == (2, 4, 2)
    text = render_card(rows)
    assert "On-policy mode (2 rollouts): of 4 agent turns," in text
    assert "25.0% exact, 50.0% repaired from the sampled ids" in text and "`content_changed` 1" in text
    assert "rollouts): of" not in render_card(rows[2:])
