"""The batch runner with a stand-in rollout function: layout, schemas, plots, report, resume, guardrails, CLI.

The stand-in is injected through `run_batch(config, run_one=...)` (and, for the CLI, registered as
an environment): it writes a file into the rollout folder and returns a deterministic
`RolloutResult` whose achievement timeline depends on (seed, rollout_idx).
"""

from __future__ import annotations

import contextlib
import json
import random
import struct
import threading
from pathlib import Path

import pytest
from scipy import stats as sp

from rollout_dataset.batch import AchievementSnapshot, BatchConfig, RolloutResult, StepRewardConfig, register_env, run_batch
from rollout_dataset.batch.executor import RolloutJob
from rollout_dataset.batch.runner import RESULT_FILE
from rollout_dataset.cli import main
from rollout_dataset.envs import unregister_environment
from rollout_dataset.errors import GuardrailError, UpstreamStatusError
from rollout_dataset.schema import schema_errors

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EXAMPLES = ["example_1", "example_2", "example_3"]


class StandIn:
    """A deterministic rollout: random decisions over three examples, seeded by (seed, idx)."""

    def __init__(self, turns=None, fail=None):
        self.turns = turns or (lambda seed, idx: 4)
        self.fail = fail or (lambda job: None)
        self.calls: list[tuple[int, int]] = []
        self._lock = threading.Lock()

    def __call__(self, job: RolloutJob) -> RolloutResult:
        with self._lock:
            self.calls.append((job.seed, job.rollout_idx))
        self.fail(job)
        folder = Path(job.artifact_dir)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "transcript.txt").write_text(f"seed {job.seed} rollout {job.rollout_idx}\n")
        rng = random.Random(job.seed * 1000 + job.rollout_idx)
        n = self.turns(job.seed, job.rollout_idx)
        timeline = [AchievementSnapshot(t, frozenset(e for e in EXAMPLES if rng.random() < 0.3 + 0.15 * t)) for t in range(n)]
        final = len(timeline[-1].achieved) / 3 if timeline else 0.0
        return RolloutResult(
            final_return=final,
            num_steps=n,
            tool_calls_total=2 * n,
            timeline=timeline,
            model="stand-in",
            task_id=f"task-{job.seed}",
        )


