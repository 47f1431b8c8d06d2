"""Naming a task container's failure in one line, and the stand-in images' names (no engine needed).

The outputs in tests/data/podman_outputs are what ``podman build`` 4.3 printed here: a Dockerfile step
that exits 3, and a base image whose registry does not resolve. Harbor embeds such output in its
exception (``Docker compose command failed ... Stdout: ...`` with the newlines escaped).
"""

from __future__ import annotations

from pathlib import Path

from rollout_dataset.harbor.adapter import DEFAULT_BUILD_TIMEOUT_S, build_timeout_s
from rollout_dataset.harbor.container_errors import describe_container_failure, failed_build_step
from rollout_dataset.harbor.standin_images import JAVA_HOME, STANDIN_TARGET, STANDINS, containerfile, standin_for
from rollout_dataset.harbor.trial_containers import compose_project

OUTPUTS = Path(__file__).resolve().parent / "data" / "podman_outputs"


def _harbor_wrapped(output: str) -> str:
    return ("RuntimeError: Docker compose command failed for environment t. Command: podman-compose --in-pod=false "
            f"build. Return code: 1. Stdout: {output.replace(chr(10), chr(92) + 'n')}. Stderr: None. ")


def test_a_failed_step_is_named_with_its_number_instruction_status_and_last_lines():
    text = (OUTPUTS / "build_step_fails.txt").read_text()
    for given in (text, _harbor_wrapped(text)):
        assert describe_container_failure(given) == (
            'image build failed at step 3/4 `RUN echo "compiling..." && echo "error: missing header foo.h" >&2 '
            '&& exit 3` (while running runtime: exit status 3); last output: compiling... | error: missing header foo.h')


def test_a_failed_step_keeps_only_its_last_five_lines_each_cut_to_200_characters():
    noisy = "\n".join(["STEP 1/2: FROM x", "STEP 2/2: RUN make"] + [f"line {i}" for i in range(50)] + ["x" * 500]
                      + ['Error: building at STEP "RUN make": while running runtime: exit status 2'])
    described = failed_build_step(noisy)
    assert described is not None
    assert "line 45" not in described and "line 46 | line 47 | line 48 | line 49 | " in described
    assert "x" * 199 + "…" in described and "x" * 201 not in described


def test_buildkits_failed_process_is_named_too():
    text = ('#7 [3/4] RUN pip install nope\n#7 1.2 ERROR: No matching distribution found for nope\n'
            'ERROR: failed to solve: process "/bin/sh -c pip install nope" did not complete successfully: exit code: 1')
    assert failed_build_step(text) == ('image build failed at step `/bin/sh -c pip install nope` (exit code: 1); last '
                                       'output: #7 [3/4] RUN pip install nope | #7 1.2 ERROR: No matching distribution '
                                       'found for nope')


def test_an_unreachable_registry_is_named_with_the_image_and_what_provides_a_stand_in():
    text = (OUTPUTS / "base_image_unreachable.txt").read_text()  # FROM python:3.9-slim: no stand-in has it
    described = describe_container_failure(_harbor_wrapped(text))
    assert described is not None
    assert described.startswith("base image python:3.9-slim cannot be pulled: its registry is unreachable from this host")
    assert "no stand-in provides it" in described
    covered = text.replace("python:3.9-slim", "python:3.12-slim")
    assert f"`{STANDIN_TARGET}` builds a local stand-in tagged python:3.12-slim (python)" in describe_container_failure(covered)


def test_a_short_image_name_with_no_search_registry_is_named_as_unreachable_with_the_stand_in_hint():
    # podman build's own words on a host with no unqualified-search registries (this machine's podman 4.3)
    output = ('Error: creating build container: short-name "eclipse-temurin:17-jdk" did not resolve to an alias '
              'and no unqualified-search registries are defined in "/etc/containers/registries.conf"')
    described = describe_container_failure(output)
    assert described.startswith("base image eclipse-temurin:17-jdk cannot be pulled: its registry is unreachable")
    assert "standin_images --list" in described  # no stand-in has that name
    described = describe_container_failure(output.replace("eclipse-temurin:17-jdk", "python:3.12-slim"))
    assert "make standin-images` builds a local stand-in tagged python:3.12-slim" in described


