"""The sandbox: limits that hit are recorded, no network, a scrubbed environment, the allow-list root."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import psutil
import pytest

from rollout_dataset.errors import SandboxUnavailableError
from rollout_dataset.sandbox import HostForwarder, Limits, Sandbox, probe_isolation, run_in_sandbox
from rollout_dataset.sandbox.forward import inner_wrapper
from rollout_dataset.tasks import builtin_data_path

PY = sys.executable
ALLOW = probe_isolation().allow_list
NETNS = MOUNTNS = PIDNS = ALLOW
needs_allow_list = pytest.mark.skipif(not ALLOW, reason="bubblewrap cannot build the allow-list root here "
                                                        "(make test installs it); see Sandbox.isolation()")


def test_a_command_runs_in_its_own_working_directory_and_reads_stdin():
    with Sandbox() as box:
        box.write_file("echo.py", "import os, sys\nprint(os.getcwd())\nprint(sys.stdin.read().upper())\n")
        result = box.run([PY, "echo.py"], stdin="hello\n")
        assert result.ok and result.limit is None and not result.timed_out
        assert result.stdout.splitlines()[:2] == [str(box.workdir), "HELLO"]


def test_a_shell_command_string_runs_with_sh():
    result = run_in_sandbox("echo $((6 * 7)); exit 3")
    assert result.stdout == "42\n" and result.exit_code == 3 and result.error == "exited with status 3"


def test_the_temporary_working_directory_is_deleted_on_close():
    with Sandbox() as box:
        workdir = box.workdir
        assert workdir.is_dir()
    assert not workdir.exists()


def test_a_given_working_directory_is_kept(tmp_path):
    with Sandbox(tmp_path) as box:
        box.write_file("a.txt", "x")
    assert (tmp_path / "a.txt").read_text() == "x"


def test_paths_outside_the_working_directory_are_refused():
    with Sandbox() as box, pytest.raises(ValueError, match="outside the sandbox"):
        box.write_file("../escape.txt", "x")


def _processes_running(argv: list[str]) -> list[int]:
    """Pids of live (not zombie) processes on this machine whose command line is exactly `argv`."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if process.info["cmdline"] == argv and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process.pid)
    return found


def test_wall_time_limit_kills_the_process_group_and_is_recorded():
    child = ["sleep", "60.0417"]  # a command line no other process has: the grandchild the limit must kill too
    result = run_in_sandbox([PY, "-c", f"import subprocess, time; subprocess.Popen({child!r}); time.sleep(5)"],
                            limits=Limits(wall_s=0.5))
    assert result.timed_out and result.limit == "wall"
    assert "wall-time limit of 0.5 s" in result.error
    assert _processes_running(child) == []


def test_cpu_time_limit_is_recorded():
    result = run_in_sandbox([PY, "-c", "while True: pass"], limits=Limits(cpu_s=1, wall_s=20))
    assert result.limit == "cpu" and not result.timed_out
    assert "CPU-time limit of 1 s" in result.error


def test_memory_limit_is_recorded():
    result = run_in_sandbox([PY, "-c", "block = bytearray(400 * 1024 * 1024)"], limits=Limits(memory_mb=200))
    assert result.limit == "memory" and "MemoryError" in result.stderr
    assert "memory limit of 200 MiB" in result.error


def test_output_limit_truncates_with_a_note_and_stops_the_process():
    result = run_in_sandbox([PY, "-c", "while True: print('x' * 99)"], limits=Limits(output_bytes=5000, wall_s=20))
    assert result.limit == "output" and not result.timed_out
    assert result.stdout.endswith("[output truncated at 5000 bytes]")
    assert len(result.stdout) < 5100


def test_file_size_limit_is_recorded():
    result = run_in_sandbox([PY, "-c", "open('big', 'wb').write(b'x' * (3 << 20))"], limits=Limits(file_mb=1))
    assert result.limit == "file"


def test_limits_must_be_positive():
    with pytest.raises(ValueError, match="Limits.wall_s must be a positive number"):
        Limits(wall_s=0)


@pytest.mark.skipif(not NETNS, reason="no network namespace on this machine (see Sandbox.isolation())")
def test_network_is_blocked_even_to_a_listening_loopback_port():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        code = f"import socket\ntry:\n socket.create_connection(('127.0.0.1', {port}), 2)\n print('connected')\nexcept OSError as e:\n print('blocked', e.errno)\n"
        result = run_in_sandbox([PY, "-c", code])
        assert result.stdout.startswith("blocked"), result.stdout + result.stderr
        outside = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=30)
        assert outside.stdout.startswith("connected")  # the control: the same code reaches the port from outside
    finally:
        server.close()


