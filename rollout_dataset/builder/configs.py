"""The dataset's configs and columns, declared once.

Every other view of a column derives from the declarations below: the Arrow schema the parquet
writer uses, the `datasets.Features` that `load_dataset` applies, the card's `dataset_info` YAML
and its column tables. Where a column mirrors a field of an artifact document, its type and
description are read from the shipped JSON Schema (`rollout_dataset/schema/schemas/`), so the
schema file stays the single declaration of the record; the declared `dtype`/`description` here
are the fallback for derived columns and for fields a schema does not (yet) carry.

Column dtypes: ``string``, ``bool``, ``int8``, ``int32``, ``int64``, ``float32``, ``float64``,
``json`` (any JSON value stored as compact JSON text, ``null`` when absent), lists ``list<T>`` of a
scalar dtype, and ``list<message>``: chat messages as typed structs (`MESSAGE_TYPE`, the shape TRL's
SFTTrainer and chat templates read: role, content, reasoning_content, tool_calls[{id, type,
function{name, arguments}}], tool_call_id; tool-call `arguments` stay JSON text, since Arrow would
unify differing argument objects into one struct).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:  # imported on first use at runtime (datasets is slow to import)
    import datasets

__all__ = [
    "Column",
    "ConfigSpec",
    "CONFIGS",
    "CONFIG_NAMES",
    "DEFAULT_CONFIG",
    "resolved_columns",
    "arrow_schema",
    "features",
    "features_yaml",
    "MESSAGE_TYPE",
    "TOOL_CALL_TYPE",
]

_SCALARS: dict[str, pa.DataType] = {
    "string": pa.string(),
    "json": pa.string(),
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
}
#: one tool call of an assistant message (OpenAI shape; `arguments` is JSON text).
TOOL_CALL_TYPE = pa.struct([("id", pa.string()), ("type", pa.string()),
                            ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())]))])
#: one chat message of the `conversations` config.
MESSAGE_TYPE = pa.struct([("role", pa.string()), ("content", pa.string()), ("reasoning_content", pa.string()),
                          ("tool_calls", pa.list_(TOOL_CALL_TYPE)), ("tool_call_id", pa.string())])
_STRUCTS: dict[str, pa.DataType] = {"message": MESSAGE_TYPE}

@dataclass(frozen=True)
class Column:
    """One column of one config.

    Args:
        name: the column name.
        dtype: the fallback dtype (see the module docstring).
        description: the fallback description (used when no schema field is named or found).
        source: ``(schema_name, field)`` when the column mirrors a document field (``field`` is a name,
            or a dotted path with ``[]`` for array items, e.g. ``sequences.[].input_ids``); the field's
            JSON Schema type (``x-dtype`` for numeric arrays) and description win over the fallbacks.
    """

    name: str
    dtype: str
    description: str = ""
    source: tuple[str, str] | None = None


@dataclass(frozen=True)
class ConfigSpec:
    """One dataset config: its name, what a row is, and its columns."""

    name: str
    row: str
    description: str
    columns: tuple[Column, ...]


def _c(name: str, dtype: str, description: str = "", source: tuple[str, str] | None = None) -> Column:
    return Column(name, dtype, description, source)


def _s(schema: str, name: str, dtype: str, description: str = "", field: str | None = None) -> Column:
    return Column(name, dtype, description, (schema, field or name))


def _s_item(schema: str, array: str, name: str, dtype: str) -> Column:
    """A column of field `name` of each item of the document's list `array`."""
    return _s(schema, name, dtype, field=f"{array}.[].{name}")


_RID = _c("rollout_id", "string", "Unique id of the rollout (uuid4 hex); the join key of every config.")
_GROUP = _c("group_id", "string", "Group of rollouts a trainer compares (GRPO baseline): rollouts of the same "
            "task under the same dataset seed, '<env>:<task_id>:<dataset_seed>'.")

