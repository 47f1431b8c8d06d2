"""The one commit protocol of rollout_dataset/hub (hub/commits.py), against the loopback Hub
(tests/hub_fixture.py): a commit names the revision it was planned on, a moved repo is read and
planned again, anything else is refused at once, and every failure is one scrubbed PublishError."""

from __future__ import annotations

import pytest
from huggingface_hub import CommitOperationAdd, HfApi

from hub_fixture import FakeHub
from rollout_dataset.errors import PublishError
from rollout_dataset.hub.commits import CommitPlan, RetryPolicy, check_repo_id, commit_with_retry, scrub_secrets

TOKEN = "hf_commitHelperTokenNeverLeaks012345"
NO_WAIT = RetryPolicy(max_attempts=3, first_delay_s=0.0)


def _api(hub: FakeHub, token: str = TOKEN) -> HfApi:
    return HfApi(endpoint=hub.url, token=token)


def _repo(hub: FakeHub, repo_id: str) -> HfApi:
    api = _api(hub)
    api.create_repo(repo_id, repo_type="dataset")
    return api


def _other_writer_commits(api: HfApi, repo_id: str, n: int) -> None:
    api.upload_file(path_or_fileobj=f"other writer {n}".encode(), path_in_repo=f"other-{n}.txt", repo_id=repo_id,
                    repo_type="dataset")


def _mine() -> list[CommitOperationAdd]:
    return [CommitOperationAdd(path_in_repo="mine.txt", path_or_fileobj=b"mine")]


def _commit_requests(hub: FakeHub) -> list[tuple[str, str, int]]:
    return [r for r in hub.requests if "/preupload/" in r[1] or "/commit/" in r[1]]


def test_a_stale_parent_is_planned_again_on_the_fresh_head_and_lands():
    with FakeHub(token=TOKEN) as hub:
        api = _repo(hub, "org/race")
        planned_on = []

        def plan(info, attempt):
            planned_on.append(info.sha)
            if attempt == 1:  # another writer lands between this read and this commit
                _other_writer_commits(api, "org/race", attempt)
            return CommitPlan(_mine(), "add mine")

        outcome = commit_with_retry(api, "org/race", plan, action="push to", policy=NO_WAIT)
        files = hub.files("org/race")
        head = hub.repos["org/race"].head()[0]
        conflicts = hub.commit_conflicts
    assert outcome.attempts == 2 and conflicts == 1
    assert planned_on[0] != planned_on[1]  # the second plan was made on the other writer's commit
    assert outcome.commit == head and outcome.info.sha == planned_on[1]
    assert files["mine.txt"] == b"mine" and "other-1.txt" in files


def test_retries_exhausted_name_the_repo_the_attempts_and_the_status():
    with FakeHub(token=TOKEN) as hub:
        api = _repo(hub, "org/busy")

        def plan(info, attempt):  # every read is overtaken by another writer
            _other_writer_commits(api, "org/busy", attempt)
            return CommitPlan(_mine(), "add mine")

        with pytest.raises(PublishError, match=r"push to org/busy: 3 commit\(s\) in a row were refused with HTTP 412"):
            commit_with_retry(api, "org/busy", plan, action="push to", policy=NO_WAIT)
        files = hub.files("org/busy")
        conflicts = hub.commit_conflicts
    assert conflicts == 3 and "mine.txt" not in files


def test_a_refusal_other_than_a_conflict_is_not_retried_and_names_the_status_not_the_token():
    wrong = "hf_WRONGcommitHelperToken9876543210"
    with FakeHub(token=TOKEN) as hub:
        _repo(hub, "org/locked")
        plans = []

        def plan(info, attempt):
            plans.append(attempt)
            return CommitPlan(_mine(), "add mine")

        with pytest.raises(PublishError) as raised:
            commit_with_retry(_api(hub, token=wrong), "org/locked", plan, action="push to", policy=NO_WAIT)
        requests = _commit_requests(hub)
        files = hub.files("org/locked")
    message = str(raised.value)
    assert plans == [1] and len(requests) == 1 and requests[0][2] == 401
    assert message.startswith(f"push to org/locked at {hub.url} failed (HTTP 401)")
    assert wrong not in message and "mine.txt" not in files


def test_a_plan_without_operations_makes_no_commit():
    with FakeHub(token=TOKEN) as hub:
        api = _repo(hub, "org/same")
        outcome = commit_with_retry(api, "org/same", lambda info, attempt: CommitPlan(detail="up to date"),
                                    action="push to", policy=NO_WAIT)
        requests = _commit_requests(hub)
    assert outcome.commit is None and outcome.attempts == 1 and outcome.plan.detail == "up to date"
    assert requests == []


def test_a_policy_without_attempts_is_refused():
    with pytest.raises(ValueError, match="max_attempts=0"):
        commit_with_retry(None, "org/x", lambda info, attempt: CommitPlan(), action="push to",
                          policy=RetryPolicy(max_attempts=0))


def test_the_retry_delay_doubles_per_attempt_up_to_its_cap_with_jitter():
    policy = RetryPolicy(first_delay_s=0.2, max_delay_s=5.0)
    assert all(0.1 <= policy.delay(1) <= 0.3 for _ in range(50))
    assert all(0.2 <= policy.delay(2) <= 0.6 for _ in range(50))
    assert all(2.5 <= policy.delay(20) <= 7.5 for _ in range(50))


def test_a_repo_id_must_be_org_slash_name():
    assert check_repo_id("org/name.v2") == "org/name.v2"
    for bad in ("no-slash", "a/b/c", "/name", "org/", "", None):
        with pytest.raises(ValueError, match="of the form org/name"):
            check_repo_id(bad)


def test_scrubbing_removes_the_given_token_and_anything_shaped_like_one(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "env-secret-value")
    text = scrub_secrets("a given-secret b env-secret-value c hf_abcdefghijkl d", "given-secret")
    assert text == "a *** b *** c hf_*** d"
