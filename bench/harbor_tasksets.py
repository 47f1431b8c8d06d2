"""Benchmark: public Harbor task sets under Podman with the stand-in base images.

For task folders picked at random (fixed seed, the same number from each repository) out of public
Harbor-format task sets (task.toml + instruction.md + environment/Dockerfile + tests/test.sh), each
read from a git copy of the repository at a recorded commit, it measures:

  * whether the task's image builds (``podman build --network host`` of ``environment/``, on the
    stand-ins of ``make standin-images``), cold (first build of that task; layers other tasks share
    may be cached) and, for the first ``--cached-builds`` tasks, cached (the same build again);
  * where the task has ``solution/solve.sh``: Harbor's ``oracle`` agent under Harbor's own ``podman``
    environment (``harbor trials start --agent oracle --env podman``), its verifier's reward and the
    trial's wall time. A task asking for no network runs under this project's subclass of it
    (`rollout_dataset.harbor.proxied_podman`, no relay: the container's network is loopback only),
    since Harbor's own refuses it where its egress sidecar images cannot be pulled;
  * the hosts its build (files under ``environment/``) and its verifier (``tests/``) fetch from, so the
    share among tasks needing nothing beyond the registries this machine reaches is reported apart;
  * why each failure happened, in one line (`rollout_dataset.harbor.container_errors`).

Results are written after every task to bench/results/harbor_tasksets.json (a rerun with the same
seed skips the tasks already there), so a run stopped by its deadline still reports what it measured.

    nice .venv/bin/python bench/harbor_tasksets.py [--per-repo 13] [--seed 41] [--deadline 06:40] [--cached-builds 3]
        [--mirror-root /work/.mirror]   # git copies as ROOT/OWNER+NAME/repo (or --repo OWNER/NAME=GITDIR)
        [--only OWNER/NAME:PATH ...]    # measure these drawn tasks again (say, after a new stand-in), keep the rest
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from rollout_dataset.harbor.adapter import _package_path, find_harbor
from rollout_dataset.harbor.container_errors import describe_container_failure
from rollout_dataset.harbor.installed import PROXIED_PODMAN_SPEC
from rollout_dataset.harbor.standin_images import standin_for

RESULTS = Path(__file__).resolve().parent / "results" / "harbor_tasksets.json"
#: the task sets (repository, commit): public, Harbor format, with `FROM` lines the stand-ins cover
#: in part (t-bench ubuntu, python:3.1x-slim, ubuntu:24.04) and some they do not (eclipse-temurin, gcc)
SOURCES: tuple[tuple[str, str], ...] = (
    ("zjysteven/terminal-bench-env", "aaad6aeff9b58ab7504a7d239f01f8b11c7174ef"),
    ("purple29th/purple29th-tbench-2", "20b8213075732fabbc45b8cdfdcdd9da55a69b16"),
    ("mm-tbench/multimedia-terminal-bench", "c96adc0001378d8e1f71a073a823f5d80bbbb1d0"),
    ("wxj630/terminal-bench-math-modeling", "5ef1a4ad4f0a6c8a492b11d233b29d4931c4a880"),
    ("harbor-framework/harbor-cookbook", "e093c9a860b988d9d74901010ddddb9c7f124f92"),
)
_BUILD_TIMEOUT_CAP_S = 1200.0
_MIN_FREE_GB = 20.0


def _git(gitdir: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(gitdir), *args], check=True, capture_output=True,
                          text=True).stdout


def task_folders(gitdir: Path, commit: str) -> list[str]:
    """Every folder holding a task.toml at `commit`, sorted."""
    names = _git(gitdir, "ls-tree", "-r", "--name-only", commit).splitlines()
    return sorted(str(Path(n).parent) for n in names if Path(n).name == "task.toml")


def pick(sources: list[tuple[str, str, Path]], per_repo: int, seed: int) -> list[dict[str, str]]:
    """`per_repo` folders at random from each source, interleaved (so a partial run covers every repo)."""
    rng = random.Random(seed)
    chosen = []
    for repo, commit, gitdir in sources:
        folders = task_folders(gitdir, commit)
        chosen.append([{"repo": repo, "commit": commit, "path": p, "pool": str(len(folders))}
                       for p in rng.sample(folders, min(per_repo, len(folders)))])
    out = []
    for index in range(max(len(c) for c in chosen)):
        out += [c[index] for c in chosen if index < len(c)]
    return out


def _first_from(dockerfile: Path) -> str | None:
    try:
        text = dockerfile.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        words = line.split()
        if words and words[0].upper() == "FROM":
            rest = [w for w in words[1:] if not w.startswith("--")]
            return rest[0] if rest else None
    return None


def _run(argv: list[str], timeout_s: float, cwd: Path | None = None,
         python_path: str | None = None) -> tuple[int | None, str, float]:
    """argv in a process group of its own; killed (the group) past timeout. Returns (code, output, seconds)."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=cwd,
                                env={**os.environ, "HARBOR_TELEMETRY": "0", **({"PYTHONPATH": python_path} if python_path else {})})
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    return code, text, time.monotonic() - start