CONFIGS: tuple[ConfigSpec, ...] = (
    ConfigSpec("summary", "one row per rollout", "Facts and rewards of each rollout: task, model, harness, "
               "rewards, turns, tool calls, timed_out, capture level, trainable, created_at.", (
        _s("summary", "rollout_id", "string"),
        _s("summary", "created_at", "string"),
        _s("summary", "env", "string"),
        _s("summary", "model", "string"),
        _s("summary", "harness", "string"),
        _s("summary", "task_id", "string"),
        _GROUP,
        _s("summary", "task_index", "int64"),
        _s("summary", "dataset_seed", "int64"),
        _s("summary", "rollout_seed", "int64"),
        _s("summary", "captured_calls", "int64"),
        _s("summary", "agent_turns", "int64"),
        _s("summary", "trained_turns", "int64"),
        _s("summary", "tool_calls_total", "int64"),
        _s("summary", "tool_calls_by_name", "json"),
        _s("summary", "held_out_tests", "int64"),
        _s("summary", "held_out_passed", "int64"),
        _s("summary", "env_reward", "float64"),
        _s("summary", "reward_after_penalties", "float64"),
        _s("summary", "unscored_reason", "string"),
        _s("summary", "penalties", "json"),
        _s("summary", "timed_out", "bool"),
        _s("summary", "stop_reason", "string"),
        _s("summary", "capture_level", "string"),
        _s("summary", "trainable", "bool"),
        _s("summary", "trainable_tokens", "int64"),
        _s("summary", "findings_count", "int64"),
        _s("summary", "leakage", "json"),
        _s("summary", "timings", "json"),
        _s("summary", "errors", "json"),
        _s("summary", "stepwise", "json"),
        _s("summary", "env_metrics", "json"),
        _s("summary", "continuity", "json"),
        _s("summary", "context_fit", "json"),
        _s("summary", "isolation", "string"),
        _s("summary", "imported_from", "json"),
        _c("tokenizer", "string", "Tokenizer of the capture's token ids: task.json config 'tokenizer'; 'builtin' "
           "for the local backend; else the model name. Null below capture level tokens (no token ids)."),
        _c("served_model_id", "string", "The model id the server served (its /v1/models entry); null when not recorded."),
        _c("served_model_root", "string", "That model's `root` (the weights it was loaded from) per /v1/models."),
        _c("server_kind", "string", "What answered: 'vllm' (its /version), 'rollout-dataset-local-backend' (the "
           "local vLLM emulator, a scripted policy) or 'unknown'; null when not recorded."),
        _c("server_version", "string", "The server's version (vLLM's /version, or the local backend's)."),
        _c("policy", "string", "The local backend's policy (e.g. 'oracle', 'script'); null for a real model server."),
        _c("scripted", "bool", "True when a scripted policy, not a model, produced the answers: the rewards measure "
           "the script. Null when not recorded."),
        _c("harness_version", "string", "Version of the harness (the built-in one is versioned with rollout-dataset)."),
        _c("package_version", "string", "rollout-dataset version that captured the rollout."),
        _c("package_git_sha", "string", "rollout-dataset git commit that captured the rollout (null outside a checkout)."),
        _c("tokenizer_sha256", "string", "SHA-256 of the tokenizer.json the captures used; that tokenizer is "
           "stored in the dataset's tokenizer/ folder. Null when the tokenizer was not available at build time."),
        _c("tokenizer_revision", "string", "For a Hub tokenizer: the resolved commit of the Hub repo named in "
           "`tokenizer`; null otherwise."),
        _c("sampling_params", "json", "Distinct effective sampling params of the rollout's generation calls "
           "(JSON list, as sent upstream)."),
        _c("n_sequences", "int32", "Rows of this rollout in the sequences config."),
        _c("n_conversations", "int32", "Rows of this rollout in the conversations config (its trainable "
           "sequences; at capture level text, its sequences)."),
        _c("n_trace_rows", "int32", "Rows of this rollout in the trace config (captured calls)."),
        _c("n_turn_rows", "int32", "Rows of this rollout in the turns config."),
        _c("n_held_out_rows", "int32", "Rows of this rollout in the held_out_tests config."),
        _c("n_sample_rows", "int32", "Rows of this rollout in the samples config (1 in preview mode; the "
           "parts of samples.md in full mode)."),
        _c("samples_mode", "string", "How this rollout's samples rows were built: 'preview' (one viewer-sized "
           "row, header + head + tail of samples.md) or 'full' (samples.md split into parts, lossless)."),
        _c("n_cut_cells", "int32", "Text cells of this rollout cut to the cell limit (trace request/response "
           "JSON over 1 MB, kept as head + tail with a marker); 0 almost always."),
        _c("longest_sequence_tokens", "int64", "Tokens of the rollout's longest sequence (the context a trainer "
           "must fit); 0 when it has none."),
        _c("n_unique_tokens", "int64", "Distinct token positions of the rollout: the sum over turns of prompt "
           "delta + sampled tokens (what the turns config reconstructs)."),
    )),
    ConfigSpec("task", "one row per rollout", "The task each rollout was given and how it was picked.", (
        _RID,
        _s("task", "env", "string"),
        _s("task", "task_id", "string"),
        _s("task", "task_index", "int64"),
        _s("task", "title", "string"),
        _s("task", "instruction", "string"),
        _s("task", "source", "string"),
        _s("task", "dataset_seed", "int64"),
        _s("task", "rollout_seed", "int64"),
        _s("task", "n_prompts", "int64"),
        _s("task", "config", "json"),
    )),
    ConfigSpec("visible_tests", "one row per rollout", "The worked examples shown to the agent "
               "(visible_tests.txt); the empty string for environments without tests.", (
        _RID,
        _c("task_id", "string", "Id of the task."),
        _c("text", "string", "Content of visible_tests.txt (empty, never missing, for environments without tests)."),
    )),
    ConfigSpec("held_out_tests", "one row per held-out test case", "The tests that produce the reward, never "
               "shown to the agent. Environments without tests contribute no rows.", (
        _RID,
        _s("held_out_tests", "task_id", "string"),
        _c("test_index", "int32", "Index of the case in verification order (0-based)."),
        _c("input", "string", "Text fed to the program on stdin."),
        _c("output", "string", "Expected stdout."),
    )),
    ConfigSpec("trace", "one row per captured call", "Every call the recording proxy captured, in arrival "
               "order. Request and response are JSON text; token arrays and per-token logprobs are NOT "
               "repeated here (they live in sequences/turns), and `request_json.messages` holds only the "
               "messages after the first `messages_prefix_len` messages of call `messages_prefix_call_index`'s "
               "history (its request messages followed by its response message without null fields); "
               "`rollout_dataset.builder.trace_request(rows, call_index)` gives the full request back.", (
        _RID,
        _s("trace_record", "call_index", "int32", field="index"),
        _s("trace_record", "call_id", "string"),
        _s("trace_record", "session", "string"),
        _s("trace_record", "harness_session_id", "string"),
        _s("trace_record", "harness_parent_session_id", "string"),
        _s("trace_record", "model_server", "json"),
        _s("trace_record", "endpoint", "string"),
        _s("trace_record", "stream", "bool"),
        _s("trace_record", "status", "int64"),
        _s("trace_record", "started_at", "float64"),
        _s("trace_record", "latency_ms", "float64"),
        _s("trace_record", "ttft_ms", "float64"),
        _s("trace_record", "finish_reason", "string"),
        _s("trace_record", "capture_level", "string"),
        _s("trace_record", "token_source", "string"),
        _c("n_prompt_ids", "int32", "Length of the server's prompt_token_ids (0 when none)."),
        _c("n_completion_ids", "int32", "Length of the server's completion_token_ids (0 when none)."),
        _c("messages_prefix_call_index", "int32", "call_index of the earlier call whose history (request "
           "messages + response message without null fields) starts this call's messages; -1 when none."),
        _c("messages_prefix_len", "int32", "How many leading messages come from that history and are left "
           "out of request_json.messages."),
        _c("request_json", "string", "The request as the harness sent it (JSON text), messages delta-encoded "
           "as described above."),
        _c("response_json", "string", "The reassembled response (JSON text) without token-id arrays and "
           "per-token logprobs (see sequences/turns)."),
        _s("trace_record", "usage", "json"),
        _s("trace_record", "requested_sampling_params", "json"),
        _s("trace_record", "effective_sampling_params", "json"),
        _s("trace_record", "upstream_changes", "json"),
        _s("trace_record", "notes", "list<string>"),
        _s("trace_record", "error", "json"),
        _c("truncated", "bool", "True when request_json or response_json was over the cell limit and was cut "
           "(head and tail kept, a marker says how much was cut)."),
    )),
    ConfigSpec("turns", "one row per turn (model call) of turns.json", "Per-turn view. Token arrays are "
               "stored once: a turn lying on a sequence (`sequence_index` >= 0) takes its prompt, output and "
               "logprobs from that sequence row (prompt = input_ids[:n_prompt_ids], output = the next "
               "n_output_ids); any other turn stores `prompt_ids_delta` after the first `prefix_len` tokens of "
               "call `prefix_call_index`'s prompt+output. `rollout_dataset.builder.turn_prompt_ids(turn_rows, "
               "sequence_rows, call_index)` returns the full prompt_ids.", (
        _RID,
        _s_item("turns", "turns", "turn", "int32"),
        _s_item("turns", "turns", "call_index", "int32"),
        _s_item("turns", "turns", "role", "string"),
        _s_item("turns", "turns", "trained", "bool"),
        _s_item("turns", "turns", "tool_calls", "list<string>"),
        _s_item("turns", "turns", "n_prompt_ids", "int32"),
        _s_item("turns", "turns", "n_output_ids", "int32"),
        _s_item("turns", "turns", "finish_reason", "string"),
        _c("sequence_index", "int32", "sequence_index of the sequences row holding this turn's tokens; -1 "
           "when they are stored inline below."),
        _c("prefix_call_index", "int32", "Inline turns: call_index of the earlier turn whose prompt+output "
           "starts this prompt; -1 when none."),
        _c("prefix_len", "int32", "Inline turns: how many leading prompt tokens come from that turn."),
        _c("prompt_ids_delta", "list<int32>", "Inline turns: prompt_ids[prefix_len:] (empty for covered turns)."),
        _c("output_ids", "list<int32>", "Inline turns: the sampled token ids (empty for covered turns)."),
        _c("per_token_logps", "list<float32>", "Inline turns: log-probability of each sampled token (empty when "
           "the server sent none)."),
        _c("mask", "list<int8>", "Empty when the mask is the derived one (0 on each prompt id, 1 on each output "
           "id); else the full mask over prompt + output."),
    )),
    ConfigSpec("sequences", "one row per root-to-leaf path (trainer row)", "What a trainer consumes: one token "
               "sequence per path of the rollout's prefix graph, with loss mask, logprobs and role. Filter on "
               "`trainable` (or `role == 'agent'`); rows are labelled, never dropped.", (
        _RID,
        _c("sequence_index", "int32", "Index of the sequence in rollout.json."),
        _s_item("rollout", "sequences", "role", "string"),
        _s_item("rollout", "sequences", "trainable", "bool"),
        _s_item("rollout", "sequences", "root_id", "int32"),
        _s_item("rollout", "sequences", "node_ids", "list<int32>"),
        _s_item("rollout", "sequences", "n_turns", "int32"),
        _s_item("rollout", "sequences", "prompt_len", "int32"),
        _s_item("rollout", "sequences", "n_trainable", "int32"),
        _s_item("rollout", "sequences", "turn_lengths", "list<int32>"),
        _s_item("rollout", "sequences", "input_ids", "list<int32>"),
        _s_item("rollout", "sequences", "loss_mask", "list<int8>"),
        _s_item("rollout", "sequences", "logprobs", "list<float32>"),
        _s_item("rollout", "sequences", "findings", "json"),
        _s_item("rollout", "sequences", "earlier_reasoning_absent", "bool"),
        _c("env_reward", "float64", "The rollout's env_reward (copied from summary for convenience)."),
        _c("reward_after_penalties", "float64", "The rollout's reward_after_penalties (copied from summary)."),
        _GROUP,
    )),
    ConfigSpec("conversations", "one row per trainable sequence", "The conversation of each trainable "
               "sequence (every sequence at capture level text) as typed chat messages, ready for TRL's SFTTrainer conversational format "
               "(`messages` + `tools`): the request messages of the sequence's last call followed by the "
               "message the model answered. `tools` is JSON text (tool schemas differ in shape); decode it "
               "with `json.loads` before `apply_chat_template(messages, tools=...)`.", (
        _RID,
        _c("sequence_index", "int32", "sequence_index of the sequences row this conversation renders."),
        _GROUP,
        _c("messages", "list<message>", "The chat messages: role, content, reasoning_content, tool_calls "
           "(id, type, function.name, function.arguments as JSON text), tool_call_id; absent fields are null."),
        _c("tools", "json", "The tool manifest the harness sent with that call (JSON list of OpenAI tool "
           "schemas); null when it sent none."),
        _c("env_reward", "float64", "The rollout's env_reward (copied from summary)."),
        _c("reward_after_penalties", "float64", "The rollout's reward_after_penalties (copied from summary)."),
    )),
    ConfigSpec("samples", "one row per rollout (preview mode) or per part of samples.md (full mode)",
               "The rendered sample (header + token stream with special tokens), for reading in the viewer. "
               "Preview mode (the default) keeps the header, the head and the tail of samples.md within a "
               "bounded size, with a marker saying how many characters were cut; full mode splits samples.md "
               "into parts of at most 1 MB, losslessly. Both modes have these same columns.", (
        _RID,
        _c("part", "int32", "Part number (0-based; always 0 in preview mode); in full mode concatenate the parts "
           "in order for the whole samples.md."),
        _c("text", "string", "Markdown text: the preview, or one part of samples.md."),
        _c("truncated", "bool", "True when text is a preview with characters cut from the middle (the marker "
           "says how many); False for a whole samples.md or a full-mode part."),
        _c("full_chars", "int64", "Characters of the whole samples.md of the rollout (before any cut)."),
    )),
)

