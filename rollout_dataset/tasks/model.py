"""The task record, how its examples are shown, and the rule for "a held-out test appears".

An instruction is the statement followed by its worked examples in one fixed format:

    Example 1
    Input:
    3
    1 2 3
    Output:
    6

`visible_tests_text` renders the same block for ``visible_tests.txt``; `parse_examples` reads it
back (also used for tasks from files that carry no separate visible-test column).

Leak rule (`held_out_leaks`, `find_held_out_text`): a held-out input or expected output *appears* in
a text when its normalised form (trailing whitespace per line and trailing newlines dropped, then
leading blank lines dropped) is at least `STATEMENT_LEAK_MIN_CHARS` (3) characters long and occurs in the text
as whole tokens: not glued to a letter or digit on either side (so "FizzBuzz\n1" does not appear in
"FizzBuzz\n16", nor "100" in "1000000", but "2 3" does appear in "2 3 5 7"). Shorter texts ("1",
"no", "-5") occur in any prose by chance and tell an agent nothing, so they are exempt. An expected
output equal to a visible example's output is exempt too: the agent already saw it. Held-out
inputs must also differ from every visible input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from ..errors import TaskSourceError

__all__ = [
    "TestCase",
    "parse_test_cases",
    "Task",
    "STATEMENT_LEAK_MIN_CHARS",
    "format_examples",
    "compose_instruction",
    "visible_tests_text",
    "parse_examples",
    "normalise_text",
    "held_out_leaks",
    "find_held_out_text",
    "occurs_as_tokens",
]

#: shortest held-out text (after normalisation) the leak rule looks for
STATEMENT_LEAK_MIN_CHARS = 3


@dataclass(frozen=True)
class TestCase:
    """One stdin -> stdout test.

    Args:
        input: the text fed on standard input.
        output: the expected standard output (compared after `normalise_text`).
    """

    __test__ = False  # not a pytest class

    input: str
    output: str

    def to_dict(self) -> dict[str, str]:
        """The test as ``{"input": ..., "output": ...}``."""
        return {"input": self.input, "output": self.output}


def parse_test_cases(items: Iterable[Any], where: str) -> tuple[TestCase, ...]:
    """Test cases from ``{input, output}`` records (the one check of a test's fields, for every task source).

    Args:
        items: the records, in order.
        where: names the source in an error (``<file>: <task>.tests``); the index is appended.

    Returns:
        One `TestCase` per record.

    Raises:
        TaskSourceError: a record is not a mapping with string ``input`` and ``output``.
    """
    cases = []
    for i, case in enumerate(items):
        if not isinstance(case, Mapping) or not isinstance(case.get("input"), str) or not isinstance(case.get("output"), str):
            raise TaskSourceError(f"{where}[{i}]: each test needs string fields 'input' and 'output'")
        cases.append(TestCase(case["input"], case["output"]))
    return tuple(cases)


@dataclass(frozen=True)
class Task:
    """A stdin -> stdout programming task.

    Args:
        task_id: stable slug (or a hash of the instruction for tasks without an id).
        title: short human title.
        instruction: the text the agent sees: the statement with its worked examples.
        visible_tests: the worked examples of the instruction.
        held_out_tests: the tests that produce the reward; never shown to the agent.
        reference_solution: Python source of a correct solution (stdin -> stdout), if known.
        source: where it came from: ``"builtin"``, ``"file:PATH"`` or ``"hf:ORG/NAME:SPLIT"``.
        metadata: anything else (difficulty, tags, original row index, ...).
    """

    task_id: str
    title: str
    instruction: str
    visible_tests: tuple[TestCase, ...] = ()
    held_out_tests: tuple[TestCase, ...] = ()
    reference_solution: str | None = None
    source: str = "builtin"
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> dict[str, Any]:
        """The task as a JSON-ready dict (tests as lists of ``{input, output}``)."""
        return {
            "task_id": self.task_id,
            "title": self.title,
            "instruction": self.instruction,
            "visible_tests": [t.to_dict() for t in self.visible_tests],
            "held_out_tests": [t.to_dict() for t in self.held_out_tests],
            "reference_solution": self.reference_solution,
            "source": self.source,
            "metadata": dict(self.metadata),
        }


def normalise_text(text: str) -> str:
    """Drop trailing whitespace per line, trailing newlines and leading blank lines.

    Args:
        text: any text.

    Returns:
        The normalised text.
    """
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines)


def _display(text: str) -> str:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def format_examples(tests: Sequence[TestCase]) -> str:
    """Render worked examples in the fixed ``Example N / Input: / Output:`` format.

    Args:
        tests: the examples.

    Returns:
        The examples block (empty string for no examples).
    """
    blocks = []
    for i, t in enumerate(tests, 1):
        blocks.append(f"Example {i}\nInput:\n{_display(t.input)}\nOutput:\n{_display(t.output)}")
    return "\n\n".join(blocks)


def compose_instruction(statement: str, visible: Sequence[TestCase]) -> str:
    """The instruction an agent sees: statement, a blank line, then the examples.

    Args:
        statement: the problem statement without examples.
        visible: the worked examples.

    Returns:
        The instruction text.
    """
    examples = format_examples(visible)
    return statement.strip() + ("\n\n" + examples if examples else "") + "\n"


def visible_tests_text(task: Task) -> str:
    """The worked examples of a task as text, for ``visible_tests.txt``.

    Args:
        task: the task.

    Returns:
        The examples block with a final newline, or "" when the task has none.
    """
    text = format_examples(task.visible_tests)
    return text + "\n" if text else ""


_EXAMPLE = re.compile(
    r"^Example\s*\d*\s*:?\s*\n\s*Input\s*:?[ \t]*\n(?P<input>.*?)\n\s*Output\s*:?[ \t]*\n(?P<output>.*?)"
    r"(?=\n[ \t]*\n|\n\s*Example\b|\Z)",
    re.MULTILINE | re.DOTALL | re.IGNORECASE,
)


def parse_examples(instruction: str) -> list[TestCase]:
    """Read worked examples back out of an instruction.

    Args:
        instruction: text with examples in the `format_examples` format (case and colons lenient).

    Returns:
        The examples found, in order (maybe none). Outputs end with a newline.
    """
    return [TestCase(m.group("input").strip("\n") + "\n", m.group("output").strip("\n") + "\n")
            for m in _EXAMPLE.finditer(instruction.replace("\r\n", "\n"))]


def occurs_as_tokens(needle: str, text: str) -> bool:
    """Whether `needle` occurs in `text` without a letter or digit glued to either end.

    Args:
        needle: the text looked for.
        text: the text searched.

    Returns:
        True on a whole-token occurrence.
    """
    if not needle:
        return False
    start = text.find(needle)
    while start != -1:
        end = start + len(needle)
        before_ok = start == 0 or not (needle[0].isalnum() and text[start - 1].isalnum())
        after_ok = end == len(text) or not (needle[-1].isalnum() and text[end].isalnum())
        if before_ok and after_ok:
            return True
        start = text.find(needle, start + 1)
    return False


def _candidates(task: Task) -> Iterable[tuple[str, int, str]]:
    visible_outputs = {normalise_text(t.output) for t in task.visible_tests}
    for i, t in enumerate(task.held_out_tests):
        yield "input", i, normalise_text(t.input)
        out = normalise_text(t.output)
        if out not in visible_outputs:
            yield "output", i, out


def find_held_out_text(task: Task, text: str, *, min_chars: int = STATEMENT_LEAK_MIN_CHARS,
                       allow_in_instruction: bool = True) -> list[str]:
    """Which held-out inputs/outputs of a task occur in a text (the leak rule of this module).

    Args:
        task: the task.
        text: the text to scan (a recorded request, a file the agent wrote, ...).
        min_chars: shortest normalised held-out text that counts.
        allow_in_instruction: ignore held-out texts that the instruction itself contains.

    Returns:
        One description per hit, e.g. ``"held-out test 2 output"`` (never the text itself).
    """
    haystack = text.replace("\r\n", "\n")
    instruction = task.instruction.replace("\r\n", "\n")
    hits = []
    for kind, i, needle in _candidates(task):
        if len(needle) < min_chars or not occurs_as_tokens(needle, haystack):
            continue
        if allow_in_instruction and occurs_as_tokens(needle, instruction):
            continue
        hits.append(f"held-out test {i} {kind}")
    return hits


def held_out_leaks(task: Task, *, min_chars: int = STATEMENT_LEAK_MIN_CHARS) -> list[str]:
    """Check a task's own instruction against its held-out tests.

    Args:
        task: the task.
        min_chars: shortest normalised held-out text that counts.

    Returns:
        One description per violation (empty when the task is clean): a held-out input or output
        that appears in the instruction, or a held-out input equal to a visible input.
    """
    problems = [f"task {task.task_id}: {hit} appears in the instruction"
                for hit in find_held_out_text(task, task.instruction, min_chars=min_chars, allow_in_instruction=False)]
    visible_inputs = {normalise_text(t.input) for t in task.visible_tests}
    for i, t in enumerate(task.held_out_tests):
        if normalise_text(t.input) in visible_inputs:
            problems.append(f"task {task.task_id}: held-out test {i} input equals a visible input")
    return problems
