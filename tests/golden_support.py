"""Golden artifacts: the captures whose artifacts must not change, and how run-to-run noise is masked.

Used by `tests/test_golden_artifacts.py` (regenerate, mask, compare with the fixtures) and by
`tests/data/golden/regenerate.py` (write the fixtures). Both go through the public surfaces only:
the CLI (`rollout_dataset.cli.main`, i.e. `rollout-dataset capture|batch ...`), so a refactor of
what lies behind them is checked against what today's code wrote.

Masking (`mask_run`): every value that legitimately differs between two runs with the same seeds
is replaced by a stable placeholder ``MASKED-<kind>`` (ids: ``MASKED-<kind>-<n>``, numbered in
order of first appearance, so "this tool_call_id is that tool call's id" still compares). The rules
below were found by generating twice and diffing (plus the git sha and the HTTP client's version,
which differ between branches and venvs); nothing else is masked, so token ids, logprobs, masks,
rewards, findings, stop reasons, counts and file lists compare exactly. A JSON file is
parsed, masked and written back in the layout it was written in (indent, ensure_ascii, trailing
newline: detected, and the unmasked text must round-trip exactly), so the masked text still pins
the writer's byte layout and key order.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout_dataset.cli import main as cli_main

GOLDEN_DIR = Path(__file__).parent / "data" / "golden"
PLACEHOLDER = "MASKED-"

# ---------------------------------------------------------------------------------------------
# What is masked, and why. Each rule was seen to differ between two runs with the same seeds,
# except git_sha and user-agent (branch / venv) and ttft_ms, tokenize_ms, harness_session_id:
# null or absent in these captures, masked only when they hold a value (a null that becomes a
# value still fails the comparison).
# ---------------------------------------------------------------------------------------------

# Keys whose string value is a fresh random id (uuid4 hex, chatcmpl-<hex>, ...). The value is
# replaced wherever it occurs in the run (any string, any text file, any file or folder name),
# with one numbered placeholder per distinct value.
ID_KEYS: dict[str, str] = {
    "rollout_id": "rollout_id",  # uuid4 per rollout (summary, rollout metadata, batch records, folder names)
    "session_id": "rollout_id",  # rollout.json: the proxy session is named after the rollout id
    "session": "rollout_id",  # trace.json: the same session name (only when it looks random; crafter's is "crafter")
    "call_id": "call_id",  # the proxy's uuid4 per recorded call
    "batch_id": "batch_id",  # batch.json: uuid4 per batch
    "harness_session_id": "harness_session_id",  # an external harness's own session id (null for the built-in one)
    "id": "response_id",  # the server's chatcmpl-<random hex> / chatcmpl-tool-<random hex> ids
    "tool_call_id": "response_id",  # a tool message pointing at such a tool-call id
}
# Only values of this shape are ids (a key named "id" also holds e.g. a task id, which is kept).
RANDOM_ID_RE = re.compile(r"^(?:chatcmpl-tool-|chatcmpl-|resp_|fc_|msg_|rs_|call_|ses_)?[0-9a-f]{16,32}$")

# Keys whose value is wall-clock time or a duration measured on this machine.
TIME_KEYS: dict[str, str] = {
    "started_at": "time",  # trace.json: epoch seconds the call started
    "ended_at": "time",  # trace.json: epoch seconds it ended
    "latency_ms": "duration",  # trace.json: measured latency
    "ttft_ms": "duration",  # trace.json: time to first token (streaming calls)
    "tokenize_ms": "duration",  # trace.json continuity: time of the on-policy /tokenize calls
    "created": "time",  # the server's response "created" (epoch seconds)
    "created_at": "timestamp",  # summary.json / batch documents: ISO time of writing
    "finished_at": "timestamp",  # batch_result.json
    "timestamp": "timestamp",  # runs/*.jsonl records
}
# Every number inside these objects is a measured duration (coding: setup_s, agent_s, ...;
# crafter: setup, agent, teardown, ...); the keys themselves are compared.
DURATION_OBJECTS = {"timings"}

# Digests over records that hold masked fields (call ids, times): they change whenever those do.
DIGEST_KEYS = {"prev_sha256": "digest", "head_sha256": "digest"}

# HTTP headers that name the client library and its version (python-httpx/0.28.1, Python-urllib/3.x):
# they change when the venv's httpx or Python changes, not with this project's code.
HEADER_KEYS = {"user-agent": "user-agent"}

# The git commit of the package that wrote the artifact: differs on every branch and commit, and
# is null outside a git checkout (a `git archive` copy, an installed wheel). JSON: always masked,
# null or not. Text: report.md (", git <12 chars>") and the card (" (<12 chars>)") print it only
# when known, so those two forms are removed: the masked text reads as written outside a checkout.
GIT_SHA_KEY = "git_sha"
GIT_SHA_TEXT_FORMS = (", git {short}", " ({short})")

# In any string or text file: the loopback ports of the local backend and the proxy (port 0).
LOOPBACK_PORT_RE = re.compile(r"(?P<host>(?:127\.0\.0\.1|localhost|\[::1\])):\d+")
# In text files only: ISO times of writing (report.md "Generated:").
ISO_TIME_RE = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z\b")
# The dataset card's YAML sizes: download_size (parquet bytes) depends on how the random ids
# compress; num_bytes / dataset_size (Arrow bytes) on the length of JSON text columns that hold
# measured times (summary timings, trace latencies). num_examples is kept.
CARD_SIZE_RE = re.compile(r"(?m)^(?P<lead>\s*(?:download_size|dataset_size|num_bytes): )\d+$")
# Parquet shard names: <UTC time>-<uuid4 hex>.parquet.
SHARD_NAME_RE = re.compile(r"\b\d{8}T\d{6,12}Z-[0-9a-f]{32}\b")

# Files compared by name only: parquet shards (binary; their schema and row counts are in the card,
# which is compared), plots (PNG bytes depend on the matplotlib/freetype version) and the dataset's
# copy of the shipped tokenizer (written by transformers, not by this project's capture code).
NAME_ONLY_SUFFIXES = (".png", ".parquet")
NAME_ONLY_PREFIXES = ("dataset/tokenizer/",)


# ---------------------------------------------------------------------------------------------
# The captures
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoldenCapture:
    """One golden capture: how to produce it and where its fixture lives.

    Args:
        name: the fixture folder under `GOLDEN_DIR`.
        argv: the `rollout-dataset` arguments; ``{out}`` is replaced by the output folder.
        description: what it covers.
    """

    name: str
    argv: tuple[str, ...]
    description: str

    def produce(self, out: Path) -> None:
        """Run the capture into `out` (must not exist yet) through the CLI.

        Raises:
            AssertionError: the command exited non-zero.
        """
        argv = [arg.replace("{out}", str(out)) for arg in self.argv]
        saved = os.environ.pop("PUSH_TO_DATASET", None)  # never push, whatever the caller's shell holds
        saved_argv = sys.argv
        # as the console script sees it: `batch` records sys.argv in summary/config_snapshot.json
        sys.argv = ["rollout-dataset", *argv]
        try:
            code = cli_main(argv)
        finally:
            sys.argv = saved_argv
            if saved is not None:
                os.environ["PUSH_TO_DATASET"] = saved
        assert code == 0, f"rollout-dataset {' '.join(argv)} exited {code}"

    @property
    def fixture_dir(self) -> Path:
        """The folder of masked fixture files."""
        return GOLDEN_DIR / self.name

    @property
    def listing_file(self) -> Path:
        """Every file the capture writes (masked relative paths), one per line."""
        return GOLDEN_DIR / f"{self.name}.files.txt"


# An external `cmd:` harness in one line of Python: one chat call to the proxy (the dummy key, the
# statement as the user message), then a wrong solution.py. Deterministic with the `echo` policy.
CMD_HARNESS = (
    "cmd:python3 -c 'import json, os, sys, urllib.request as u; "
    "body = {\"model\": \"local\", \"max_tokens\": 16, \"seed\": 0, "
    "\"messages\": [{\"role\": \"user\", \"content\": open(sys.argv[1]).read()}]}; "
    "req = u.Request(os.environ[\"OPENAI_BASE_URL\"] + \"/chat/completions\", json.dumps(body).encode(), "
    "{\"Content-Type\": \"application/json\", \"Authorization\": \"Bearer \" + os.environ[\"OPENAI_API_KEY\"]}); "
    "json.load(u.urlopen(req)); open(\"solution.py\", \"w\").write(\"print(0)\")' {task_file}"
)

CAPTURES: dict[str, GoldenCapture] = {
    c.name: c
    for c in [
        GoldenCapture(
            "coding_oracle",
            ("capture", "--task-index", "5", "--seed", "0", "--out-dir", "{out}", "--no-push"),
            "coding, local backend, oracle policy, built-in harness; task 5 of seed 0 (max-subarray-sum): "
            "a wrong attempt the verifier scores 3 of 6 (3 calls)",
        ),
        GoldenCapture(
            "coding_cmd_harness",
            ("capture", "--harness", CMD_HARNESS, "--policy", "echo", "--task-index", "2", "--seed", "0",
             "--out-dir", "{out}", "--no-push"),
            "coding, local backend, echo policy, an external cmd: harness (one urllib chat call through the "
            "sandbox), task 2 of seed 0: the never_ran_code penalty, stop harness_exit",
        ),
        GoldenCapture(
            "crafter_scripted",
            ("capture", "--env", "crafter", "--seed", "0", "--max-steps", "12", "--out-dir", "{out}", "--no-push"),
            "Crafter, local backend, its scripted player, world seed 0, 12 game steps (two model calls)",
        ),
        GoldenCapture(
            "batch_smoke",
            ("batch", "--smoke", "--no-progress", "--out", "{out}"),
            "`batch --smoke`: coding, local backend, oracle, seeds 0 and 1 x 1 rollout, dataset built",
        ),
    ]
}


# ---------------------------------------------------------------------------------------------
# Masking
# ---------------------------------------------------------------------------------------------


@dataclass
class _Masker:
    """The placeholders of one run: the same value gets the same placeholder in every file."""

    out_root: str
    ids: dict[str, str] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    git_shorts: set[str] = field(default_factory=set)

    def register(self, value: str, kind: str) -> str:
        if value not in self.ids:
            self.counters[kind] = self.counters.get(kind, 0) + 1
            self.ids[value] = f"{PLACEHOLDER}{kind}-{self.counters[kind]}"
        return self.ids[value]

    # -- JSON ---------------------------------------------------------------------------------

    def collect(self, node: Any, key: str | None = None) -> None:
        """First pass: register every random id and git sha, in document order."""
        if isinstance(node, dict):
            for k, v in node.items():
                if isinstance(v, str):
                    if k in ID_KEYS and (k == "harness_session_id" or RANDOM_ID_RE.match(v)):
                        self.register(v, ID_KEYS[k])
                    elif k == GIT_SHA_KEY:
                        self.register(v, "git_sha")  # in case a text quotes it whole
                        self.git_shorts.add(v[:12])
                else:
                    self.collect(v, k)
        elif isinstance(node, list):
            for item in node:
                self.collect(item, key)

    def mask_json(self, node: Any, key: str | None = None, in_durations: bool = False) -> Any:
        """Second pass: a copy of `node` with every rule applied."""
        if isinstance(node, dict):
            return {k: self._mask_member(k, v, in_durations or key in DURATION_OBJECTS) for k, v in node.items()}
        if isinstance(node, list):
            return [self.mask_json(item, key, in_durations) for item in node]
        if isinstance(node, str):
            return self.mask_text(node)
        return node

    def _mask_member(self, key: str, value: Any, in_durations: bool) -> Any:
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if key in TIME_KEYS and value is not None and (is_number or isinstance(value, str)):
            return f"{PLACEHOLDER}{TIME_KEYS[key]}"
        if key in DIGEST_KEYS and isinstance(value, str):
            return f"{PLACEHOLDER}{DIGEST_KEYS[key]}"
        if key == GIT_SHA_KEY:  # a string in a git checkout, null outside one
            return f"{PLACEHOLDER}git_sha"
        if key in HEADER_KEYS and isinstance(value, str):
            return f"{PLACEHOLDER}{HEADER_KEYS[key]}"
        if in_durations and is_number:
            return f"{PLACEHOLDER}duration"
        return self.mask_json(value, key, in_durations)

    # -- text ---------------------------------------------------------------------------------

    def mask_text(self, text: str) -> str:
        """Registered ids and git shas, the output folder and loopback ports, inside any string."""
        if self.out_root in text:
            text = text.replace(self.out_root, f"{PLACEHOLDER}out")
        for short in self.git_shorts:
            for form in GIT_SHA_TEXT_FORMS:
                text = text.replace(form.format(short=short), "")
        for value in sorted(self.ids, key=len, reverse=True):  # a full sha before its 12-char prefix
            if value in text:
                text = text.replace(value, self.ids[value])
        return LOOPBACK_PORT_RE.sub(rf"\g<host>:{PLACEHOLDER}port", text)

    def mask_document_text(self, text: str) -> str:
        """A non-JSON file (samples.md, report.md, the card): `mask_text` plus times and card sizes."""
        text = self.mask_text(text)
        text = ISO_TIME_RE.sub(f"{PLACEHOLDER}timestamp", text)
        return CARD_SIZE_RE.sub(rf"\g<lead>{PLACEHOLDER}size", text)

    def mask_path(self, rel: str) -> str:
        """A relative file path: rollout ids in folder/file names, parquet shard names."""
        return SHARD_NAME_RE.sub(f"{PLACEHOLDER}shard", self.mask_text(rel))


# The JSON layouts the project's writers use; a JSON file must round-trip through one of them.
_JSON_LAYOUTS = [
    {"indent": indent, "ensure_ascii": ascii_only}
    for indent in (1, 2, None, 4)
    for ascii_only in (False, True)
]


class LayoutError(ValueError):
    """A JSON file that no known layout reproduces byte for byte."""


def _json_layout(raw: str, rel: str) -> tuple[Any, dict[str, Any], str]:
    """Parse `raw` and find the json.dumps arguments (and trailing text) that reproduce it exactly.

    Raises:
        LayoutError: no layout of `_JSON_LAYOUTS` reproduces the file.
    """
    tree = json.loads(raw)
    for layout in _JSON_LAYOUTS:
        text = json.dumps(tree, **layout)
        if raw.startswith(text) and raw[len(text):] in ("", "\n"):
            return tree, layout, raw[len(text):]
    raise LayoutError(f"{rel}: not written in a JSON layout the golden test knows ({_JSON_LAYOUTS})")


def _is_json(rel: str) -> bool:
    return rel.endswith(".json")


def _is_jsonl(rel: str) -> bool:
    return rel.endswith(".jsonl")


def _name_only(rel: str) -> bool:
    return rel.endswith(NAME_ONLY_SUFFIXES) or rel.startswith(NAME_ONLY_PREFIXES)


def _files(root: Path) -> Iterator[str]:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            yield path.relative_to(root).as_posix()


def _preregister_rollouts(masker: _Masker, root: Path) -> None:
    """Batch rollouts get their placeholders in (seed, rollout_idx) order, not random folder order."""
    keyed = []
    for result in root.glob("rollouts/*/batch_result.json"):
        doc = json.loads(result.read_text(encoding="utf-8"))
        keyed.append(((doc["seed"], doc["rollout_idx"]), doc["rollout_id"]))
    for _, rollout_id in sorted(keyed):
        masker.register(rollout_id, "rollout_id")


def mask_run(root: Path) -> tuple[dict[str, str], list[str]]:
    """Mask one capture's output folder.

    Args:
        root: the folder the capture wrote (artifact folder or batch folder).

    Returns:
        (compared, names): masked relative path -> masked text for every file compared by content,
        and the sorted masked relative paths of every file written (compared or name-only).

    Raises:
        LayoutError: a JSON file in an unknown layout.
    """
    masker = _Masker(out_root=str(root))
    _preregister_rollouts(masker, root)
    # visit files in masked-path order: batch rollout folders are named by random ids, and ids are
    # numbered in order of first appearance
    rels = sorted(_files(root), key=masker.mask_path)
    parsed: dict[str, Any] = {}
    # first pass over every file (sorted path order) registers the ids, so numbering is stable
    for rel in rels:
        if _name_only(rel):
            continue
        raw = (root / rel).read_text(encoding="utf-8")
        if _is_json(rel):
            parsed[rel] = _json_layout(raw, rel)
            masker.collect(parsed[rel][0])
        elif _is_jsonl(rel):
            lines = [_json_layout(line, rel) for line in raw.splitlines(keepends=True)]
            parsed[rel] = lines
            for tree, _, _ in lines:
                masker.collect(tree)
    compared: dict[str, str] = {}
    for rel in rels:
        if _name_only(rel):
            continue
        if _is_json(rel):
            tree, layout, tail = parsed[rel]
            text = json.dumps(masker.mask_json(tree), **layout) + tail
        elif _is_jsonl(rel):
            text = "".join(json.dumps(masker.mask_json(tree), **layout) + tail for tree, layout, tail in parsed[rel])
        else:
            text = masker.mask_document_text((root / rel).read_text(encoding="utf-8"))
        compared[masker.mask_path(rel)] = text
    names = sorted(masker.mask_path(rel) for rel in rels)
    return compared, names


# ---------------------------------------------------------------------------------------------
# Fixtures and comparison
# ---------------------------------------------------------------------------------------------


def write_fixture(capture: GoldenCapture, produced: Path) -> None:
    """Replace `capture`'s fixture with the masked output in `produced`.

    Args:
        capture: which fixture to write.
        produced: the folder the capture wrote.

    Raises:
        LayoutError: a JSON file in an unknown layout.
    """
    compared, names = mask_run(produced)
    if capture.fixture_dir.exists():
        shutil.rmtree(capture.fixture_dir)
    for rel, text in compared.items():
        path = capture.fixture_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    capture.listing_file.write_text("".join(f"{name}\n" for name in names), encoding="utf-8")


def read_fixture(capture: GoldenCapture) -> tuple[dict[str, str], list[str]]:
    """The fixture of `capture`, in the shape `mask_run` returns."""
    compared = {rel: (capture.fixture_dir / rel).read_text(encoding="utf-8") for rel in _files(capture.fixture_dir)}
    names = capture.listing_file.read_text(encoding="utf-8").splitlines()
    return compared, names


def first_json_difference(expected: Any, actual: Any, path: str = "$") -> str | None:
    """The JSON path of the first difference between two parsed documents, with both values.

    Returns:
        None when equal (as values and key order), else e.g. ``$.calls[2].status: fixture 200, now 500``.
    """
    if type(expected) is not type(actual):
        return f"{path}: fixture {_short(expected)}, now {_short(actual)}"
    if isinstance(expected, dict):
        for key in expected:
            if key not in actual:
                return f"{path}.{key}: in the fixture, missing now"
        for key in actual:
            if key not in expected:
                return f"{path}.{key}: new key (now {_short(actual[key])})"
        for key in expected:
            found = first_json_difference(expected[key], actual[key], f"{path}.{key}")
            if found:
                return found
        if list(expected) != list(actual):
            return f"{path}: key order, fixture {list(expected)}, now {list(actual)}"
        return None
    if isinstance(expected, list):
        for i, (e, a) in enumerate(zip(expected, actual)):
            found = first_json_difference(e, a, f"{path}[{i}]")
            if found:
                return found
        if len(expected) != len(actual):
            return f"{path}: length, fixture {len(expected)}, now {len(actual)}"
        return None
    if expected != actual:
        return f"{path}: fixture {_short(expected)}, now {_short(actual)}"
    return None


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "..."


def first_text_difference(expected: str, actual: str) -> str:
    """The first differing line of two texts (1-based), with both lines."""
    exp_lines, act_lines = expected.splitlines(keepends=True), actual.splitlines(keepends=True)
    for n, (e, a) in enumerate(zip(exp_lines, act_lines), start=1):
        if e != a:
            return f"line {n}: fixture {e!r:.200}, now {a!r:.200}"
    return f"line {min(len(exp_lines), len(act_lines)) + 1}: fixture has {len(exp_lines)} lines, now {len(act_lines)}"


def describe_difference(rel: str, expected: str, actual: str) -> str:
    """Where two masked texts of file `rel` first differ: a JSON path when both parse, else a line."""
    try:
        if _is_jsonl(rel):
            exp_docs = [json.loads(line) for line in expected.splitlines()]
            act_docs = [json.loads(line) for line in actual.splitlines()]
            found = first_json_difference(exp_docs, act_docs, "$lines")
        elif _is_json(rel):
            found = first_json_difference(json.loads(expected), json.loads(actual))
        else:
            found = None
    except json.JSONDecodeError:
        found = None
    if found:
        return found
    where = first_text_difference(expected, actual)
    return f"same JSON values, different bytes (layout), {where}" if _is_json(rel) or _is_jsonl(rel) else where


def _differences(label: str, expected: tuple[dict[str, str], list[str]],
                 actual: tuple[dict[str, str], list[str]]) -> list[str]:
    """Every difference between two masked runs, one line each, prefixed with `label`."""
    (expected_texts, expected_names), (texts, names) = expected, actual
    problems = []
    missing = sorted(set(expected_names) - set(names))
    extra = sorted(set(names) - set(expected_names))
    if missing:
        problems.append(f"{label}: files no longer written: {missing}")
    if extra:
        problems.append(f"{label}: files now written that the fixture lacks: {extra}")
    for rel in sorted(set(expected_texts) & set(texts)):
        if expected_texts[rel] != texts[rel]:
            problems.append(f"{label}/{rel}: {describe_difference(rel, expected_texts[rel], texts[rel])}")
    for rel in sorted(set(expected_texts) ^ set(texts)):
        if rel in missing or rel in extra:
            continue
        if rel not in expected_names:
            problems.append(f"{label}/{rel}: in the fixture folder but not in its .files.txt listing (stale fixture)")
        elif rel in expected_texts:
            problems.append(f"{label}/{rel}: compared by content in the fixture, by name only now")
        else:
            problems.append(f"{label}/{rel}: compared by content now, by name only in the fixture")
    return problems


def compare_with_fixture(capture: GoldenCapture, produced: Path) -> list[str]:
    """Every difference between `produced` (masked) and the fixture, one line each (empty: identical).

    Returns:
        Lines naming the fixture folder, the file and the first differing JSON path or text line.
    """
    try:
        actual = mask_run(produced)
    except LayoutError as exc:
        return [f"{capture.name}: {exc}"]
    return _differences(capture.name, read_fixture(capture), actual)


def compare_runs(first: Path, second: Path) -> list[str]:
    """Every difference between two masked runs of one capture (run-to-run noise the masking misses)."""
    return _differences("second run", mask_run(first), mask_run(second))
