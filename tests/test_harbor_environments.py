"""Which environment runs a Harbor task (`--harbor-env`, `rollout_dataset.harbor.environments`).

Harbor's own preflight decides whether a runtime works (run in Harbor's venv): a ``docker`` binary
whose ``docker info`` fails is no Docker. The runtimes are stand-in scripts on a PATH of their own;
the cloud environments are checked for their credentials only (they cannot be reached from here).
No test here starts a container or an environment root.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rollout_dataset.errors import ConfigError
from rollout_dataset.harbor.adapter import ENVIRONMENT_SPEC, _harbor_env, environment_for, find_harbor
from rollout_dataset.harbor.environments import (BWRAP, HARBOR_ENV_CHOICES, HARBOR_ENVIRONMENT_TYPES,
                                                 HarborTaskUnsupportedError, choose_environment, credential_variables,
                                                 harbor_python, host_memory_mb, read_task_needs)
from rollout_dataset.recipes.coding import CaptureConfig

needs_harbor = pytest.mark.skipif(find_harbor() is None, reason="Harbor is not installed (make harbor)")


def _task(tmp_path: Path, dockerfile: str | None = "FROM python:3.12-slim\nWORKDIR /app\n", toml: str = "",
          name: str = "t") -> Path:
    task = tmp_path / name
    (task / "tests").mkdir(parents=True)
    (task / "environment").mkdir()
    (task / "task.toml").write_text(toml)
    (task / "instruction.md").write_text("Do it.\n")
    (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    if dockerfile is not None:
        (task / "environment" / "Dockerfile").write_text(dockerfile)
    return task


def _runtimes(tmp_path: Path, **scripts: str) -> str:
    """A PATH holding only stand-in runtime scripts (``docker`` -> its shell body)."""
    folder = tmp_path / "bin"
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in scripts.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    return str(folder)


DOCKER_WITHOUT_DAEMON = ('[ "$1" = info ] && { echo "Cannot connect to the Docker daemon at '
                         'unix:///var/run/docker.sock" >&2; exit 1; }; exit 0')
BUILDS = "FROM ubuntu:24.04\nRUN apt-get install -y gcc\nWORKDIR /app\n"


def _never(names: tuple[str, ...]) -> dict[str, str | None]:
    raise AssertionError(f"no runtime is checked for a task that needs no image (asked {names})")


@needs_harbor
def test_the_environment_names_are_harbors_own_enum():
    out = subprocess.run([harbor_python(find_harbor()), "-m", "rollout_dataset.harbor.preflight", "--types"],
                         capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(Path(__file__).resolve().parents[1]), "PATH": "/usr/bin:/bin"})
    assert tuple(json.loads(out.stdout)["types"]) == HARBOR_ENVIRONMENT_TYPES
    assert HARBOR_ENV_CHOICES[:2] == ("auto", "bwrap")


OFFLINE = '[environment]\nnetwork_mode = "no-network"\n'


def test_auto_runs_an_offline_task_that_needs_no_image_in_bwrap_and_records_the_stand_in_base(tmp_path):
    choice = choose_environment(_task(tmp_path, toml=OFFLINE), "auto", preflight=_never)
    assert choice.name == BWRAP and choice.network_given == "none"
    assert choice.facts()["base_image"] == "python:3.12-slim"
    assert "runs on this host's /usr" in choice.notes[0]
    legacy = choose_environment(_task(tmp_path, toml="[environment]\nallow_internet = false\n", name="u"), "auto",
                                preflight=_never)
    assert legacy.name == BWRAP


def test_auto_gives_a_task_that_asks_for_a_network_a_runtime_else_bwrap_without_one_recorded(tmp_path):
    task = _task(tmp_path)  # no network_mode: public, as Harbor reads it
    choice = choose_environment(task, "auto", preflight=lambda names: {n: None if n == "podman" else "no" for n in names})
    assert choice.name == "podman" and choice.checked == {"docker": "no", "podman": None}
    choice = choose_environment(task, "auto", preflight=lambda names: {n: f"{n} is not here" for n in names})
    assert choice.name == BWRAP and choice.network_given == "none"
    assert "network_mode public: the task asks for a network and the bubblewrap environment has none" in choice.notes[1]
    assert "docker: docker is not here; podman: podman is not here" in choice.notes[1]


def test_a_from_the_host_cannot_stand_in_for_needs_an_image(tmp_path):
    task = _task(tmp_path, "FROM eclipse-temurin:17\nWORKDIR /app\n")
    needs = read_task_needs(task)
    assert needs.needs_image and needs.foreign_base and not needs.image_steps
    with pytest.raises(HarborTaskUnsupportedError, match=r"FROM 'eclipse-temurin:17'.*--harbor-env bwrap"):
        choose_environment(task, "bwrap", preflight=_never)


def test_the_dockerfile_is_read_by_a_parser_joined_lines_stages_env_and_workdir(tmp_path):
    task = _task(tmp_path, "# a comment\nARG V=1\nFROM python:3.11-slim AS build\nENV A=1 B=\"two words\"\n"
                           "WORKDIR /srv\nWORKDIR sub\nRUN pip install \\\n    pytest\nCOPY x /x\n")
    needs = read_task_needs(task)
    assert needs.base_image == "python:3.11-slim" and needs.workdir == "/srv/sub"
    assert needs.env == {"A": "1", "B": "two words"}
    assert needs.image_steps == ("RUN pip install pytest", "COPY x /x")


@needs_harbor
def test_auto_skips_a_docker_binary_without_a_daemon_and_names_every_check(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", _runtimes(tmp_path, docker=DOCKER_WITHOUT_DAEMON))
    with pytest.raises(HarborTaskUnsupportedError) as refused:
        choose_environment(_task(tmp_path, BUILDS), "auto", harbor=find_harbor())
    message = str(refused.value)
    assert "builds an image ('RUN apt-get install -y gcc')" in message
    assert "docker: Docker daemon is not running" in message
    assert "podman: Podman is not installed" in message
    assert "singularity: not tried: it runs only tasks with a docker_image" in message
    assert "apt-get install podman and pip install podman-compose" in message
    assert "\n" not in message


@needs_harbor
def test_auto_picks_docker_where_docker_info_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", _runtimes(tmp_path, docker="exit 0"))
    choice = choose_environment(_task(tmp_path, BUILDS), "auto", harbor=find_harbor())
    assert choice.name == "docker" and choice.checked == {"docker": None}
    assert environment_for(_task(tmp_path, BUILDS, name="u")) == "docker"


@needs_harbor
def test_a_runtime_that_works_is_checked_once_one_that_did_not_is_asked_again(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    failing = f'echo info >> {calls}; exit 1'
    monkeypatch.setenv("PATH", _runtimes(tmp_path, docker=failing))
    task = _task(tmp_path, BUILDS)
    for _ in range(2):
        with pytest.raises(HarborTaskUnsupportedError):
            choose_environment(task, "auto", harbor=find_harbor())
    assert calls.read_text().split() == ["info", "info"]
    calls.unlink()
    monkeypatch.setenv("PATH", _runtimes(tmp_path / "w", docker=f'echo info >> {calls}; exit 0'))
    for _ in range(2):
        assert choose_environment(task, "auto", harbor=find_harbor()).name == "docker"
    assert calls.read_text().split() == ["info"]


def test_auto_tries_singularity_only_for_a_docker_image_and_its_refusal_gives_no_dockerfile_hint(tmp_path):
    task = _task(tmp_path, None, '[environment]\ndocker_image = "ghcr.io/org/img:1"\n')
    asked: list[tuple[str, ...]] = []

    def none_work(names: tuple[str, ...]) -> dict[str, str | None]:
        asked.append(names)
        return {name: f"{name} is not here" for name in names}

    with pytest.raises(HarborTaskUnsupportedError) as refused:
        choose_environment(task, "auto", preflight=none_work)
    assert asked == [("docker", "podman", "singularity")]
    message = str(refused.value)
    assert "prebuilt image (task.toml [environment] docker_image = 'ghcr.io/org/img:1')" in message
    assert "RUN/COPY/ADD" not in message and "Dockerfile" not in message
    with pytest.raises(HarborTaskUnsupportedError, match="RUN/COPY/ADD"):  # the Dockerfile's own hint
        choose_environment(_task(tmp_path, BUILDS, name="u"), "auto", preflight=none_work)


def test_singularity_is_refused_for_a_task_that_builds_from_its_dockerfile(tmp_path):
    with pytest.raises(HarborTaskUnsupportedError, match="singularity environment runs only tasks with a docker_image"):
        choose_environment(_task(tmp_path, BUILDS), "singularity", preflight=lambda names: {"singularity": None})


@needs_harbor
def test_a_cloud_environment_without_its_credential_is_refused_naming_the_variable(tmp_path, monkeypatch):
    for name in ("DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(HarborTaskUnsupportedError, match=r"--harbor-env daytona cannot run here: .*DAYTONA_API_KEY"):
        choose_environment(_task(tmp_path, BUILDS), "daytona", harbor=find_harbor())


def test_a_cloud_environment_gets_its_own_credentials_and_no_other_secret(monkeypatch):
    monkeypatch.setenv("DAYTONA_API_KEY", "dtn-secret")
    monkeypatch.setenv("E2B_API_KEY", "e2b-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    assert credential_variables("daytona") == {"DAYTONA_API_KEY": "dtn-secret"}
    assert credential_variables("ec2")["AWS_SECRET_ACCESS_KEY"] == "aws-secret"
    assert credential_variables("podman") == {} and credential_variables(BWRAP) == {}
    env = _harbor_env("dummy", "/nowhere", "daytona")
    assert env["DAYTONA_API_KEY"] == "dtn-secret" and "E2B_API_KEY" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert "DAYTONA_API_KEY" not in _harbor_env("dummy", "/nowhere", BWRAP)


def test_a_gpu_or_more_memory_than_the_machine_has_is_refused_up_front(tmp_path):
    with pytest.raises(HarborTaskUnsupportedError, match=r"gpus = 2, and this machine has 0 GPU"):
        choose_environment(_task(tmp_path, toml="[environment]\ngpus = 2\n"), "auto", preflight=_never)
    total = host_memory_mb()
    assert total is not None
    with pytest.raises(HarborTaskUnsupportedError, match=rf"memory_mb = {total * 4}, more than this machine's {total} MB"):
        choose_environment(_task(tmp_path, toml=f"[environment]\nmemory_mb = {total * 4}\n", name="u"), "auto",
                           preflight=_never)
    # a cloud environment brings its own machine
    choice = choose_environment(_task(tmp_path, toml="[environment]\ngpus = 2\n", name="v"), "modal",
                                preflight=lambda names: {"modal": None})
    assert choice.name == "modal"


def test_an_unknown_environment_name_is_refused_everywhere_it_can_be_given(tmp_path):
    with pytest.raises(ConfigError, match="--harbor-env nope: unknown; use auto, bwrap or one of Harbor's"):
        choose_environment(_task(tmp_path), "nope", preflight=_never)
    with pytest.raises(ValueError, match="harbor_env must be auto, bwrap or one of Harbor's environment types"):
        CaptureConfig(harbor_env="nope")


def test_capture_takes_harbor_env_and_refuses_an_unknown_one_in_one_line(tmp_path, capsys):
    from rollout_dataset.cli import build_parser, main
    from rollout_dataset.cli.capture_cmd import config_from_args

    argv = ["capture", "--harness", "terminus-2", "--harbor-env", "podman"]
    args = build_parser(argv).parse_args(argv)
    assert config_from_args(args).harbor_env == "podman"
    code = main(["capture", "--harness", "terminus-2", "--tasks", "harbor-builtin", "--harbor-env", "nope",
                 "--out-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "harbor_env must be auto, bwrap or one of Harbor's environment types" in err[-1]
    assert not (tmp_path / "out").exists()


def test_batch_takes_harbor_env_as_an_env_option(tmp_path):
    from rollout_dataset.batch.config import BatchConfig
    from rollout_dataset.recipes.coding.env import CodingEnvironment

    environment = CodingEnvironment()
    config = BatchConfig(out_dir=tmp_path / "b", seeds=[0], env_options={"harbor_env": "podman"}, unsafe_sandbox=True)
    options = environment.batch_options(config)
    assert options["harbor_env"] == "podman"
    from types import SimpleNamespace

    job = SimpleNamespace(seed=0, rollout_idx=0, rollout_id="a" * 32, artifact_dir=tmp_path / "r",
                          settings={"tasks": "harbor-builtin", "n_prompts": 64, "timeout_s": 60.0, "max_turns": 5})
    assert environment.batch_config(config, job, options).harbor_env == "podman"  # every rollout of the batch
    with pytest.raises(ConfigError, match="--env-option harbor_env=nope: unknown"):
        environment.batch_options(BatchConfig(out_dir=tmp_path / "c", seeds=[0], env_options={"harbor_env": "nope"},
                                              unsafe_sandbox=True))


def test_the_bwrap_spec_is_what_harbor_gets_for_bwrap(tmp_path):
    assert environment_for(_task(tmp_path), "bwrap") == ENVIRONMENT_SPEC
    assert environment_for(_task(tmp_path, toml=OFFLINE, name="u")) == ENVIRONMENT_SPEC


def test_a_no_network_task_under_podman_gets_the_projects_podman_environment_and_a_public_one_harbors():
    from rollout_dataset.harbor.adapter import environment_arg
    from rollout_dataset.harbor.environments import EnvironmentChoice, TaskNeeds
    from rollout_dataset.harbor.installed import PROXIED_PODMAN_SPEC

    image = ("RUN echo hi",)
    assert environment_arg(EnvironmentChoice("podman", TaskNeeds(image_steps=image, network="no-network"))) == \
        PROXIED_PODMAN_SPEC  # Harbor's own needs registry images (its egress sidecar) to enforce no-network
    assert environment_arg(EnvironmentChoice("podman", TaskNeeds(image_steps=image))) == "podman"
    assert environment_arg(EnvironmentChoice("docker", TaskNeeds(image_steps=image, network="no-network"))) == "docker"
    assert environment_arg(EnvironmentChoice(BWRAP, TaskNeeds(network="no-network"))) == ENVIRONMENT_SPEC
