"""Artifact folders -> a multi-config parquet dataset with its dataset card.

Public API: `build`, `BuildResult`, `append_to_dataset` (`build --append`), `build_on_ray`
(`build --executor ray`), and the readers a user needs to get exact arrays back:
`turn_prompt_ids`, `turn_token_arrays`, `trace_request`, `sequence_to_trl`; the trainer contracts
`grpo_rollout_output` (TRL rollout_func with env_mask), `sft_inputs` (input_ids + assistant_masks) and
`prompt_completion` (see `contracts`, also pasted into the card). The config/column declarations live
in `configs` (`CONFIG_NAMES`, `features(config)`).

A build streams in two public steps any executor can drive: `build_part` (a slice of artifact folders
-> its shard files + the card's mergeable running aggregates, `CardAggregates`) and `finish_dataset`
(the merged part results -> tokenizer files and the card); `build` runs the parts in this process or
in `workers` processes and swaps the finished folder in.
"""

from __future__ import annotations

from rollout_dataset.builder.aggregates import CardAggregates
from rollout_dataset.builder.build import BuildResult, build, find_artifact_dirs, finish_dataset
from rollout_dataset.builder.append import append_to_dataset
from rollout_dataset.builder.distributed import build_on_ray
from rollout_dataset.builder.card import render_card
from rollout_dataset.builder.contracts import grpo_rollout_output, prompt_completion, sft_inputs
from rollout_dataset.builder.configs import CONFIG_NAMES, DEFAULT_CONFIG, arrow_schema, features
from rollout_dataset.builder.parts import PartResult, PartSpec, build_part
from rollout_dataset.builder.readers import sequence_to_trl, trace_request, turn_prompt_ids, turn_token_arrays

__all__ = [
    "build",
    "BuildResult",
    "append_to_dataset",
    "build_on_ray",
    "find_artifact_dirs",
    "build_part",
    "finish_dataset",
    "PartSpec",
    "PartResult",
    "CardAggregates",
    "render_card",
    "CONFIG_NAMES",
    "DEFAULT_CONFIG",
    "arrow_schema",
    "features",
    "turn_prompt_ids",
    "turn_token_arrays",
    "trace_request",
    "sequence_to_trl",
    "grpo_rollout_output",
    "sft_inputs",
    "prompt_completion",
]
