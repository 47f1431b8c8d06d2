"""JSON Schema (Draft 2020-12) files for every document the project writes, and validation.

The schema files in `rollout_dataset/schema/schemas/` are the single declaration of each record;
Arrow features, dataset-card column tables and docs are derived from them (`x-dtype` annotations
give the Arrow type of numeric arrays: int32 token ids, float32 logprobs, int8 masks).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import TYPE_CHECKING, Any

import jsonschema
from referencing import Registry, Resource

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = ["SCHEMA_NAMES", "load_schema", "load_validators", "schema_errors", "fast_schema_valid", "validate"]


def _schema_dir() -> Traversable:
    return resources.files(__package__).joinpath("schemas")


def _names() -> list[str]:
    return sorted(p.name[: -len(".schema.json")] for p in _schema_dir().iterdir() if p.name.endswith(".schema.json"))


SCHEMA_NAMES = _names()


@functools.lru_cache(maxsize=None)
def load_schema(name: str) -> dict[str, Any]:
    """Load one shipped JSON Schema by name (e.g. ``"trace_record"``).

    Args:
        name: the schema's name, the file name without ``.schema.json``.

    Returns:
        The schema as a dict.

    Raises:
        KeyError: no schema of that name ships with the package.
    """
    path = _schema_dir().joinpath(f"{name}.schema.json")
    if not path.is_file():
        raise KeyError(f"no schema named {name!r}; known: {', '.join(_names())}")
    return json.loads(path.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def _registry() -> Registry:
    """Every shipped schema under its `$id`, so one schema can `$ref` another by file name."""
    resources = [Resource.from_contents(load_schema(name)) for name in _names()]
    return Registry().with_resources((uri, resource) for resource in resources if (uri := resource.id()))


@functools.lru_cache(maxsize=None)
def _validator(name: str) -> jsonschema.protocols.Validator:
    schema = load_schema(name)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema, registry=_registry())


@functools.lru_cache(maxsize=None)
def _fast_validator(name: str) -> Any:
    """A compiled jsonschema-rs validator of a shipped schema (every schema in its registry), or None."""
    try:
        import jsonschema_rs
    except ImportError:  # the pure-Python validator alone (slower, same verdicts)
        return None
    schemas = [load_schema(n) for n in _names()]
    registry = jsonschema_rs.Registry([(s["$id"], s) for s in schemas if "$id" in s])
    return jsonschema_rs.validator_for(load_schema(name), registry=registry)


def load_validators(name: str) -> None:
    """Build a schema's validators (both engines, and the registry they resolve `$ref` in) now.

    They are otherwise built at first use, which reads the schema files; a server that checks bodies
    off its event loop calls this at startup, so that no worker thread opens a file (a thread's open
    can take a descriptor the server freed for a file of its own when it is out of them).

    Args:
        name: the schema's name.

    Raises:
        KeyError: no schema of that name ships with the package.
    """
    _fast_validator(name)
    _validator(name)


def fast_schema_valid(document: Any, name: str) -> bool:
    """True when a compiled validator (jsonschema-rs, in Rust) finds the document valid.

    A quick yes only: False means "not shown valid here" (invalid, or a value the compiled validator
    cannot take, such as NaN, an integer beyond 64 bits, a lone surrogate, very deep nesting), and
    the caller then runs `schema_errors`, whose verdict and messages are the reference. Where the two
    engines could differ (a regex's ``$`` before a final newline, say) jsonschema-rs is the stricter
    one, so a document is never accepted that `schema_errors` would reject; tests/test_validate.py
    runs every rejection through both.

    Args:
        document: the parsed JSON document.
        name: the schema's name.

    Returns:
        True when valid; False when undecided here.
    """
    validator = _fast_validator(name)
    if validator is None:
        return False
    try:
        return bool(validator.is_valid(document))
    except (ValueError, TypeError, OverflowError, RecursionError):
        return False


def _json_path(error: jsonschema.ValidationError) -> str:
    path = "$"
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def schema_errors(document: Any, name: str) -> list[tuple[str, str]]:
    """Check a document against a shipped schema.

    Args:
        document: the parsed JSON document.
        name: the schema's name.

    Returns:
        `(json_path, reason)` pairs, sorted by path; empty when the document is valid.
    """
    if fast_schema_valid(document, name):
        return []
    errors = _validator(name).iter_errors(document)
    return sorted(((_json_path(e), e.message) for e in errors), key=lambda pair: pair[0])


def validate(document: Any, name: str) -> None:
    """Raise if a document does not match its schema.

    Args:
        document: the parsed JSON document.
        name: the schema's name.

    Raises:
        SchemaValidationError: with one `(name, json_path, reason)` per failure.
    """
    from rollout_dataset.errors import SchemaValidationError

    failures = schema_errors(document, name)
    if failures:
        raise SchemaValidationError([(name, path, reason) for path, reason in failures])