def test_an_image_the_registry_does_not_have_is_named_as_missing():
    text = ("Error: creating build container: initializing source docker://ghcr.io/acme/nope:1: reading manifest 1 in "
            "ghcr.io/acme/nope: manifest unknown")
    assert describe_container_failure(text).startswith("base image ghcr.io/acme/nope:1 does not exist in its registry")


def test_harbors_no_network_refusal_and_a_container_gone_are_named():
    refusal = "ValueError: network_mode='no-network' is not supported by EnvironmentType.PODMAN environment."
    assert "egress-control sidecar needs images" in describe_container_failure(refusal)
    gone = "Return code: 255. Stdout: Error: can only create exec sessions on running containers: container state improper"
    assert describe_container_failure(gone).startswith("the task's container stopped under the running trial")
    stopped = ("RuntimeError: Container did not become ready for exec within 90s: Error: OCI runtime error: runc: exec "
               "failed: cannot exec in a stopped container")  # what Harbor raised when the test below killed the runtime
    assert describe_container_failure(stopped) == ("the task's container stopped under the running trial: cannot exec "
                                                   "in a stopped container")
    gone = ("RuntimeError: Engine cp failed ('1fa8:/logs/agent/.' -> 'x'): Error: \"/logs/agent/.\" could not be found on "
            "container 1fa8: open /proc/5955/ns/mnt: no such file or directory")  # Harbor's trial.log, same test
    assert describe_container_failure(gone).endswith("open /proc/5955/ns/mnt: no such file or directory")
    netavark = 'Error: unable to start container "08a5": netavark: No such file or directory (os error 2)'
    assert "/usr/sbin" in describe_container_failure(netavark)
    assert describe_container_failure("ordinary failure") is None


def test_the_from_names_of_public_task_sets_map_to_their_stand_ins():
    assert standin_for("python:3.12-slim") == standin_for("public.ecr.aws/docker/library/python:3.11-slim") == "python"
    assert standin_for("ubuntu:24.04") == standin_for("docker.io/library/debian:bookworm-slim") == "plain"
    assert standin_for("ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624") == "plain"
    assert standin_for("ghcr.io/astral-sh/uv:0.8.15") == "uv"
    assert standin_for("eclipse-temurin:17") == standin_for("eclipse-temurin:17.0.12_7-jdk-jammy") == "temurin"
    assert standin_for("eclipse-temurin:21") is None and standin_for("gcc:14") is None and standin_for("python") is None


def test_the_temurin_stand_in_puts_the_jdk_where_the_official_image_has_it():
    text = containerfile(next(standin for standin in STANDINS if standin.key == "temurin"))
    assert "openjdk-17-jdk-headless" in text
    assert f"JAVA_HOME={JAVA_HOME} PATH={JAVA_HOME}/bin:/usr/local/sbin:" in text and JAVA_HOME == "/opt/java/openjdk"
    assert f"{JAVA_HOME}/bin/javac -version" in text  # the build fails unless the link reaches a JDK
    assert "LC_ALL=en_US.UTF-8" in text and "locale-gen en_US.UTF-8" in text


def test_every_base_stand_in_keeps_the_host_ca_in_a_file_of_its_own_and_only_python_ones_free_pip():
    for standin in STANDINS:
        text = containerfile(standin)
        if standin.key == "uv":  # a scratch image of two binaries, as the real one
            assert "FROM scratch" in text and "COPY --from=fetch /uv /uvx /" in text
            continue
        assert "COPY host-ca.crt /usr/local/share/host-ca.crt" in text
        assert "SSL_CERT_FILE=/usr/local/share/host-ca.crt" in text and "PIP_CERT=" in text and "REQUESTS_CA_BUNDLE=" in text
        assert ("EXTERNALLY-MANAGED" in text) == standin.python


def test_harbors_compose_project_and_build_timeout_are_read_as_harbor_does(tmp_path):
    assert compose_project("Trial.1") == "trial-1__env" and compose_project("_x") == "0_x__env"
    (tmp_path / "task.toml").write_text("[environment]\nbuild_timeout_sec = 1800.0\n")
    assert build_timeout_s(tmp_path) == 1800.0
    (tmp_path / "task.toml").write_text("[environment]\nbuild_timeout_sec = 'soon'\n")
    assert build_timeout_s(tmp_path) == DEFAULT_BUILD_TIMEOUT_S
