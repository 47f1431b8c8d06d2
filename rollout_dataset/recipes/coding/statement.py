"""The statement every coding harness is given: the task's instruction plus where the solution goes."""

from __future__ import annotations

__all__ = ["SOLUTION_NOTE", "harness_statement"]

SOLUTION_NOTE = ("Write your solution as a Python 3 program in the file solution.py in the current working "
                 "directory. It reads the input from standard input and writes the answer to standard output.")


def harness_statement(instruction: str) -> str:
    """The statement every harness gets: the task instruction plus where the solution goes.

    Args:
        instruction: the task's instruction (with its worked examples).

    Returns:
        The text given to the harness.
    """
    return instruction.rstrip() + "\n\n" + SOLUTION_NOTE + "\n"
