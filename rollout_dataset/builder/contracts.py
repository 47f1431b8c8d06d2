"""Trainer contracts over rows of the `sequences` config, one function per contract.

This module is deliberately self-contained (standard library only, no import of this package):
the dataset card pastes its source verbatim, so a reader of the Hub page runs exactly this code
with nothing but `datasets` installed. Every function takes either one row (a dict of scalars
and lists, `ds[i]`) or a batch (a dict of lists, `ds[i:j]` or a `map(batched=True)` batch) and
answers in the same shape: per-row values for a row, lists of them for a batch.

Contracts:

- `grpo_rollout_output`: what TRL's GRPO `rollout_func` returns: ``prompt_ids``,
  ``completion_ids``, ``logprobs`` and ``env_mask`` (1 on tokens the model sampled, 0 on tool
  output and chat-template tokens the environment inserted; TRL pops ``env_mask`` and multiplies
  it into its completion mask, so the loss never trains on environment tokens).
- `sft_inputs`: what an SFT trainer over token ids takes: ``input_ids`` + ``assistant_masks``
  over the whole sequence (1 exactly where the model sampled).
- `prompt_completion`: plain ``prompt_ids`` / ``completion_ids`` / ``loss_mask`` (the mask over
  the completion), for any other trainer.

The prompt is the first call's prompt (``input_ids[:prompt_len]``); the completion is everything
after it: every sampled turn and the environment tokens between them.
"""


def is_batch(rows):
    """Whether `rows` is a batch (a dict of lists) rather than one row.

    Args:
        rows: a `sequences` row or batch.

    Returns:
        True for a batch (its ``prompt_len`` is a list).
    """
    return isinstance(rows["prompt_len"], list)


def _per_row(rows, one):
    """Apply `one` to a row, or to each row of a batch (collecting each key into a list)."""
    if not is_batch(rows):
        return one(rows)
    keys = list(rows)
    out = {}
    for i in range(len(rows["prompt_len"])):
        for key, value in one({k: rows[k][i] for k in keys}).items():
            out.setdefault(key, []).append(value)
    return out


def _check(row):
    """Raise ValueError when the row's arrays are not aligned (a corrupt or hand-edited row)."""
    n = len(row["input_ids"])
    if len(row["loss_mask"]) != n or (row["logprobs"] and len(row["logprobs"]) != n):
        raise ValueError(f"rollout {row.get('rollout_id')} sequence {row.get('sequence_index')}: input_ids, "
                         f"loss_mask and logprobs differ in length ({n}, {len(row['loss_mask'])}, "
                         f"{len(row['logprobs'])})")
    if not 0 <= row["prompt_len"] <= n:
        raise ValueError(f"rollout {row.get('rollout_id')} sequence {row.get('sequence_index')}: prompt_len "
                         f"{row['prompt_len']} outside 0..{n}")


def grpo_rollout_output(rows):
    """TRL GRPO `rollout_func` output for sequence row(s).

    Args:
        rows: a `sequences` row or batch.

    Returns:
        ``{"prompt_ids", "completion_ids", "logprobs", "env_mask"}``; ``logprobs`` is 0.0 on
        environment tokens (where ``env_mask`` is 0). Lists per key for a batch.

    Raises:
        ValueError: a row's arrays are not aligned.
    """
    def one(row):
        _check(row)
        p = row["prompt_len"]
        logprobs = row["logprobs"] or [0.0] * len(row["input_ids"])
        return {"prompt_ids": list(row["input_ids"][:p]), "completion_ids": list(row["input_ids"][p:]),
                "logprobs": [float(x) for x in logprobs[p:]], "env_mask": [int(m) for m in row["loss_mask"][p:]]}
    return _per_row(rows, one)


def sft_inputs(rows):
    """SFT inputs over token ids for sequence row(s).

    Args:
        rows: a `sequences` row or batch.

    Returns:
        ``{"input_ids", "assistant_masks"}`` over the whole sequence; lists per key for a batch.

    Raises:
        ValueError: a row's arrays are not aligned.
    """
    def one(row):
        _check(row)
        return {"input_ids": list(row["input_ids"]), "assistant_masks": [int(m) for m in row["loss_mask"]]}
    return _per_row(rows, one)


def prompt_completion(rows):
    """Plain prompt / completion split with the loss mask over the completion.

    Args:
        rows: a `sequences` row or batch.

    Returns:
        ``{"prompt_ids", "completion_ids", "loss_mask"}``; lists per key for a batch.

    Raises:
        ValueError: a row's arrays are not aligned.
    """
    def one(row):
        _check(row)
        p = row["prompt_len"]
        return {"prompt_ids": list(row["input_ids"][:p]), "completion_ids": list(row["input_ids"][p:]),
                "loss_mask": [int(m) for m in row["loss_mask"][p:]]}
    return _per_row(rows, one)
