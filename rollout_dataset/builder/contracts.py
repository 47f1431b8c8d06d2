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

Checks a recipe runs before training starts, each raising ValueError with a line that names the
problem (never a silent zero gradient or a silently cut row):

- `check_lengths`: the config has rows, and none is longer than the model's context (or the
  trainer's ``max_length``); returns the longest, the ``max_length`` that cuts nothing.
- `check_groups` / `group_advantages`: rollouts per ``group_id``; a dataset whose every group holds
  one rollout gives every advantage 0 (no learning signal) and is refused; advantages are the
  reward minus the group's mean (GRPO, scaled by the group's std) or the mean of the others (RLOO).
- `check_tokenizer`: the model's vocabulary is the one the dataset's ids were sampled from.
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


def check_lengths(lengths, max_length, names=None, what="row"):
    """Check, before training, that there are rows and that none is longer than `max_length`.

    Args:
        lengths: each row's length in tokens.
        max_length: the model's context (or the trainer's ``max_length``); None checks only for rows.
        names: each row's name for the message (e.g. its ``rollout_id``); default its index.
        what: what a row is, for the message (``"sequence"``, ``"conversation"``).

    Returns:
        The longest length: the ``max_length`` that cuts no row.

    Raises:
        ValueError: no row at all, or a row longer than `max_length` (the first such row named).
    """
    lengths = list(lengths)
    if not lengths:
        raise ValueError(f"no {what}s to train on: the config (after filtering) has zero rows")
    for i, n in enumerate(lengths):
        if max_length is not None and n > max_length:
            name = names[i] if names is not None else f"#{i}"
            raise ValueError(f"{what} {name} is {n} tokens, longer than the model's {max_length}: it would be cut "
                             f"(drop it, or use a model with a longer context)")
    return max(lengths)


def group_sizes(group_ids):
    """Rollouts per group.

    Args:
        group_ids: each row's ``group_id``.

    Returns:
        ``{group_id: count}`` in first-seen order.
    """
    sizes = {}
    for g in group_ids:
        sizes[g] = sizes.get(g, 0) + 1
    return sizes


def check_groups(group_ids):
    """Check, before training, that some group holds two or more rollouts (a baseline needs them).

    Args:
        group_ids: each row's ``group_id``.

    Returns:
        ``{group_id: count}`` (see `group_sizes`).

    Raises:
        ValueError: no rows, or every group holds one rollout: each advantage would be 0, a zero
            gradient (capture several rollouts per task and seed: ``batch --rollouts-per-seed N``).
    """
    sizes = group_sizes(group_ids)
    if not sizes:
        raise ValueError("no rollouts to train on: the config (after filtering) has zero rows")
    if max(sizes.values()) < 2:
        raise ValueError(f"every one of the {len(sizes)} group(s) holds one rollout: a group baseline gives each an "
                         "advantage of 0, no learning signal (capture several rollouts per task and seed)")
    return sizes


def group_advantages(rewards, group_ids, baseline="mean", scale=True, eps=1e-4):
    """Each rollout's advantage within its group (the rows of one ``group_id``).

    Args:
        rewards: each row's reward (e.g. ``env_reward``); None (unscored) is refused: drop those rows.
        group_ids: each row's ``group_id``.
        baseline: ``"mean"`` (GRPO: the group's mean) or ``"leave_one_out"`` (RLOO: the mean of the
            group's other rollouts).
        scale: divide by the group's standard deviation plus `eps` (GRPO's default).
        eps: added to the standard deviation.

    Returns:
        One float per row, in row order (0.0 for a rollout alone in its group).

    Raises:
        ValueError: a None reward, lengths that differ, an unknown baseline, or no group of two or
            more rollouts (`check_groups`).
    """
    rewards, group_ids = list(rewards), list(group_ids)
    if len(rewards) != len(group_ids):
        raise ValueError(f"{len(rewards)} rewards for {len(group_ids)} group ids")
    if baseline not in ("mean", "leave_one_out"):
        raise ValueError(f"baseline {baseline!r}: use 'mean' (GRPO) or 'leave_one_out' (RLOO)")
    for i, r in enumerate(rewards):
        if r is None:
            raise ValueError(f"row {i} (group {group_ids[i]}) has no reward (unscored): drop it before training")
    check_groups(group_ids)
    members = {}
    for i, g in enumerate(group_ids):
        members.setdefault(g, []).append(i)
    advantages = [0.0] * len(rewards)
    for rows in members.values():
        n = len(rows)
        if n < 2:
            continue
        values = [float(rewards[i]) for i in rows]
        mean = sum(values) / n
        std = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
        for i, v in zip(rows, values):
            base = (mean * n - v) / (n - 1) if baseline == "leave_one_out" else mean
            advantages[i] = (v - base) / (std + eps) if scale else v - base
    return advantages


def _vocab_of(tokenizer_json):
    """``{token: id}`` of a parsed tokenizer.json: its model's vocabulary and its added tokens."""
    vocab = tokenizer_json.get("model", {}).get("vocab") or {}
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...] by id
        vocab = {piece: i for i, (piece, _score) in enumerate(vocab)}
    vocab = dict(vocab)
    for added in tokenizer_json.get("added_tokens") or []:
        vocab[added["content"]] = added["id"]
    return vocab


def check_tokenizer(tokenizer_json, model_vocab):
    """Check, before training, that the model's tokenizer is the dataset's (same token for every id).

    Args:
        tokenizer_json: the dataset's ``tokenizer/tokenizer.json``, parsed (``json.load``).
        model_vocab: the model's tokenizer's ``{token: id}`` (``tokenizer.get_vocab()``).

    Returns:
        The vocabulary size.

    Raises:
        ValueError: a token whose id differs, or a token one side lacks (the first few named).
    """
    ours = _vocab_of(tokenizer_json)
    theirs = dict(model_vocab)
    differ = sorted(t for t in set(ours) | set(theirs) if ours.get(t) != theirs.get(t))
    if differ:
        shown = ", ".join(f"{t!r}: dataset {ours.get(t)} model {theirs.get(t)}" for t in differ[:3])
        raise ValueError(f"the model's tokenizer is not the dataset's: {len(differ)} of {len(ours)} tokens differ "
                         f"({shown}); the dataset's ids mean other text to this model (use the dataset's tokenizer/ "
                         "and a model trained with it)")
    return len(ours)