def _remove_project_containers(project: str) -> int:
    """Containers of one compose project (Harbor's trial) still present: removed. Returns how many."""
    ids = subprocess.run(["podman", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"],
                         capture_output=True, text=True).stdout.split()
    if ids:
        subprocess.run(["podman", "rm", "-f", *ids], capture_output=True)
    return len(ids)


def _free_gb(path: str = "/var/lib/containers") -> float:
    return shutil.disk_usage(path if os.path.exists(path) else "/").free / 1e9


def run_task(entry: dict[str, str], gitdir: Path, work: Path, harbor: str, measure_cached: bool) -> dict[str, Any]:
    """Build one task's image (cold, and cached when asked) and run Harbor's oracle on it."""
    record: dict[str, Any] = dict(entry)
    slug = re.sub(r"[^a-z0-9]+", "-", f"{entry['repo']}-{entry['path']}".lower()).strip("-")[-100:]
    dest = work / slug
    archive = subprocess.run(["git", "--git-dir", str(gitdir), "archive", entry["commit"], entry["path"]],
                             capture_output=True)
    if archive.returncode != 0:  # a git copy may lack a repository's largest blobs
        return {**record, "error": f"the git copy lacks files of this task: {archive.stderr.decode(errors='replace')[-200:]}"}
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    task = dest / entry["path"]
    missing = [n for n in ("instruction.md", "environment/Dockerfile", "tests/test.sh") if not (task / n).exists()]
    image = _first_from(task / "environment" / "Dockerfile")
    record["verifier_hosts"] = verifier_hosts(gitdir, entry["commit"], entry["path"])
    record["build_hosts"] = build_hosts(gitdir, entry["commit"], entry["path"])
    record.update(missing=missing, from_image=image, standin=standin_for(image) if image else None,
                  has_solution=(task / "solution" / "solve.sh").is_file())
    try:
        config = tomllib.loads((task / "task.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        config = {}
        record["toml_error"] = str(exc)[:200]
    environment = config.get("environment") or {}
    record["docker_image"] = environment.get("docker_image")
    record["no_network"] = environment.get("network_mode") == "no-network" or environment.get("allow_internet") is False
    if "environment/Dockerfile" in missing:
        record["build"] = {"ok": False, "reason": "no environment/Dockerfile"}
        return record
    timeout = min(float(environment.get("build_timeout_sec") or 600.0), _BUILD_TIMEOUT_CAP_S)
    tag = f"localhost/rd-bench/{slug[-60:].strip('-')}:t"  # a reference component cannot start with '-'
    build_argv = ["nice", "podman", "build", "--network", "host", "-t", tag, "-f",
                  str(task / "environment" / "Dockerfile"), str(task / "environment")]
    code, output, cold = _run(build_argv, timeout)
    build: dict[str, Any] = {"ok": code == 0, "cold_s": round(cold, 1), "timeout_s": timeout}
    if code != 0:
        build["reason"] = ("timed out" if code is None else
                           describe_container_failure(output) or f"exit {code}: {output.strip().splitlines()[-1:]}")
    elif measure_cached:
        code2, _, cached = _run(build_argv, timeout)
        build["cached_s"] = round(cached, 1) if code2 == 0 else None
    record["build"] = build  # the image stays (its layers cache the next tasks' identical steps; a removal
    # holds the storage lock, for minutes on vfs storage): pruned only when the disk runs low
    if not build["ok"] or not record["has_solution"] or "tests/test.sh" in missing:
        return record
    trials = dest / "trials"
    verifier = float((config.get("verifier") or {}).get("timeout_sec") or 600.0)
    agent = float((config.get("agent") or {}).get("timeout_sec") or 600.0)
    limit = timeout + verifier + agent + 300.0
    env_arg = PROXIED_PODMAN_SPEC if record["no_network"] else "podman"
    code, output, wall = _run(["nice", harbor, "trials", "start", "-p", str(task), "--agent", "oracle", "--env", env_arg,
                               "--trials-dir", str(trials), "--trial-name", "oracle"], limit, cwd=dest,
                              python_path=_package_path(dest / "pkg"))
    result: dict[str, Any] = {}
    try:
        result = json.loads((trials / "oracle" / "result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    rewards = (result.get("verifier_result") or {}).get("rewards") or {}
    failure = result.get("exception_info") or {}
    message = f"{failure.get('exception_type')}: {failure.get('exception_message')}" if failure else ""
    oracle: dict[str, Any] = {"exit": code, "wall_s": round(wall, 1), "reward": rewards.get("reward"),
                              "env": "proxied-podman (network none)" if record["no_network"] else "podman"}
    if failure or code != 0 or rewards.get("reward") is None:
        oracle["reason"] = (describe_container_failure(message + "\n" + output) or
                            (message[:300] if message else f"exit {code}: {output.strip().splitlines()[-1:]}"))
    oracle["left_containers"] = _remove_project_containers("oracle__env") if code is None else 0
    record["oracle"] = oracle
    return record


#: hosts a build or verifier may fetch from here (the package registries this machine reaches, and loopback)
_REACHABLE_HOSTS = ("pypi.org", "files.pythonhosted.org", "deb.debian.org", "registry.npmjs.org",
                    "localhost", "127.0.0.1", "0.0.0.0")


def unreachable_needs(record: dict[str, Any]) -> list[str]:
    """What a task's build or verifier fetches that this machine cannot reach (hosts, ``registry:IMAGE``)."""
    return sorted({h for h in [*record.get("build_hosts", []), *record.get("verifier_hosts", [])]
                   if h not in _REACHABLE_HOSTS})


def failure_cause(record: dict[str, Any]) -> str | None:
    """One named cause for a task that did not build or whose oracle did not score 1.0 (None: it did)."""
    build, oracle = record.get("build") or {}, record.get("oracle") or {}
    if "error" in record:
        return "the git snapshot here lacks the task's files"
    if not build.get("ok"):
        reason = str(build.get("reason") or "")
        if "cannot be pulled" in reason or any(h.startswith("registry:") for h in record.get("build_hosts", [])):
            return "base image from an unreachable registry (no stand-in)"
        if "huggingface.co" in record.get("build_hosts", []) and ("fetch_media" in reason or "huggingface" in reason):
            return "a build step downloads from the Hugging Face Hub"
        if "Name or service not known" in reason or "Could not resolve host" in reason:
            return "a build step downloads from a host this machine cannot resolve"
        if reason == "timed out":
            return "build exceeded the task's build_timeout_sec"
        hosts = [h for h in unreachable_needs(record) if h in record.get("build_hosts", [])]
        return f"a build step fetches from {', '.join(hosts)}" if hosts else f"a build step failed: {reason[:120]}"
    if "oracle" not in record:
        if not record.get("has_solution"):
            return None  # nothing to run: counted apart (no solution/solve.sh)
        return "no tests/test.sh (Harbor refuses the task)"
    if oracle.get("reward") in (1, 1.0):
        return None
    credential = re.search(r"Environment variable '(\w+)' not found", str(oracle.get("reason") or ""))
    if oracle.get("reward") is None and credential:
        return f"the task needs a cloud environment's credentials ({credential.group(1)})"
    verifier = [h for h in record.get("verifier_hosts", []) if h not in _REACHABLE_HOSTS]
    if "astral.sh" in verifier:
        return "the verifier curls astral.sh for uv (unreachable here)"
    if verifier:
        return f"the verifier fetches from {', '.join(verifier)} (unreachable here)"
    reason = str(oracle.get("reason") or "")
    if "no-network" in reason or "disable_internet" in reason or "egress" in reason:
        return "Harbor refuses no-network under Podman (its egress sidecar images cannot be pulled)"
    return f"oracle reward {oracle.get('reward')}: {reason[:120]}" if reason else f"oracle reward {oracle.get('reward')}"


_URL_HOST = re.compile(r"https?://([A-Za-z0-9.-]+)")
#: calls that download from the Hugging Face Hub without naming its URL
_HUB_CALL = re.compile(r"hf_hub_download|snapshot_download|huggingface-cli download|hf download|load_dataset\(")


def build_hosts(gitdir: Path, commit: str, path: str) -> list[str]:
    """Hosts the task's build fetches from: ``http(s)://HOST`` in any file under ``environment/``, the Hub
    (``huggingface.co``) for its download calls, and the registry of a ``FROM`` image no stand-in covers
    (``registry:IMAGE``), sorted."""
    listed = subprocess.run(["git", "--git-dir", str(gitdir), "ls-tree", "-r", "--name-only", commit, f"{path}/environment/"],
                            capture_output=True, text=True).stdout.split()
    hosts: set[str] = set()
    for name in listed:
        shown = subprocess.run(["git", "--git-dir", str(gitdir), "cat-file", "-p", f"{commit}:{name}"], capture_output=True)
        if shown.returncode != 0 or len(shown.stdout) > 2_000_000 or b"\0" in shown.stdout[:8000]:
            continue
        text = shown.stdout.decode("utf-8", "replace")
        hosts.update(_URL_HOST.findall(text))
        if _HUB_CALL.search(text):
            hosts.add("huggingface.co")
        if name.endswith("Dockerfile"):
            for line in text.splitlines():
                words = line.split()
                if words and words[0].upper() == "FROM":
                    rest = [w for w in words[1:] if not w.startswith("--")]
                    if rest and standin_for(rest[0]) is None and rest[0].lower() != "scratch" and \
                            not any(rest[0] == w for w in _stage_names(text)):
                        hosts.add(f"registry:{rest[0]}")
    return sorted(hosts)


def _stage_names(dockerfile: str) -> list[str]:
    return re.findall(r"(?im)^\s*FROM\s+\S+\s+AS\s+(\S+)", dockerfile)


def verifier_hosts(gitdir: Path, commit: str, path: str) -> list[str]:
    """Hosts a task's tests/test.sh fetches from (``http(s)://HOST`` in it), sorted."""
    shown = subprocess.run(["git", "--git-dir", str(gitdir), "show", f"{commit}:{path}/tests/test.sh"],
                           capture_output=True, text=True)
    return sorted(set(_URL_HOST.findall(shown.stdout))) if shown.returncode == 0 else []


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Shares and medians over the records measured so far (a task the snapshot here lacks files of is
    counted apart, not as a failure)."""
    incomplete = [r for r in records if "error" in r]
    records = [r for r in records if "error" not in r]
    built = [r for r in records if (r.get("build") or {}).get("ok")]
    ran = [r for r in records if "oracle" in r]
    solved = [r for r in ran if r["oracle"].get("reward") == 1.0 or r["oracle"].get("reward") == 1]
    eligible = [r for r in built if r.get("has_solution") and "tests/test.sh" not in r.get("missing", [])]

    def median(values: list[float]) -> float | None:
        return round(statistics.median(values), 1) if values else None

    by_repo: dict[str, dict[str, int]] = {}
    for r in records:
        row = by_repo.setdefault(r["repo"], {"measured": 0, "built": 0, "with_solution": 0, "oracle_1.0": 0})
        # with_solution: built, with solution/solve.sh and tests/test.sh (what Harbor's oracle can run)
        row["measured"] += 1
        row["built"] += bool((r.get("build") or {}).get("ok"))
        row["with_solution"] += r in eligible
        row["oracle_1.0"] += r in solved
    unreachable = [r for r in ran if r not in solved and
                   any(h not in _REACHABLE_HOSTS for h in r.get("verifier_hosts", []))]
    causes: dict[str, int] = {}
    for r in [*records, *incomplete]:
        cause = failure_cause(r)
        if cause:
            causes[cause] = causes.get(cause, 0) + 1
    # the same shares among tasks whose build and verifier fetch from nothing beyond the reachable registries
    local = [r for r in records if not unreachable_needs(r)]
    local_built = [r for r in local if r in built]
    local_eligible = [r for r in local if r in eligible]
    local_solved = [r for r in local if r in solved]
    return {"measured": len(records), "snapshot_incomplete": len(incomplete), "built": len(built),
            "oracle_below_1_with_a_verifier_fetching_from_an_unreachable_host": len(unreachable),
            "build_share": round(len(built) / len(records), 3) if records else None,
            "built_with_solution_and_tests": len(eligible), "oracle_ran": len(ran), "oracle_1.0": len(solved),
            "oracle_share_of_built_with_solution_and_tests": round(len(solved) / len(eligible), 3) if eligible else None,
            "build_cold_median_s": median([r["build"]["cold_s"] for r in built]),
            "build_cached_median_s": median([r["build"]["cached_s"] for r in built if r["build"].get("cached_s") is not None]),
            "oracle_wall_median_s": median([r["oracle"]["wall_s"] for r in ran]),
            "failures_by_cause": dict(sorted(causes.items(), key=lambda kv: -kv[1])),
            "needing_only_reachable_registries": {
                "measured": len(local), "built": len(local_built),
                "build_share": round(len(local_built) / len(local), 3) if local else None,
                "built_with_solution_and_tests": len(local_eligible), "oracle_1.0": len(local_solved),
                "oracle_share": round(len(local_solved) / len(local_eligible), 3) if local_eligible else None},
            "by_repo": by_repo}


def _write(doc: dict[str, Any]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, RESULTS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-repo", type=int, default=13)
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--deadline", help="UTC HH:MM after which no new task starts")
    parser.add_argument("--cached-builds", type=int, default=3, help="how many tasks' builds are repeated (cached)")
    parser.add_argument("--mirror-root", type=Path, default=Path("/work/.mirror"))
    parser.add_argument("--repo", action="append", default=[], metavar="OWNER/NAME=GITDIR")
    parser.add_argument("--last", action="append", default=[], metavar="OWNER/NAME",
                        help="measure this repository's drawn folders after the others' (the draw is unchanged; "
                             "for a set whose builds wait out their budget, so a deadline cuts those)")
    parser.add_argument("--only", action="append", default=[], metavar="OWNER/NAME:PATH",
                        help="measure again only this drawn task (repeatable); its saved entry is replaced, the others kept")
    parser.add_argument("--summarise-only", action="store_true", help="recompute the summary of the saved results")
    args = parser.parse_args()
    if args.summarise_only:
        saved: dict[str, Any] = json.loads(RESULTS.read_text(encoding="utf-8"))
        for record in saved.get("tasks", []):
            gitdir = Path(dict(item.split("=", 1) for item in args.repo).get(record["repo"]) or
                          args.mirror_root / record["repo"].replace("/", "+") / "repo")
            record["verifier_hosts"] = verifier_hosts(gitdir, record["commit"], record["path"])
            record["build_hosts"] = build_hosts(gitdir, record["commit"], record["path"])
        saved["summary"] = summarise(saved.get("tasks", []))
        _write(saved)
        print(json.dumps(saved["summary"], indent=1))
        return 0
    harbor = find_harbor()
    if harbor is None or shutil.which("podman") is None:
        print("harbor_tasksets: needs Harbor (make harbor) and Podman (make containers standin-images)", file=sys.stderr)
        return 1
    explicit = dict(item.split("=", 1) for item in args.repo)
    sources = []
    for repo, commit in SOURCES:
        gitdir = Path(explicit.get(repo) or args.mirror_root / repo.replace("/", "+") / "repo")
        if not gitdir.exists():
            print(f"harbor_tasksets: no git copy of {repo} at {gitdir} (give --repo {repo}=GITDIR)", file=sys.stderr)
            return 2
        sources.append((repo, commit, gitdir))
    chosen = pick(sources, args.per_repo, args.seed)
    chosen = [e for e in chosen if e["repo"] not in args.last] + [e for e in chosen if e["repo"] in args.last]
    drawn = {f"{e['repo']}:{e['path']}" for e in chosen}
    unknown = [name for name in args.only if name not in drawn]
    if unknown:
        print(f"harbor_tasksets: --only {unknown[0]}: not among the drawn tasks (OWNER/NAME:PATH, seed {args.seed})",
              file=sys.stderr)
        return 2
    deadline = None
    if args.deadline:
        hh, mm = (int(x) for x in args.deadline.split(":"))
        now = dt.datetime.now(dt.timezone.utc)
        deadline = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    storage = subprocess.run(["podman", "info", "--format", "{{.Store.GraphDriverName}}"], capture_output=True,
                             text=True).stdout.strip()
    previous: list[dict[str, Any]] = []
    if RESULTS.exists():
        old = json.loads(RESULTS.read_text(encoding="utf-8"))
        if old.get("seed") == args.seed and old.get("per_repo") == args.per_repo and old.get("storage") == storage:
            previous = old.get("tasks", [])
    if args.only:  # measured again: their saved entries go, every other one is kept and skipped
        previous = [r for r in previous if f"{r['repo']}:{r['path']}" not in args.only]
        done = {(e["repo"], e["path"]) for e in chosen if f"{e['repo']}:{e['path']}" not in args.only}
    else:
        done = {(r["repo"], r["path"]) for r in previous}
    records = list(previous)
    gitdirs = {repo: gitdir for repo, _, gitdir in sources}
    doc: dict[str, Any] = {"seed": args.seed, "per_repo": args.per_repo,
                           "sources": [f"{repo}@{commit}" for repo, commit in SOURCES],
                           "sampled": len(chosen), "host": {"cpus": os.cpu_count()}, "storage": storage,
                           "podman": subprocess.run(["podman", "--version"], capture_output=True, text=True).stdout.strip()}
    with tempfile.TemporaryDirectory(prefix="harbor-tasksets-") as tmp:
        for entry in chosen:
            if (entry["repo"], entry["path"]) in done:
                continue
            if deadline and dt.datetime.now(dt.timezone.utc) >= deadline:
                print("deadline reached: stopping", flush=True)
                break
            if _free_gb() < _MIN_FREE_GB:
                subprocess.run(["sh", "-c", "podman rmi -f $(podman images -q --filter reference='localhost/rd-bench/*')"],
                               capture_output=True)
                subprocess.run(["podman", "image", "prune", "-f"], capture_output=True)
            start = time.monotonic()
            try:
                cached_so_far = sum(1 for r in records if (r.get("build") or {}).get("cached_s") is not None)
                record = run_task(entry, gitdirs[entry["repo"]], Path(tmp), harbor, cached_so_far < args.cached_builds)
            except (subprocess.CalledProcessError, OSError) as exc:
                record = {**entry, "error": str(exc)[:300]}
            record["total_s"] = round(time.monotonic() - start, 1)
            records.append(record)
            doc.update(tasks=records, summary=summarise(records),
                       updated=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
            _write(doc)
            b, o = record.get("build") or {}, record.get("oracle") or {}
            print(f"[{len(records)}/{len(chosen)}] {entry['repo']}:{entry['path']} build={b.get('ok')} "
                  f"({b.get('cold_s')} s) oracle={o.get('reward')} {b.get('reason') or o.get('reason') or ''}"[:400],
                  flush=True)
            shutil.rmtree(Path(tmp), ignore_errors=True)
            Path(tmp).mkdir(exist_ok=True)
    doc.update(tasks=records, summary=summarise(records))
    _write(doc)
    print(json.dumps(doc["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