@needs_allow_list
def test_one_forwarded_port_is_reachable_and_no_other(tmp_path):
    servers = [socket.socket(), socket.socket()]
    for server in servers:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
    forwarded, other = (server.getsockname()[1] for server in servers)
    code = ("import socket\n"
            f"for port in ({forwarded}, {other}):\n"
            "    try:\n        socket.create_connection(('127.0.0.1', port), 2).close(); print('open')\n"
            "    except OSError:\n        print('closed')\n")
    try:
        with HostForwarder(forwarded) as forwarder, Sandbox(limits=Limits(memory_mb=None, cpu_s=None),
                                                            extra_bwrap_args=forwarder.bind_args()) as box:
            result = box.run(inner_wrapper(forwarded) + [PY, "-c", code])
    finally:
        for server in servers:
            server.close()
    assert result.stdout.split() == ["open", "closed"], result.stderr


def test_a_trusted_dummy_key_is_passed_through():
    with Sandbox(env={"OPENAI_API_KEY": "dummy-local"}, trusted_env=["OPENAI_API_KEY"]) as box:
        assert box.run("echo $OPENAI_API_KEY").stdout == "dummy-local\n"


def test_environment_is_scrubbed_of_secrets_and_home_is_the_workdir(monkeypatch):
    for name in ("HF_TOKEN", "OPENAI_API_KEY", "HTTPS_PROXY", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "sekrit-value")
    with Sandbox(env={"MY_API_KEY": "sekrit-value", "GREETING": "hi"}) as box:
        result = box.run([PY, "-c", "import os, json; print(json.dumps(dict(os.environ)))"])
        env = json.loads(result.stdout)
        assert "sekrit-value" not in result.stdout
        assert env["HOME"] == str(box.workdir) and env["TMPDIR"] == "/tmp"
        assert env["GREETING"] == "hi"
        assert not any("TOKEN" in k or "KEY" in k or "PROXY" in k for k in env)


@needs_allow_list
def test_the_builtin_task_data_and_the_project_checkout_are_not_in_the_root():
    path = builtin_data_path()
    assert os.path.getsize(path) > 1000
    package = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    code = (f"import os\nprint(os.path.exists({path!r}), os.path.exists({package!r}))\n"
            "try:\n    import rollout_dataset.tasks\n    print('importable')\nexcept ImportError:\n    print('no package')\n")
    result = run_in_sandbox([PY, "-c", code])
    assert result.stdout.split() == ["False", "False", "no", "package"], result.stderr


@needs_allow_list
def test_the_task_data_reads_as_empty_when_the_runtime_holds_the_package():
    # a wheel install puts rollout_dataset/ under sys.prefix, which every root binds as the runtime:
    # binding the package's parent stands for it (in an editable install it lies outside the runtime)
    path = builtin_data_path()
    site = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(path)))))
    code = f"import os\nprint(os.path.exists({path!r}), len(os.listdir(os.path.dirname({path!r}))))\n"
    with Sandbox(ro_paths=[site]) as box:
        result = box.run([PY, "-c", code])
    assert result.stdout.split() == ["False", "0"], (result.stdout, result.stderr)


@needs_allow_list
def test_the_task_data_reads_as_empty_at_every_path_a_bind_shows_it(tmp_path):
    # a worktree's .venv symlink binds the venv twice: at its real path and at the link's path
    path = builtin_data_path()
    site = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(path)))))
    alias = tmp_path / "alias-site"
    seen = str(alias / os.path.relpath(path, site))
    code = f"import os\nprint(os.path.exists({seen!r}), len(os.listdir(os.path.dirname({seen!r}))))\n"
    with Sandbox(ro_paths=[(site, alias)]) as box:
        result = box.run([PY, "-c", code])
    assert result.stdout.split() == ["False", "0"], (result.stdout, result.stderr)


@needs_allow_list
def test_a_masked_path_inside_the_root_reads_as_empty_and_cannot_be_unmounted(tmp_path):
    (tmp_path / "work").mkdir()
    secret = tmp_path / "work" / "held_out_tests.json"
    secret.write_text('{"tests": "the answers"}')
    code = (f"import subprocess\nprint(repr(open({str(secret)!r}).read()))\n"
            f"print(subprocess.run(['umount', {str(secret)!r}], capture_output=True).returncode != 0)")
    with Sandbox(tmp_path / "work", hide_paths=[secret]) as box:
        result = box.run([PY, "-c", code])
    assert result.stdout.split() == ["''", "True"], result.stderr
    assert secret.read_text() == '{"tests": "the answers"}'


def test_a_hidden_path_that_contains_the_workdir_is_left_visible(tmp_path):
    (tmp_path / "work").mkdir()
    with Sandbox(tmp_path / "work", hide_paths=[tmp_path]) as box:
        assert tmp_path.resolve() not in box.hidden_paths
        assert box.run("pwd").stdout.strip() == str(box.workdir)


