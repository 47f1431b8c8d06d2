"""The viewer loads a tokenizer only from what it was given: a Hub id or an outside path named in a
rollout's own files is refused without a request, and the ids are shown undecoded with the reason."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rollout_dataset.viewer.sources import ArtifactSource
from rollout_dataset.tokenizers import BUILTIN_TOKENIZER_DIR


@pytest.fixture
def source(tmp_path: Path) -> ArtifactSource:
    (tmp_path / "root").mkdir()
    return ArtifactSource(tmp_path / "root")


@pytest.mark.parametrize("spec", ["attacker/evil-tokenizer", "/etc", "../outside"])
def test_a_tokenizer_named_outside_the_root_is_never_loaded(source, monkeypatch, spec):
    import rollout_dataset.tokenizers as tokenizers

    def refuse(*args, **kwargs):
        raise AssertionError(f"load_tokenizer called with {args}")

    monkeypatch.setattr(tokenizers, "load_tokenizer", refuse)
    tokenizer, error = source.tokenizer(spec)
    assert tokenizer is None and "not among the files given to the viewer" in error


def test_a_tokenizer_folder_inside_the_root_and_the_builtin_one_load(source):
    inside = Path(source.root) / "tokenizer"
    shutil.copytree(BUILTIN_TOKENIZER_DIR, inside)
    assert source.tokenizer(str(inside))[0] is not None
    assert source.tokenizer("builtin")[0] is not None