CONFIG_NAMES: tuple[str, ...] = tuple(c.name for c in CONFIGS)
DEFAULT_CONFIG = "summary"
_BY_NAME = {c.name: c for c in CONFIGS}


def _schema_dtype(prop: dict[str, Any]) -> str | None:
    """Map one JSON Schema property to our dtype, or None when it is ambiguous."""
    if "x-dtype" in prop:
        return str(prop["x-dtype"])
    if "enum" in prop and all(isinstance(v, str) or v is None for v in prop["enum"]):
        return "string"
    types = prop.get("type")
    if types is None:
        return None
    if isinstance(types, str):
        types = [types]
    types = [t for t in types if t != "null"]
    if len(types) != 1:
        return None
    kind = types[0]
    if kind == "array":
        items = prop.get("items") or {}
        inner = _schema_dtype(items) if isinstance(items, dict) else None
        if inner in _SCALARS and inner != "json":
            return f"list<{inner}>"
        return "json"
    return {"string": "string", "boolean": "bool", "integer": "int64", "number": "float64",
            "object": "json"}.get(kind)


def _schema_property(schema_name: str, field: str) -> dict[str, Any] | None:
    """Find a field: a top-level name, or a dotted path where ``[]`` steps into array items."""
    from rollout_dataset.schema import load_schema

    try:
        node: Any = load_schema(schema_name)
    except KeyError:
        return None
    for part in field.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get("items") if part == "[]" else node.get("properties", {}).get(part)
    return node if isinstance(node, dict) else None