def test_isolation_reports_what_is_and_is_not_isolated():
    report = Sandbox.isolation()
    assert {"level", "network", "filesystem", "processes", "privileges", "limits", "environment",
            "not_isolated"} <= set(report)
    assert report["level"] == ("allow-list" if ALLOW else "unsafe")
    assert isinstance(report["not_isolated"], list) and report["not_isolated"]


@needs_allow_list
def test_other_processes_are_invisible_from_inside():
    result = run_in_sandbox([PY, "-c", "import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"])
    visible = json.loads(result.stdout)
    assert os.getpid() not in visible and max(visible) < 50


@pytest.fixture
def isolation_off(monkeypatch):
    monkeypatch.setenv("ROLLOUT_DATASET_SANDBOX_ISOLATION", "off")
    probe_isolation.cache_clear()
    yield
    monkeypatch.undo()
    probe_isolation.cache_clear()


def test_without_the_allow_list_root_the_sandbox_refuses_to_run_code(isolation_off, tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(SandboxUnavailableError, match="--unsafe-sandbox"):
        run_in_sandbox(f"touch {marker}")
    assert not marker.exists()


def test_an_explicit_opt_out_runs_with_limits_only_and_the_report_says_so(isolation_off):
    report = Sandbox.isolation()
    assert report["level"] == "unsafe" and report["network"].startswith("none")
    child = ["sleep", "60.0418"]  # without a pid namespace, only the process-group kill stops the grandchild
    result = run_in_sandbox([PY, "-c", f"import subprocess, time; subprocess.Popen({child!r}); time.sleep(5)"],
                            limits=Limits(wall_s=0.3), unsafe=True)
    assert result.limit == "wall"
    assert _processes_running(child) == []
    assert run_in_sandbox("exit 7", unsafe=True).exit_code == 7


@needs_allow_list
@pytest.mark.skipif(not os.path.isfile("/etc/ssl/certs/ca-certificates.crt"), reason="no system CA bundle on this host")
def test_the_system_ca_bundle_an_sdk_reads_is_visible_read_only():
    code = ("import ssl\nssl.create_default_context(cafile='/etc/ssl/certs/ca-certificates.crt')\n"
            "try:\n    open('/etc/ssl/certs/planted.pem', 'w')\nexcept OSError:\n    print('read-only')\n")
    result = run_in_sandbox([PY, "-c", code])
    assert result.exit_code == 0 and result.stdout.strip() == "read-only", result.stderr


_HTTPS_SDK_CALL = r'''
import http.server, json, ssl, sys, threading
import openai

class Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "tls-ok", "object": "model", "created": 0,
                                                        "owned_by": "test"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Models)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("server.pem")
server.socket = context.wrap_socket(server.socket, server_side=True)
threading.Thread(target=server.serve_forever, daemon=True).start()
client = openai.OpenAI(base_url=f"https://localhost:{server.server_address[1]}/v1", api_key="dummy", max_retries=0)
print(client.models.list().data[0].id)
'''


@needs_allow_list
def test_an_sdk_in_the_sandbox_verifies_https_against_the_ca_bundle_ssl_cert_file_names(tmp_path):
    # the openai SDK (httpx) loads SSL_CERT_FILE when it builds its client: the bundle, outside every
    # folder the root holds, is mounted read-only; the https server runs on the sandbox's own loopback
    trustme = pytest.importorskip("trustme")
    authority = trustme.CA()
    (tmp_path / "ca").mkdir()
    authority.cert_pem.write_to_path(str(tmp_path / "ca" / "corp-ca.pem"))
    work = tmp_path / "work"
    work.mkdir()
    authority.issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(str(work / "server.pem"))
    (work / "call.py").write_text(_HTTPS_SDK_CALL)
    with Sandbox(work, env={"SSL_CERT_FILE": str(tmp_path / "ca" / "corp-ca.pem")}) as box:
        result = box.run([PY, "call.py"])
    assert result.exit_code == 0 and result.stdout.strip() == "tls-ok", result.stderr[-2000:]


@needs_allow_list
def test_a_bundle_holding_a_private_key_is_not_mounted(tmp_path):
    trustme = pytest.importorskip("trustme")
    mixed = tmp_path / "mixed.pem"
    trustme.CA().issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(str(mixed))
    code = f"import os\nprint(os.path.exists({str(mixed)!r}))\n"
    (tmp_path / "w").mkdir()
    with Sandbox(tmp_path / "w", env={"SSL_CERT_FILE": str(mixed)}) as box:
        result = box.run([PY, "-c", code])
    assert result.exit_code == 0 and result.stdout.strip() == "False", result.stderr
