"""Request bodies of the APIs the proxy and the local backend accept, checked against their published shapes.

One definition per API, used by both the recording proxy (which answers 400 before anything reaches
the model) and the local backend (which answers as the server would): the shape is a shipped JSON
Schema (`schemas/messages_request.schema.json` for the Anthropic Messages API,
`schemas/responses_request.schema.json` for the OpenAI Responses API), and numbers must be finite
(JSON Schema cannot see NaN or Infinity, which Python's JSON reader accepts).
"""

from __future__ import annotations

import math
from typing import Any

from rollout_dataset.schema import fast_schema_valid, load_validators, schema_errors

__all__ = ["MESSAGES_REQUEST_SCHEMA", "RESPONSES_REQUEST_SCHEMA", "messages_request_problem",
           "responses_request_problem", "problem_field", "non_finite_number", "surely_valid",
           "load_request_validators"]

#: the schema of a `/v1/messages` body.
MESSAGES_REQUEST_SCHEMA = "messages_request"
#: the schema of a `/v1/responses` body.
RESPONSES_REQUEST_SCHEMA = "responses_request"


def load_request_validators() -> None:
    """Build the validators of every request schema here now, not at the first body (see `load_validators`)."""
    for schema in (MESSAGES_REQUEST_SCHEMA, RESPONSES_REQUEST_SCHEMA):
        load_validators(schema)


def non_finite_number(value: Any, path: str = "$") -> str | None:
    """The JSON path of the first NaN or infinite number in a parsed body, or None.

    Args:
        value: the parsed JSON value.
        path: the path of `value` itself.

    Returns:
        e.g. ``"$.temperature"``, or None when every number is finite.
    """
    stack = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return where
        if isinstance(item, dict):
            stack.extend((f"{where}.{k}", v) for k, v in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(item))))
    return None


def _request_problem(body: Any, schema: str) -> str | None:
    """What makes a request body invalid against one shipped schema (see the public wrappers)."""
    errors = schema_errors(body, schema)
    if errors:
        path, reason = errors[0]
        field = path.removeprefix("$").removeprefix(".") or "body"
        return f"{field}: {reason[:300]}"
    where = non_finite_number(body)
    if where is not None:
        return f"{where.removeprefix('$.')}: a finite number is required (NaN and Infinity are not JSON numbers)"
    return None


def surely_valid(body: Any, schema: str) -> bool:
    """A quick yes: the compiled validator finds the body valid and every number is finite.

    False means "not shown valid": the caller then names the problem with the reference validator
    (`messages_request_problem` / `responses_request_problem`), which can take a hundred milliseconds
    on a body of hundreds of KiB; a server runs that part off its event loop.

    Args:
        body: the parsed request body.
        schema: `MESSAGES_REQUEST_SCHEMA` or `RESPONSES_REQUEST_SCHEMA`.

    Returns:
        True when the body surely has the shape.
    """
    return fast_schema_valid(body, schema) and non_finite_number(body) is None


def problem_field(problem: str) -> str:
    """The field a problem names (its part before the first colon), e.g. ``"input[0]"``.

    Args:
        problem: a problem from `messages_request_problem` or `responses_request_problem`.

    Returns:
        The field's path within the body (``"body"`` for the body itself).
    """
    return problem.split(":", 1)[0]


def messages_request_problem(body: Any) -> str | None:
    """What makes a `/v1/messages` body invalid, in one line naming the field, or None.

    Args:
        body: the parsed request body.

    Returns:
        ``"<field>: <reason>"`` (e.g. ``"system: 123 is not valid under any of the given schemas"``),
        or None when the body has the published shape.
    """
    return _request_problem(body, MESSAGES_REQUEST_SCHEMA)


def responses_request_problem(body: Any) -> str | None:
    """What makes a `/v1/responses` body invalid, in one line naming the field, or None.

    Keys the schema does not list are accepted, as vLLM 0.32 accepts and ignores them.

    Args:
        body: the parsed request body.

    Returns:
        ``"<field>: <reason>"`` (e.g. ``"input[0]: 'call_id' is a required property"``), or None when
        the body has the published shape.
    """
    return _request_problem(body, RESPONSES_REQUEST_SCHEMA)
