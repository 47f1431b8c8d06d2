"""A dataset ships what its card's snippets need, readable by whoever may read the folder.

A capture against a separately served local backend (a base URL, no --tokenizer) still names its
tokenizer (the server's `/v1/models` root), so the build stores `tokenizer/` and the training
template; every file the build writes gets the mode the umask allows, not mkstemp's 0600.
"""

from __future__ import annotations

import os
import stat

import pytest

from rollout_dataset.backend import make_policy, run_backend_in_thread
from rollout_dataset.builder import build
from rollout_dataset.builder.rows import tokenizer_name
from rollout_dataset.builder.training_template import TRAINING_TEMPLATE_FILE
from rollout_dataset.capture.pipeline import capture_rollout
from rollout_dataset.envs.registry import register_builtin_policies
from rollout_dataset.recipes.coding.config import CaptureConfig
from rollout_dataset.tokenizers import load_tokenizer


@pytest.fixture(scope="module")
def served_capture_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    register_builtin_policies()
    previous = os.umask(0o022)
    try:
        with run_backend_in_thread(tokenizer=load_tokenizer("builtin"), policy=make_policy("oracle"),
                                   served_model_name="local") as backend:
            result = capture_rollout(CaptureConfig(out_dir=root / "runs" / "r1", base_url=backend.base_url,
                                                   task_index=0, seed=0))
        assert result.ok, result.errors
        build([root / "runs"], root / "dataset")
    finally:
        os.umask(previous)
    return root / "dataset"


def test_a_capture_against_a_served_local_backend_ships_its_tokenizer_and_training_template(served_capture_dataset):
    stored = served_capture_dataset / "tokenizer"
    assert {"tokenizer.json", "chat_template.jinja", TRAINING_TEMPLATE_FILE} <= {p.name for p in stored.iterdir()}
    card = (served_capture_dataset / "README.md").read_text(encoding="utf-8")
    assert "chat_template_training.jinja" in card and "holds no tokenizer" not in card


@pytest.mark.parametrize("root, expected", [("builtin", "builtin"), ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B"),
                                            (".../my-model", "served-name"), ("../../etc", "served-name"),
                                            (None, "served-name")])
def test_a_served_model_s_root_names_the_tokenizer_only_when_it_is_builtin_or_a_hub_id(root, expected):
    art = {"task": {"config": {"base_url": "http://gpu-box:8000/v1", "tokenizer": None}},
           "summary": {"model": "served-name", "capture_level": "tokens",  # ids: a tokenizer to name
                       "provenance": {"model": {"id": "served-name", "root": root}}}}
    assert tokenizer_name(art) == expected


def test_every_file_of_a_built_dataset_is_readable_as_the_umask_allows(served_capture_dataset):
    files = [p for p in served_capture_dataset.rglob("*") if p.is_file()]
    assert any(p.name == "README.md" for p in files) and any(p.parent.name == "tokenizer" for p in files)
    modes = {str(p.relative_to(served_capture_dataset)): oct(stat.S_IMODE(p.stat().st_mode)) for p in files}
    assert set(modes.values()) == {"0o644"}, modes
