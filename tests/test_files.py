"""`rollout_dataset.files`: the one atomic write, and folders shipped as bytes."""

from __future__ import annotations

import os
import stat

import pytest

from rollout_dataset.files import current_umask, folder_files, write_bytes_atomic, write_folder_files, write_text_atomic


def test_an_atomic_write_replaces_a_hard_linked_file_instead_of_writing_through_it(tmp_path):
    earlier = tmp_path / "earlier.md"
    earlier.write_text("old card\n")
    linked = tmp_path / "README.md"
    os.link(earlier, linked)  # as a staged dataset shares the earlier dataset's files
    write_text_atomic(linked, "new card\n")
    assert linked.read_text() == "new card\n"
    assert earlier.read_text() == "old card\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "earlier.md"]  # no temporary left


def test_a_failed_atomic_write_leaves_the_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "doc.json"
    target.write_bytes(b"{}")

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_bytes_atomic(target, b'{"new": 1}')
    assert target.read_bytes() == b"{}"
    assert [p.name for p in tmp_path.iterdir()] == ["doc.json"]


def test_lone_surrogates_are_written_as_their_escape(tmp_path):
    write_text_atomic(tmp_path / "t.txt", "a\udcffb")
    assert (tmp_path / "t.txt").read_bytes() == b"a\\udcffb"


def test_a_folder_round_trips_as_bytes_and_paths_cannot_leave_the_destination(tmp_path):
    src = tmp_path / "src"
    (src / "data" / "summary").mkdir(parents=True)
    (src / "data" / "summary" / "a.parquet").write_bytes(b"PAR1")
    (src / "README.md").write_text("card")
    files = folder_files(src)
    assert files == {"README.md": b"card", "data/summary/a.parquet": b"PAR1"}
    write_folder_files(tmp_path / "dst", files)
    assert folder_files(tmp_path / "dst") == files
    with pytest.raises(ValueError, match="escapes"):
        write_folder_files(tmp_path / "dst", {"../outside.txt": b"x"})
    assert not (tmp_path / "outside.txt").exists()


def test_a_full_disk_during_an_atomic_write_names_the_file_it_was_writing(tmp_path, monkeypatch):
    target = tmp_path / "batch_result.json"
    target.write_bytes(b"{}")

    def full_disk(fd):  # the kernel reports a full disk at the flush of delayed-allocated data
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError) as caught:
        write_bytes_atomic(target, b'{"done": true}', fsync=True)
    assert caught.value.errno == 28 and caught.value.filename == str(target)
    assert str(target) in str(caught.value)
    assert target.read_bytes() == b"{}" and sorted(p.name for p in tmp_path.iterdir()) == ["batch_result.json"]


@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_an_atomic_write_gives_the_mode_the_umask_allows_not_mkstemps_0600(tmp_path, umask, expected):
    previous = os.umask(umask)
    try:
        assert current_umask() == umask
        write_text_atomic(tmp_path / "README.md", "card\n")
        write_bytes_atomic(tmp_path / "private.bin", b"x", mode=0o600)
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "README.md").stat().st_mode) == expected
    assert stat.S_IMODE((tmp_path / "private.bin").stat().st_mode) == 0o600 & ~umask
