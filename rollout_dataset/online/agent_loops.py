"""A session's sequences as the rollout outputs of verl's and SkyRL's agent loops (pure; no import of
either trainer: they take plain lists and numbers).

Which sequence a trainer optimises: a session may hold several (a harness's title generator, a
summariser, a fork). `main_sequence` picks the trainable ``agent`` sequence with the most trainable
tokens (the leaf that arrived last on a tie); a session with none gives its longest ``agent`` sequence
with the mask zeroed (nothing trained, the reward still counted by the group), or no sequence at all.

verl (``verl.experimental.agent_loop``): an ``AgentLoopBase`` subclass registered with ``@register``
whose ``async run(sampling_params, **kwargs)`` runs the harness against the proxy's session URL and
returns ``AgentLoopOutput(**verl_agent_loop_fields(document), metrics=AgentLoopMetrics())``.
SkyRL (``skyrl_train.generators``): a ``GeneratorInterface`` whose ``async generate(input_batch)``
runs one session per prompt and returns ``skyrl_generator_output(documents)``. Both in
docs/session-api.md.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["main_sequence", "prompt_and_response", "verl_agent_loop_fields", "skyrl_generator_output"]


def main_sequence(document: dict[str, Any]) -> tuple[dict[str, Any], bool] | None:
    """The sequence of a session a trainer optimises, and whether it may be trained on.

    Args:
        document: ``GET /sessions/{id}/sequences``.

    Returns:
        ``(sequence, trainable)``, or None when the session has no sequence.
    """
    sequences = document.get("sequences") or []
    trainable = [s for s in sequences if s.get("trainable") and s.get("role") == "agent"]
    if trainable:
        return max(trainable, key=lambda s: (s["n_trainable"], s["sequence_index"])), True
    agents = [s for s in sequences if s.get("role") == "agent"] or list(sequences)
    if not agents:
        return None
    return max(agents, key=lambda s: (len(s["input_ids"]), s["sequence_index"])), False


def prompt_and_response(sequence: dict[str, Any], trainable: bool) -> dict[str, Any]:
    """A sequence split at its first call's prompt: ids, mask (1 where the model sampled) and logprobs.

    Args:
        sequence: a sequence of the API (a dataset `sequences` row).
        trainable: False zeroes the mask (nothing of the sequence is trained on).

    Returns:
        ``{"prompt_ids", "response_ids", "mask", "logprobs", "n_turns", "finish_reason"}``.

    Raises:
        ValueError: its arrays differ in length (a corrupt row).
    """
    ids, mask, logprobs = sequence["input_ids"], sequence["loss_mask"], sequence["logprobs"] or []
    if len(mask) != len(ids) or (logprobs and len(logprobs) != len(ids)):
        raise ValueError(f"sequence {sequence.get('sequence_index')}: input_ids, loss_mask and logprobs differ in "
                         f"length ({len(ids)}, {len(mask)}, {len(logprobs)})")
    p = int(sequence["prompt_len"])
    logprobs = logprobs or [0.0] * len(ids)
    reasons = sequence.get("finish_reasons") or [None]
    return {"prompt_ids": list(ids[:p]), "response_ids": list(ids[p:]),
            "mask": [int(m) if trainable else 0 for m in mask[p:]],
            "logprobs": [float(x) for x in logprobs[p:]], "n_turns": int(sequence["n_turns"]),
            "finish_reason": reasons[-1]}


def verl_agent_loop_fields(document: dict[str, Any]) -> dict[str, Any]:
    """The fields of verl's ``AgentLoopOutput`` for one session (all but ``metrics``).

    Args:
        document: ``GET /sessions/{id}/sequences`` (its ``reward``, when posted, is the reward score).

    Returns:
        ``{"prompt_ids", "response_ids", "response_mask", "response_logprobs", "reward_score",
        "num_turns", "extra_fields"}`` (``extra_fields``: the session id, whether the sequence is
        trainable, the last call's finish reason).

    Raises:
        ValueError: the session has no sequence (the harness made no model call).
    """
    picked = main_sequence(document)
    if picked is None:
        raise ValueError(f"session {document.get('session')!r} has no sequence: the harness made no model call")
    sequence, trainable = picked
    part = prompt_and_response(sequence, trainable)
    return {"prompt_ids": part["prompt_ids"], "response_ids": part["response_ids"], "response_mask": part["mask"],
            "response_logprobs": part["logprobs"], "reward_score": document.get("reward"),
            "num_turns": part["n_turns"],
            "extra_fields": {"session": document.get("session"), "trainable": trainable,
                             "finish_reason": part["finish_reason"]}}


def skyrl_generator_output(documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """SkyRL's ``GeneratorOutput`` for a batch of sessions, one per prompt of the ``GeneratorInput``.

    Args:
        documents: ``GET /sessions/{id}/sequences`` of each session, in the input's order.

    Returns:
        ``{"prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons",
        "rollout_logprobs", "rollout_metrics"}`` (a missing reward counts 0.0, and is counted in
        ``rollout_metrics``).

    Raises:
        ValueError: a session has no sequence.
    """
    out: dict[str, Any] = {"prompt_token_ids": [], "response_ids": [], "rewards": [], "loss_masks": [],
                           "stop_reasons": [], "rollout_logprobs": []}
    unrewarded = untrainable = 0
    for document in documents:
        fields = verl_agent_loop_fields(document)
        out["prompt_token_ids"].append(fields["prompt_ids"])
        out["response_ids"].append(fields["response_ids"])
        out["loss_masks"].append(fields["response_mask"])
        out["rollout_logprobs"].append(fields["response_logprobs"])
        out["stop_reasons"].append(fields["extra_fields"]["finish_reason"] or "unknown")
        reward = fields["reward_score"]
        unrewarded += reward is None
        untrainable += not fields["extra_fields"]["trainable"]
        out["rewards"].append(float(reward) if reward is not None else 0.0)
    out["rollout_metrics"] = {"sessions": len(documents), "sessions_without_reward": unrewarded,
                              "sessions_not_trainable": untrainable}
    return out