def make_config(tmp_path: Path, **kw) -> BatchConfig:
    base = dict(
        out_dir=tmp_path / "batch",
        seeds=[0, 1, 2, 3],
        rollouts_per_seed=3,
        concurrency=3,
        progress=False,
        base_url="http://user:secret@127.0.0.1:9/v1?key=abc",
        model="stand-in",
        step_rewards=StepRewardConfig(weights={"example_3": 2.0}, k_limits={"example_1": 2}),
    )
    base.update(kw)
    return BatchConfig(**base)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def finished_batch(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("full")
    config = make_config(tmp)
    standin = StandIn()
    result = run_batch(config, run_one=standin)
    return config, result, standin


def test_every_output_file_is_written(finished_batch):
    config, result, _ = finished_batch
    out = config.out_dir
    for rel in [
        "runs/simple.jsonl",
        "runs/complex.jsonl",
        "summary/summary.json",
        "summary/stats_by_seed.json",
        "summary/config_snapshot.json",
        "report.md",
        "batch.json",
    ]:
        assert (out / rel).is_file(), rel
    rollouts = sorted(p.name for p in (out / "rollouts").iterdir())
    assert len(rollouts) == 12 and all(len(r) == 32 for r in rollouts)
    assert all((out / "rollouts" / r / RESULT_FILE).is_file() for r in rollouts)
    assert result.planned == 12 and result.ran == 12 and result.skipped == 0


def test_run_records_and_summaries_validate_against_their_schemas(finished_batch):
    out = finished_batch[0].out_dir
    for strategy in ("simple", "complex"):
        records = read_jsonl(out / "runs" / f"{strategy}.jsonl")
        assert len(records) == 12
        for record in records:
            assert schema_errors(record, "run_record") == []
            assert record["strategy"] == strategy
    assert schema_errors(json.loads((out / "summary/summary.json").read_text()), "batch_summary") == []
    assert schema_errors(json.loads((out / "summary/stats_by_seed.json").read_text()), "batch_stats_by_seed") == []


def test_run_record_meta_carries_strategy_parameters_and_no_credentials(finished_batch):
    out = finished_batch[0].out_dir
    simple = read_jsonl(out / "runs/simple.jsonl")[0]
    complex_ = read_jsonl(out / "runs/complex.jsonl")[0]
    assert simple["meta"] == {"base_url": "http://127.0.0.1:9/v1?key=[REDACTED]", "indicator_lambda": 1.0}
    assert complex_["meta"]["weights"] == {"example_3": 2.0} and complex_["meta"]["k_limits"] == {"example_1": 2}
    text = "".join(p.read_text() for p in out.rglob("*") if p.is_file() and p.suffix in {".json", ".jsonl", ".md"})
    assert "secret" not in text and "key=abc" not in text


def test_summary_correlations_equal_scipy_on_the_run_records(finished_batch):
    out = finished_batch[0].out_dir
    summary = json.loads((out / "summary/summary.json").read_text())
    for strategy in ("simple", "complex"):
        records = read_jsonl(out / "runs" / f"{strategy}.jsonl")
        step = [r["step_reward_sum"] for r in records]
        final = [r["final_return"] for r in records]
        agg = summary["strategies"][strategy]
        assert agg["pearson_step_vs_final"] == pytest.approx(sp.pearsonr(step, final).statistic, abs=1e-12)
        assert agg["spearman_step_vs_final"] == pytest.approx(sp.spearmanr(step, final).statistic, abs=1e-12)
        assert agg["n"] == agg["n_pairs"] == 12
    assert summary["counts"]["rollouts_finished"] == 12 and summary["counts"]["zero_turn_rollouts"] == 0


def test_both_strategies_score_the_same_rollouts(finished_batch):
    out = finished_batch[0].out_dir
    simple = read_jsonl(out / "runs/simple.jsonl")
    complex_ = read_jsonl(out / "runs/complex.jsonl")
    key = lambda r: (r["rollout_id"], r["final_return"], r["step_indicator_sum"], r["num_steps"])  # noqa: E731
    assert [key(r) for r in simple] == [key(r) for r in complex_]


def test_plots_are_real_pngs(finished_batch):
    plots = finished_batch[0].out_dir / "plots"
    names = sorted(p.name for p in plots.glob("*.png"))
    assert names == sorted(
        f"{kind}_{s}.png" for s in ("simple", "complex") for kind in ("hist_step_reward", "scatter_step_reward_vs_final", "ecdf_indicator")
    )
    for png in plots.glob("*.png"):
        width, height = png_size(png)
        assert width >= 300 and height >= 200 and png.stat().st_size > 5_000


def test_report_has_title_table_top_seeds_inline_plots_and_raw_links(finished_batch):
    out = finished_batch[0].out_dir
    report = (out / "report.md").read_text()
    assert report.startswith("# Batch evaluation")
    assert "| strategy | n | final mean" in report
    assert "## Top seeds by final return (simple)" in report
    assert "stand-in" in report
    for target in [line.split("](", 1)[1].rstrip(")") for line in report.splitlines() if line.startswith("![")]:
        assert (out / target).is_file(), target
    for raw in ("runs/simple.jsonl", "summary/summary.json", "summary/config_snapshot.json"):
        assert f"]({raw})" in report


def test_config_snapshot_holds_arguments_weights_and_version(finished_batch):
    snap = json.loads((finished_batch[0].out_dir / "summary/config_snapshot.json").read_text())
    assert snap["weights"] == {"example_3": 2.0} and snap["k_limits"] == {"example_1": 2}
    assert snap["config"]["seeds"] == [0, 1, 2, 3] and snap["config"]["max_turns"] == 10
    assert snap["package_version"] and ("git_sha" in snap)


def test_resumed_batch_does_not_redo_finished_rollouts(tmp_path):
    config = make_config(tmp_path, seeds=[0, 1], rollouts_per_seed=2, strategies=("simple",))
    run_batch(config, run_one=StandIn())
    before = (config.out_dir / "runs/simple.jsonl").read_text()
    again = StandIn()
    result = run_batch(config, run_one=again)
    assert again.calls == [] and result.skipped == 4 and result.ran == 0
    assert (config.out_dir / "runs/simple.jsonl").read_text() == before


def test_resume_redoes_only_the_unfinished_rollout(tmp_path):
    config = make_config(tmp_path, seeds=[0, 1], rollouts_per_seed=2, strategies=("simple",))
    run_batch(config, run_one=StandIn())
    victim = next(p for p in (config.out_dir / "rollouts").iterdir())
    (victim / RESULT_FILE).unlink()  # as if the process died before the rollout finished
    (victim / "half-written.tmp").write_text("partial")
    again = StandIn()
    result = run_batch(config, run_one=again)
    assert len(again.calls) == 1 and result.ran == 1 and result.skipped == 3
    assert not (victim / "half-written.tmp").exists() and (victim / RESULT_FILE).is_file()


def test_first_upstream_error_stops_the_batch_naming_status_and_url_and_resume_finishes(tmp_path):
    config = make_config(tmp_path, seeds=[0, 1, 2], rollouts_per_seed=2, concurrency=1, strategies=("simple",))

    def fail(job):
        if (job.seed, job.rollout_idx) == (1, 0):
            raise UpstreamStatusError(503, "http://127.0.0.1:9/v1/chat/completions", "overloaded")

    broken = StandIn(fail=fail)
    with pytest.raises(UpstreamStatusError, match=r"HTTP 503 for http://127\.0\.0\.1:9/v1/chat/completions"):
        run_batch(config, run_one=broken)
    assert broken.calls == [(0, 0), (0, 1), (1, 0)]  # nothing after the failure was started
    healthy = StandIn()
    result = run_batch(config, run_one=healthy)
    assert sorted(healthy.calls) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert result.skipped == 2 and result.ran == 4


def test_zero_turn_guardrail_mean_zero(tmp_path):
    config = make_config(tmp_path, seeds=[0, 1], rollouts_per_seed=1, strategies=("simple",))
    with pytest.raises(GuardrailError, match="mean agent turns is 0 over 2 rollouts"):
        run_batch(config, run_one=StandIn(turns=lambda s, i: 0))
    assert (config.out_dir / "report.md").is_file()  # outputs are still written for inspection


def test_zero_turn_guardrail_more_than_half(tmp_path):
    config = make_config(tmp_path, seeds=[0, 1, 2, 3], rollouts_per_seed=1, strategies=("simple",))
    with pytest.raises(GuardrailError, match=r"3 of 4 rollouts had 0 agent turns \(more than half\)"):
        run_batch(config, run_one=StandIn(turns=lambda s, i: 0 if s < 3 else 2))


def test_exactly_half_zero_turns_passes(tmp_path):
    config = make_config(tmp_path, seeds=[0, 1], rollouts_per_seed=1, strategies=("simple",))
    result = run_batch(config, run_one=StandIn(turns=lambda s, i: 0 if s == 0 else 2))  # no GuardrailError
    assert result.ran == 2 and result.skipped == 0


def test_a_crashing_rollout_is_reported_and_redone_on_resume(tmp_path):
    config = make_config(tmp_path, seeds=[0, 1], rollouts_per_seed=1, strategies=("simple",))

    def crash(job):
        if job.seed == 1:
            raise RuntimeError("harness exploded")

    with pytest.raises(GuardrailError, match=r"1 of 2 rollouts failed \(first: RuntimeError: harness exploded\)"):
        run_batch(config, run_one=StandIn(fail=crash))
    assert len(read_jsonl(config.out_dir / "runs/simple.jsonl")) == 1
    again = StandIn()
    run_batch(config, run_one=again)
    assert again.calls == [(1, 0)]


# ---- the CLI, with the stand-in registered as an environment -------------------------------------

_CLI_STANDIN = {"fn": StandIn()}


@pytest.fixture(autouse=True)
def _standin_environment():
    """`--env test-standin` for the tests of this file only: registered here, gone after each test."""
    register_env("test-standin", lambda config: (contextlib.nullcontext(config.base_url), _CLI_STANDIN["fn"]))
    yield
    unregister_environment("test-standin")


def test_cli_batch_writes_outputs_and_exits_zero(tmp_path, capsys):
    _CLI_STANDIN["fn"] = StandIn()
    weights = tmp_path / "w.json"
    weights.write_text('{"example_1": 0.5}')
    code = main(["batch", "--env", "test-standin", "--seeds", "0,3", "--rollouts-per-seed", "2", "--strategy", "complex",
                 "--weights-json", str(weights), "--no-progress", "--base-url", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "b")])
    out = capsys.readouterr().out
    assert code == 0
    assert "complex  n=4" in out and "report:" in out
    assert not (tmp_path / "b/runs/simple.jsonl").exists()
    assert read_jsonl(tmp_path / "b/runs/complex.jsonl")[0]["meta"]["weights"] == {"example_1": 0.5}


