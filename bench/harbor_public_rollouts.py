"""Benchmark: captured rollouts on public Harbor tasks under Podman, against Harbor alone.

For a few public task folders (each read from a git copy of its repository at a recorded commit; tasks
whose image builds and whose ``oracle`` scores 1.0 in `bench/harbor_tasksets.py`), one at a time:

  * image build time under the machine's Podman storage: cold (``podman build --no-cache``: every step
    runs, the stand-in base image is local) and cached (the same build again);
  * terminus-2 (its calls from the host, the task's container under ``--harbor-env podman``): Harbor
    alone (`rollout_dataset.harbor.adapter.run_terminus` straight at the model server) and the captured
    rollout (`capture_rollout`: proxy, trace, export, artifacts, checks), the verifier's reward, the
    capture level and the calls;
  * with ``--installed NAME``, Harbor's installed agent NAME (``harbor:NAME``) on the first task: Harbor
    alone (`rollout_dataset.harbor.installed.run_installed_agent` relaying the container's port straight
    to the model server) and captured, the same figures.

The model server is the embedded local backend with the ``script`` policy. Its script is written here,
per task, from the task's own ``solution/`` folder: the agent's command unpacks it to ``/solution`` and
runs ``solve.sh`` (what Harbor's oracle runs), so the verifier's reward shows the captured rollout ran in
the task's real environment. It is a scripted player, not a model: the figures are the pipeline's, not
an agent's skill. Nothing fetched is written outside a temporary folder.

    PYTHONPATH=. nice .venv/bin/python bench/harbor_public_rollouts.py \\
        --task purple29th/purple29th-tbench-2:PATH [--task ...] [--installed mini-swe-agent] \\
        [--mirror-root /work/.mirror] [--repo OWNER/NAME=GITDIR]

Writes bench/results/harbor_public_rollouts.json (each source as repo@commit).
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import io
import json
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "harbor_public_rollouts.json"
_CHUNK = 1500  # characters of base64 per typed command (a terminal line stays short)
_SOLVE_WAIT_S = 60.0
#: output tokens per call: an answer carries the solution folder (base64), thousands of tokens
_MAX_TOKENS = 16384
_CONTEXT = 131072  # the capture's local backend context (CaptureConfig.local_max_model_len)


def _git(gitdir: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "--git-dir", str(gitdir), *args], capture_output=True, check=True)


def extract_task(gitdir: Path, commit: str, path: str, into: Path) -> Path:
    """The task folder at `commit`, alone in a folder of its own (so it is ``--task-index 0``)."""
    archive = _git(gitdir, "archive", commit, path).stdout
    staging = into / "staging"
    staging.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(staging)], input=archive, check=True)
    task = into / "tasks" / Path(path).name
    task.parent.mkdir(parents=True)
    (staging / path).rename(task)
    return task


def solution_b64(task: Path) -> str:
    """The task's ``solution/`` folder as a base64 gzip tar."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for item in sorted((task / "solution").rglob("*")):
            tar.add(item, arcname=str(item.relative_to(task / "solution")), recursive=False)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _unpack_commands(b64: str) -> list[str]:
    return (["rm -f /tmp/rd-solution.b64"] +
            [f"printf '%s' '{b64[i:i + _CHUNK]}' >> /tmp/rd-solution.b64" for i in range(0, len(b64), _CHUNK)] +
            ["mkdir -p /solution && base64 -d /tmp/rd-solution.b64 | tar -xz -C /solution"])


def terminus_script(b64: str) -> dict[str, Any]:
    """terminus-2 answers: unpack the solution, run ``solve.sh`` from the task's working directory, finish."""
    keys = [{"keystrokes": f"{c}\n", "duration": 0.1} for c in _unpack_commands(b64)]
    keys.append({"keystrokes": "bash /solution/solve.sh; echo RD_SOLVE_EXIT=$?\n", "duration": _SOLVE_WAIT_S})
    done = json.dumps({"analysis": "solve.sh ran.", "plan": "Done.", "commands": [], "task_complete": True})
    return {"steps": [json.dumps({"analysis": "Start.", "plan": "Run the solution.", "commands": keys,
                                  "task_complete": False})],
            "final": done}


