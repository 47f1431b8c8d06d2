"""Root-to-leaf paths -> labelled training sequences (input ids, loss mask, logprobs, role).

One sequence per root-to-leaf path of the prefix graph. Because every node's prompt + sampled ids
are an exact prefix of its child's prompt, the leaf's prompt + sampled ids hold the whole path, and
each node's sampled tokens sit at ``[len(node.prompt_ids), len(node.prompt_ids) + len(sampled))``.
The loss mask is 1 on exactly those positions and 0 on every context token (system prompt, user
turns, tool results, the template tokens between turns). Context positions of ``logprobs`` hold
0.0 (a float32 list has no nulls to spare; the mask says which positions are real).

Roles are structural (never by matching prompt strings):

- ``discarded``: the path ends in a discarded node (a retry or resample nobody continued);
- otherwise, if any live path carries a tool manifest, paths with one are ``agent`` and paths
  without are ``auxiliary`` (a title generator, a summariser);
- if no live path carries one (a harness that parses tool calls out of text), every live path is
  ``agent``. Several agent roots are normal and all are trainable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rollout_dataset.graph import RolloutGraph, TurnNode

__all__ = ["AGENT", "AUXILIARY", "DISCARDED", "ROLES", "PathSequence", "build_sequences", "assign_roles"]

AGENT, AUXILIARY, DISCARDED = "agent", "auxiliary", "discarded"
ROLES = (AGENT, AUXILIARY, DISCARDED)


@dataclass
class PathSequence:
    """One root-to-leaf path flattened for a trainer.

    ``input_ids``/``loss_mask``/``logprobs`` are empty when ``with_tokens`` was false (capture level
    below ``tokens``): the structure is kept, the token arrays are empty by construction.
    """

    node_ids: list[int]
    input_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    prompt_len: int
    turn_lengths: list[int]
    role: str = AGENT
    findings: list[dict[str, Any]] = field(default_factory=list)
    mask_ones: int | None = field(default=None, repr=False, compare=False)  # known count of 1s in loss_mask

    @property
    def root_id(self) -> int:
        """Id of the path's root node."""
        return self.node_ids[0]

    @property
    def n_turns(self) -> int:
        """Number of calls on the path."""
        return len(self.node_ids)

    @property
    def n_trainable(self) -> int:
        """Number of positions with loss mask 1."""
        return self.mask_ones if self.mask_ones is not None else sum(self.loss_mask)


def _turn_length(node: TurnNode, with_tokens: bool) -> int:
    if with_tokens and node.has_ids:
        return len(node.sampled_ids)
    usage = node.usage or {}
    value = usage.get("completion_tokens")
    return int(value) if isinstance(value, int) else len(node.sampled_ids)


def _flatten(nodes: list[TurnNode]) -> tuple[list[int], list[int], list[float], int | None]:
    """Input ids, loss mask, logprobs, and the number of 1s in the mask when the ranges show it."""
    leaf = nodes[-1]
    input_ids = leaf.prompt_ids + leaf.sampled_ids
    mask = [0] * len(input_ids)  # filled by slice assignment: no per-token Python loop
    logprobs = [0.0] * len(input_ids)
    ones: int | None = 0  # the sampled ranges of a path are disjoint and ascending; else count at the end
    reach = 0
    for node in nodes:
        start = len(node.prompt_ids)
        end = start + len(node.sampled_ids)
        if ones is not None and reach <= start and end <= len(input_ids):
            ones, reach = ones + end - start, end
        else:
            ones = None
        mask[start:end] = [1] * (end - start)
        lps = node.sampled_logprobs
        if lps is not None and len(lps) == len(node.sampled_ids):
            logprobs[start:end] = [float(x) for x in lps]
    return input_ids, mask, logprobs, ones


def build_sequences(graph: RolloutGraph, *, with_tokens: bool = True) -> list[PathSequence]:
    """One sequence per root-to-leaf path, in the leaves' arrival order (roles not yet assigned).

    Args:
        graph: the rollout's prefix graph.
        with_tokens: fill the token arrays (only meaningful when the graph was built on token ids).

    Returns:
        The sequences.
    """
    use_tokens = with_tokens and graph.mode == "tokens"
    out = []
    for path in graph.paths():
        nodes = [graph.get(i) for i in path]
        if use_tokens:
            input_ids, mask, logprobs, ones = _flatten(nodes)
            prompt_len = len(nodes[0].prompt_ids)
        else:
            input_ids, mask, logprobs, prompt_len, ones = [], [], [], 0, 0
        out.append(
            PathSequence(
                node_ids=list(path),
                input_ids=input_ids,
                loss_mask=mask,
                logprobs=logprobs,
                prompt_len=prompt_len,
                turn_lengths=[_turn_length(n, use_tokens) for n in nodes],
                mask_ones=ones,
            )
        )
    return out


def assign_roles(graph: RolloutGraph, sequences: list[PathSequence]) -> list[str]:
    """Label each sequence ``agent``, ``auxiliary`` or ``discarded`` by structure; sets ``.role``.

    Args:
        graph: the prefix graph the sequences came from.
        sequences: the sequences, from ``build_sequences``.

    Returns:
        The roles, in the sequences' order.
    """
    def has_tools(seq: PathSequence) -> bool:
        return any(graph.get(i).n_tools > 0 for i in seq.node_ids)

    live = [s for s in sequences if not graph.is_discarded(s.node_ids[-1])]
    any_tools = any(has_tools(s) for s in live)
    roles = []
    for seq in sequences:
        if graph.is_discarded(seq.node_ids[-1]):
            role = DISCARDED
        elif not any_tools or has_tools(seq):
            role = AGENT
        else:
            role = AUXILIARY
        seq.role = role
        roles.append(role)
    return roles