def test_cli_smoke_runs_two_seeds_one_rollout(tmp_path):
    _CLI_STANDIN["fn"] = standin = StandIn()
    assert main(["batch", "--env", "test-standin", "--smoke", "--strategy", "simple", "--no-progress", "--out", str(tmp_path / "s")]) == 0
    assert sorted(standin.calls) == [(0, 0), (1, 0)]


def test_cli_guardrail_exits_one_with_its_message(tmp_path, capsys):
    _CLI_STANDIN["fn"] = StandIn(turns=lambda s, i: 0)
    code = main(["batch", "--env", "test-standin", "--smoke", "--strategy", "simple", "--no-progress", "--out", str(tmp_path / "g")])
    assert code == 1
    assert "mean agent turns is 0" in capsys.readouterr().err


def test_cli_upstream_error_exits_one_naming_status_and_url(tmp_path, capsys):
    def fail(job):
        raise UpstreamStatusError(401, "http://127.0.0.1:9/v1/chat/completions", "bad key")

    _CLI_STANDIN["fn"] = StandIn(fail=fail)
    code = main(["batch", "--env", "test-standin", "--smoke", "--no-progress", "--out", str(tmp_path / "u")])
    assert code == 1
    assert "HTTP 401 for http://127.0.0.1:9/v1/chat/completions" in capsys.readouterr().err