def mini_swe_agent_script(b64: str, workdir: str) -> dict[str, Any]:
    """mini-swe-agent tool calls: the same, then its submit command."""
    run = " && ".join(_unpack_commands(b64)) + f" && cd {workdir} && bash /solution/solve.sh"
    return {"steps": [{"name": "bash", "arguments": {"command": run}},
                      {"name": "bash", "arguments": {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}],
            "final": "Done."}


def _workdir(task: Path) -> str:
    workdir = "/"
    for line in (task / "environment" / "Dockerfile").read_text(encoding="utf-8", errors="replace").splitlines():
        words = line.split()
        if len(words) >= 2 and words[0].upper() == "WORKDIR":
            workdir = words[1] if words[1].startswith("/") else f"{workdir.rstrip('/')}/{words[1]}"
    return workdir


def build_times(task: Path, tag: str, timeout_s: float = 1800.0) -> dict[str, Any]:
    """Cold (``--no-cache``) and cached ``podman build`` of the task's image, seconds."""
    out: dict[str, Any] = {}
    for label, extra in (("cold_s", ["--no-cache"]), ("cached_s", [])):
        argv = ["nice", "podman", "build", "--network", "host", *extra, "-t", tag, "-f",
                str(task / "environment" / "Dockerfile"), str(task / "environment")]
        start = time.monotonic()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        out[label] = round(time.monotonic() - start, 1)
        if done.returncode != 0:
            out["error"] = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])[:400]
            break
    subprocess.run(["podman", "rmi", tag], capture_output=True)
    return out


def _summary_figures(summary: dict[str, Any], wall: float) -> dict[str, Any]:
    harbor = summary.get("harbor") or {}
    return {"wall_s": round(wall, 1), "agent_s": (summary.get("timings") or {}).get("agent_s"),
            "reward": summary.get("env_reward"), "reward_source": harbor.get("reward_source"),
            "capture_level": summary.get("capture_level"), "calls": summary.get("captured_calls"),
            "environment": harbor.get("environment"), "network": harbor.get("network"),
            "unscored_reason": summary.get("unscored_reason")}


def captured(task: Path, harness: str, script: Path, out: Path, budget: float) -> dict[str, Any]:
    """One capture of the task (its folder is index 0) with the local backend saying `script`."""
    from rollout_dataset.capture import capture_rollout
    from rollout_dataset.recipes.coding import CaptureConfig

    start = time.monotonic()
    result = capture_rollout(CaptureConfig(out_dir=out, harness=harness, tasks=str(task.parent), task_index=0,
                                           policy="script", script=script, timeout_s=budget, harbor_env="podman",
                                           max_tokens=_MAX_TOKENS, local_max_model_len=_CONTEXT))
    figures = _summary_figures(result.summary, time.monotonic() - start)
    trace = json.loads((out / "trace.json").read_text(encoding="utf-8")) if (out / "trace.json").exists() else {}
    figures["call_levels"] = sorted({c.get("capture_level") for c in trace.get("calls", []) if c.get("status") == 200})
    figures["ok"] = result.ok
    return figures