@functools.lru_cache(maxsize=None)
def resolved_columns(config: str) -> tuple[Column, ...]:
    """The columns of a config with schema-derived types and descriptions applied.

    Args:
        config: a config name from `CONFIG_NAMES`.

    Returns:
        The config's columns, in order, each with its final dtype and description.

    Raises:
        KeyError: unknown config name.
    """
    if config not in _BY_NAME:
        raise KeyError(f"unknown config {config!r}; valid: {', '.join(CONFIG_NAMES)}")
    out = []
    for col in _BY_NAME[config].columns:
        dtype, description = col.dtype, col.description
        if col.source is not None:
            prop = _schema_property(*col.source)
            if prop is not None:
                dtype = _schema_dtype(prop) or dtype
                # A column narrower than the schema's integer (e.g. int32 indexes) keeps its width.
                if col.dtype in ("int8", "int32") and dtype == "int64":
                    dtype = col.dtype
                description = prop.get("description") or description
        out.append(Column(col.name, dtype, description, col.source))
    return tuple(out)


def _arrow_type(dtype: str) -> pa.DataType:
    if dtype.startswith("list<"):
        return pa.list_(_arrow_type(dtype[5:-1]))
    return _STRUCTS.get(dtype) or _SCALARS[dtype]


@functools.lru_cache(maxsize=None)
def arrow_schema(config: str) -> pa.Schema:
    """The Arrow schema every parquet shard of a config is written with.

    Args:
        config: a config name.

    Returns:
        A `pyarrow.Schema`, identical for every shard.
    """
    return pa.schema([pa.field(c.name, _arrow_type(c.dtype)) for c in resolved_columns(config)])