def test_cli_bad_step_config_exits_two_naming_the_file(tmp_path, capsys):
    bad = tmp_path / "step.toml"
    bad.write_text('[step_rewards]\nstrategy = "fancy"\n')
    code = main(["batch", "--env", "test-standin", "--smoke", "--step-config", str(bad), "--out", str(tmp_path / "x")])
    assert code == 2
    assert "step.toml" in capsys.readouterr().err


def test_cli_unknown_env_exits_two_listing_the_known_ones(tmp_path, capsys):
    code = main(["batch", "--env", "nope", "--smoke", "--no-progress", "--out", str(tmp_path / "n")])
    assert code == 2
    err = capsys.readouterr().err
    assert "unknown environment 'nope'; known: coding, crafter" in err


def test_capture_refuses_a_batch_only_environment_naming_it(tmp_path, capsys):
    assert main(["capture", "--env", "test-standin", "--out-dir", str(tmp_path / "x")]) == 2
    assert "--env test-standin: this environment only runs in a batch" in capsys.readouterr().err


def test_batch_refuses_an_out_folder_that_holds_something_else(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("not a batch")
    code = main(["batch", "--env", "test-standin", "--smoke", "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and err == [f"error: {out}: not empty and not a batch's folder (no batch.json); give a new or "
                                 "empty --out, or the folder of the batch to resume"]
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]  # nothing written into it


@pytest.mark.parametrize(("flag", "value", "field"), [
    ("--timeout-s", "-1", "timeout_s"), ("--timeout-s", "0", "timeout_s"), ("--timeout-s", "nan", "timeout_s"),
    ("--timeout-s", "inf", "timeout_s"), ("--n-prompts", "0", "n_prompts"), ("--n-prompts", "-3", "n_prompts"),
])
def test_cli_out_of_range_budget_exits_two_before_any_rollout(tmp_path, capsys, flag, value, field):
    out = tmp_path / "b"
    code = main(["batch", "--env", "test-standin", "--smoke", "--no-progress", "--out", str(out), flag, value])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith(f"error: {field}: ") and "out of range" in err[0]
    assert not out.exists()  # refused before the batch folder was made


def test_cli_a_push_repo_that_is_not_org_slash_name_exits_two_before_any_rollout(tmp_path, capsys, monkeypatch):
    _CLI_STANDIN["fn"] = standin = StandIn()
    monkeypatch.setenv("PUSH_TO_DATASET", "not a repo")
    out = tmp_path / "p"
    code = main(["batch", "--env", "test-standin", "--smoke", "--no-progress", "--push-every", "1", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["error: push_repo: 'not a repo' is not of the form org/name (the CLI reads it "
                                 "from PUSH_TO_DATASET)"]
    assert standin.calls == [] and not out.exists()


def test_a_second_batch_into_a_folder_a_batch_is_running_in_is_refused_and_touches_nothing(tmp_path):
    from rollout_dataset.errors import DatasetDirError

    started, release = threading.Event(), threading.Event()

    def hold(job):  # the first batch's rollout is in flight, its folder being written
        Path(job.artifact_dir).mkdir(parents=True, exist_ok=True)
        (Path(job.artifact_dir) / "in-flight.txt").write_text("being written")
        started.set()
        assert release.wait(30)

    config = make_config(tmp_path, seeds=[0], rollouts_per_seed=1, build_dataset=False)
    first = threading.Thread(target=run_batch, args=(config,), kwargs={"run_one": StandIn(fail=hold)})
    first.start()
    try:
        assert started.wait(30)
        second = StandIn()
        with pytest.raises(DatasetDirError, match="another batch is running in it"):
            run_batch(config, run_one=second)
        assert second.calls == []
        assert [p.name for p in (config.out_dir / "rollouts").glob("*/in-flight.txt")] == ["in-flight.txt"]
    finally:
        release.set()
        first.join(30)


@pytest.mark.parametrize("text", ["{", "", '{"batch_id": "not-a-uuid"}', "[]"])
def test_a_resume_with_an_unreadable_batch_json_is_refused_instead_of_starting_a_new_batch_id(tmp_path, text):
    from rollout_dataset.errors import DatasetDirError

    config = make_config(tmp_path, seeds=[0], rollouts_per_seed=2, build_dataset=False)
    run_batch(config, run_one=StandIn())
    finished = sorted(p.name for p in (config.out_dir / "rollouts").iterdir())
    (config.out_dir / "batch.json").write_text(text)
    again = StandIn()
    with pytest.raises(DatasetDirError, match=r"batch\.json: .*batch_id"):
        run_batch(config, run_one=again)
    assert again.calls == [] and (config.out_dir / "batch.json").read_text() == text
    assert sorted(p.name for p in (config.out_dir / "rollouts").iterdir()) == finished


@pytest.mark.parametrize(("args", "field"), [
    (["--seeds", "0-999999999"], "--seeds"), (["--num-seeds", "2000000000"], "--num-seeds"),
    (["--seeds", "0-999", "--rollouts-per-seed", "5000"], "rollouts_per_seed"),
])
def test_cli_a_batch_of_more_rollouts_than_the_limit_exits_two_before_planning_them(tmp_path, capsys, args, field):
    out = tmp_path / "big"
    code = main(["batch", "--env", "test-standin", "--no-progress", "--out", str(out), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: {field}: ") and "1000000" in err[0]
    assert not out.exists()


def test_a_rollout_whose_result_file_is_unreadable_is_run_again_and_named(tmp_path, caplog):
    config = make_config(tmp_path, seeds=[0], rollouts_per_seed=2, build_dataset=False)
    run_batch(config, run_one=StandIn())
    result_file = sorted((config.out_dir / "rollouts").glob(f"*/{RESULT_FILE}"))[0]
    result_file.write_text('{"rollout_id": "cut sh')  # cut short
    again = StandIn()
    run_batch(config, run_one=again)
    assert len(again.calls) == 1
    assert f"{result_file}: unreadable; its rollout is deleted and run again" in caplog.text