def harbor_alone(task: Path, harness: str, script: Path, trials: Path, budget: float) -> dict[str, Any]:
    """The same agent through Harbor with no proxy and no capture, straight at the local backend."""
    from rollout_dataset.backend.server import run_backend_in_thread
    from rollout_dataset.harbor.adapter import run_terminus
    from rollout_dataset.harbor.installed import INSTALLED_AGENTS, run_installed_agent
    from rollout_dataset.recipes.coding.harbor_tasks import terminus_agent_kwargs

    with run_backend_in_thread(policy="script", script=script, max_model_len=_CONTEXT) as backend:
        start = time.monotonic()
        if harness == "terminus-2":
            kwargs = terminus_agent_kwargs(temperature=1.0, max_tokens=_MAX_TOKENS, seed=0, context_tokens=_CONTEXT,
                                           max_turns=20)  # CaptureConfig's default
            run = run_terminus(task, trials, base_url=backend.base_url, model=backend.served_model_name,
                               api_key="EMPTY", timeout_s=budget, agent_kwargs=kwargs, environment="podman",
                               trial_name=f"rd-alone-{int(time.time())}")
        else:
            run = run_installed_agent(task, trials, agent=INSTALLED_AGENTS[harness.removeprefix("harbor:")],
                                      base_url=backend.base_url, model=backend.served_model_name, api_key="EMPTY",
                                      timeout_s=budget, trial_name=f"rd-alone-{int(time.time())}")
        wall = time.monotonic() - start
    return {"wall_s": round(wall, 1), "reward": run.reward, "exception": (run.exception or "")[:300] or None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", action="append", required=True, metavar="OWNER/NAME:PATH")
    parser.add_argument("--commit", action="append", default=[], metavar="OWNER/NAME=COMMIT",
                        help="the commit of a repository (default: its git copy's HEAD)")
    parser.add_argument("--installed", default=None, help="an installed agent run on the first task (mini-swe-agent)")
    parser.add_argument("--mirror-root", type=Path, default=Path("/work/.mirror"))
    parser.add_argument("--repo", action="append", default=[], metavar="OWNER/NAME=GITDIR")
    parser.add_argument("--agent-timeout", type=float, default=900.0)
    args = parser.parse_args()
    explicit = dict(item.split("=", 1) for item in args.repo)
    commits = dict(item.split("=", 1) for item in args.commit)
    rows: list[dict[str, Any]] = []
    storage = subprocess.run(["podman", "info", "--format", "{{.Store.GraphDriverName}}"], capture_output=True,
                             text=True).stdout.strip()
    doc: dict[str, Any] = {"machine": platform.platform(), "cpus": __import__("os").cpu_count(), "storage": storage,
                           "podman": subprocess.run(["podman", "--version"], capture_output=True, text=True).stdout.strip(),
                           "server": "embedded local backend, script policy (the task's solution/ unpacked and solve.sh run)",
                           "rows": rows}
    for index, spec in enumerate(args.task):
        repo, path = spec.split(":", 1)
        gitdir = Path(explicit.get(repo) or args.mirror_root / repo.replace("/", "+") / "repo")
        commit = commits.get(repo) or _git(gitdir, "rev-parse", "HEAD").stdout.decode().strip()
        row: dict[str, Any] = {"source": f"{repo}@{commit}", "path": path}
        rows.append(row)
        with tempfile.TemporaryDirectory(prefix="harbor-public-") as tmp:
            task = extract_task(gitdir, commit, path, Path(tmp))
            b64 = solution_b64(task)
            slug = "".join(ch if ch.isalnum() else "-" for ch in Path(path).name.lower())[:60].strip("-")
            row["build"] = build_times(task, f"localhost/rd-bench-rollouts/{slug}:t")
            print(f"{path}: build {row['build']}", flush=True)
            harnesses = ["terminus-2"] + ([f"harbor:{args.installed}"] if args.installed and index == 0 else [])
            for harness in harnesses:
                script = Path(tmp) / f"script-{harness.replace(':', '-')}.json"
                body = terminus_script(b64) if harness == "terminus-2" else mini_swe_agent_script(b64, _workdir(task))
                script.write_text(json.dumps(body), encoding="utf-8")
                alone = harbor_alone(task, harness, script, Path(tmp) / f"alone-{harness.replace(':', '-')}",
                                     args.agent_timeout)
                capture = captured(task, harness, script, Path(tmp) / f"out-{harness.replace(':', '-')}",
                                   args.agent_timeout)
                row[harness] = {"harbor_alone": alone, "captured": capture}
                print(f"{path} {harness}: alone {alone} | captured {capture}", flush=True)
                doc["updated"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
                RESULTS.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    RESULTS.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"saved {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
