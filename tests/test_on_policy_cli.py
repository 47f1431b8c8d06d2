"""`--on-policy` reaches the proxy, capture and batch configurations (and the batch's rollouts)."""

from __future__ import annotations

from rollout_dataset.cli import build_parser


def parse(argv):
    return build_parser(argv).parse_args(argv)


def test_proxy_capture_and_batch_take_on_policy():
    from rollout_dataset.batch.runner import plan_jobs
    from rollout_dataset.cli import batch_cmd, capture_cmd

    assert parse(["proxy", "--upstream", "http://h:1/v1", "--trace-dir", "t", "--on-policy"]).on_policy is True
    assert parse(["proxy", "--upstream", "http://h:1/v1", "--trace-dir", "t"]).on_policy is False
    assert capture_cmd.config_from_args(parse(["capture", "--on-policy"])).on_policy is True
    assert capture_cmd.config_from_args(parse(["capture"])).on_policy is False
    argv = ["batch", "--smoke", "--out", "b", "--on-policy"]
    config = batch_cmd.config_from_args(parse(argv), argv)
    assert config.on_policy is True and config.snapshot()["on_policy"] is True
    assert all(job.settings["on_policy"] is True for job in plan_jobs(config, "0" * 32))