_ARROW_VALUE_NAMES = {arrow: name for name, arrow in _SCALARS.items() if name != "json"}


def _yaml_of_type(t: pa.DataType) -> Any:
    """An Arrow type in the card YAML's feature form (the value under `dtype`/`list`/`struct`)."""
    if pa.types.is_struct(t):
        return [{"name": t.field(i).name, **_feature_of_type(t.field(i).type)} for i in range(t.num_fields)]
    if pa.types.is_list(t):
        return _yaml_of_type(t.value_type)
    return _ARROW_VALUE_NAMES[t]


def _feature_of_type(t: pa.DataType) -> dict[str, Any]:
    if pa.types.is_list(t):
        return {"list": _yaml_of_type(t.value_type)}
    if pa.types.is_struct(t):
        return {"struct": _yaml_of_type(t)}
    return {"dtype": _ARROW_VALUE_NAMES[t]}


def _feature_dict(dtype: str) -> dict[str, Any]:
    return _feature_of_type(_arrow_type(dtype))


def features_yaml(config: str) -> list[dict[str, Any]]:
    """The config's features in the card's `dataset_info.features` YAML form.

    Args:
        config: a config name.

    Returns:
        A list of ``{"name": ..., "dtype": ...}`` / ``{"name": ..., "list": ...}`` dicts.
    """
    return [{"name": c.name, **_feature_dict(c.dtype)} for c in resolved_columns(config)]


def features(config: str) -> datasets.Features:
    """The `datasets.Features` of a config (what `load_dataset` returns for it).

    Args:
        config: a config name.

    Returns:
        `datasets.Features`, derived from the same declaration as the Arrow schema.
    """
    import datasets

    return datasets.Features.from_arrow_schema(arrow_schema(config))
