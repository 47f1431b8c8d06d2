"""`SharedTraceRecorder`: the state several proxy processes share per session, how each locker
repairs what a killed worker or an outside edit left, and `records_by_others` (what a process reads
back of the others' records). Two recorders on one directory stand for two worker processes (each
has its own descriptors and its own view; only the files are shared).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rollout_dataset.errors import TraceIntegrityError
from rollout_dataset.proxy import read_trace
from rollout_dataset.proxy.recorder import TraceRecorder, chained_line
from rollout_dataset.proxy.shared_recorder import SharedTraceRecorder


def _write(recorder: SharedTraceRecorder, session: str, n: object) -> int:
    index = recorder.next_index(session)
    recorder.write(session, {"index": index, "n": n, "notes": []})
    return index


def _state(recorder: SharedTraceRecorder, session: str) -> dict:
    return json.loads(recorder.state_path(session).read_bytes())


def _put_state(recorder: SharedTraceRecorder, session: str, state: dict) -> None:
    recorder.state_path(session).write_bytes(json.dumps(state).encode().ljust(4096))


def test_two_recorders_on_one_directory_write_one_order_and_one_chain(tmp_path: Path):
    one, other = SharedTraceRecorder(tmp_path), SharedTraceRecorder(tmp_path)
    for n in range(6):
        _write(one if n % 2 else other, "s", n)
    records = read_trace(one.path("s"), seal=other.seal("s"))
    assert [r["n"] for r in records] == list(range(6))
    assert [r["index"] for r in records] == list(range(6))
    assert one.seal("s") == other.seal("s")


def test_an_index_reserved_by_one_recorder_is_never_handed_out_by_another(tmp_path: Path):
    one, other = SharedTraceRecorder(tmp_path), SharedTraceRecorder(tmp_path)
    assert [one.next_index("s") for _ in range(3)] == [0, 1, 2]  # reserved; their calls never end
    assert other.next_index("s") == 3


def test_an_append_whose_writer_died_before_saying_so_is_adopted(tmp_path: Path):
    one, other = SharedTraceRecorder(tmp_path), SharedTraceRecorder(tmp_path)
    _write(one, "s", 0)
    state = _state(one, "s")
    # a worker saved its pending append, appended the whole line, and was killed before saving it as written
    line, digest = chained_line({"index": 1, "n": 1, "notes": []}, None, False, state["head"], [])
    state["pending"] = {"size": state["size"] + len(line), "head": digest}
    state["next_index"] = 2
    _put_state(one, "s", state)
    with open(one.path("s"), "ab") as f:
        f.write(line)
    _write(other, "s", 2)
    records = read_trace(one.path("s"), seal=other.seal("s"))
    assert [r["n"] for r in records] == [0, 1, 2]
    assert [r["index"] for r in records] == [0, 1, 2]
    assert records[-1]["notes"] == []  # nothing was lost or changed: nothing to say
    assert not list(tmp_path.glob("*.cut-*"))


def test_a_pending_append_that_never_reached_the_file_is_dropped(tmp_path: Path):
    one, other = SharedTraceRecorder(tmp_path), SharedTraceRecorder(tmp_path)
    _write(one, "s", 0)
    state = _state(one, "s")
    state["pending"] = {"size": state["size"] + 300, "head": "0" * 64}  # killed before its write
    state["next_index"] = 2
    _put_state(one, "s", state)
    _write(other, "s", 2)
    records = read_trace(one.path("s"), seal=other.seal("s"))
    assert [r["n"] for r in records] == [0, 2]
    assert [r["index"] for r in records] == [0, 2]  # index 1 died with its worker: never reused
    assert records[-1]["notes"] == []


def test_a_trace_file_changed_outside_the_proxies_is_read_again_and_the_next_record_says_so(tmp_path: Path):
    one, other = SharedTraceRecorder(tmp_path), SharedTraceRecorder(tmp_path)
    for n in range(3):
        _write(one, "s", n)
    lines = one.path("s").read_bytes().splitlines(keepends=True)
    one.path("s").write_bytes(b"".join(lines[:2]))  # an outside hand cut the last record
    assert _write(other, "s", 3) == 3  # the next index never goes back
    records = read_trace(one.path("s"), seal=other.seal("s"))
    assert [r["n"] for r in records] == [0, 1, 3]
    assert any("changed outside the proxy" in note for note in records[-1]["notes"])


def test_the_seal_catches_a_last_record_cut_off_after_the_sessions_last_call(tmp_path: Path):
    one, other = SharedTraceRecorder(tmp_path), SharedTraceRecorder(tmp_path)
    for n in range(3):
        _write(one, "s", n)
    lines = one.path("s").read_bytes().splitlines(keepends=True)
    one.path("s").write_bytes(b"".join(lines[:2]))  # no later record will carry a note about it
    assert other.seal("s").records == 3  # what the proxies wrote, not what the file holds now
    with pytest.raises(TraceIntegrityError, match="3"):
        read_trace(one.path("s"), seal=other.seal("s"))


def test_an_unreadable_state_block_is_rebuilt_from_the_trace_file(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    one, other = SharedTraceRecorder(tmp_path), SharedTraceRecorder(tmp_path)
    for n in range(2):
        _write(one, "s", n)
    one.state_path("s").write_bytes(b"\x00garbage" * 100)
    _write(other, "s", 2)
    records = read_trace(one.path("s"), seal=other.seal("s"))
    assert [r["index"] for r in records] == [0, 1, 2]
    assert "is not a state block" in caplog.text


def test_the_state_block_stays_one_block_however_many_notes_pile_up(tmp_path: Path):
    one = SharedTraceRecorder(tmp_path)
    _write(one, "s", 0)
    for n in range(40):  # each outside edit is noted for the next record; no record is written meanwhile
        with open(one.path("s"), "ab") as f:
            f.write(json.dumps({"outside": n}).encode() + b"\n")
        one.next_index("s")
        assert os.path.getsize(one.state_path("s")) == 4096
    notes = _state(one, "s")["notes"]
    assert "earlier notes were dropped" in notes[0] and "changed outside the proxy" in notes[-1]
    _write(one, "s", 1)
    last = json.loads(one.path("s").read_bytes().splitlines()[-1])  # (the outside lines break the chain)
    assert last["notes"] == notes


def test_a_recorder_keeps_at_most_max_open_files_trace_and_state_files_open(tmp_path: Path):
    def open_files() -> tuple[int, int]:
        paths = [os.path.realpath(fd) for fd in Path("/proc/self/fd").iterdir() if fd.exists()]
        return (sum(p.endswith(".jsonl") and str(tmp_path) in p for p in paths),
                sum(p.endswith(".json") and str(tmp_path) in p for p in paths))

    recorder = SharedTraceRecorder(tmp_path, max_open_files=2)
    peak = (0, 0)
    for n in range(9):
        _write(recorder, f"s{n % 3}", n)
        peak = tuple(map(max, peak, open_files()))
    assert peak == (2, 2)
    for n in range(3):
        assert [r["n"] for r in read_trace(recorder.path(f"s{n}"), seal=recorder.seal(f"s{n}"))] == [n, n + 3, n + 6]
    recorder.close()
    assert open_files() == (0, 0)


def test_records_by_others_gives_each_record_another_recorder_wrote_once(tmp_path: Path):
    one, other = SharedTraceRecorder(tmp_path), SharedTraceRecorder(tmp_path)
    assert list(one.records_by_others("s")) == []  # no file yet
    _write(one, "s", "mine")
    _write(other, "s", "theirs 1")
    _write(one, "s", "mine again")
    _write(other, "s", "theirs 2")
    assert [r["n"] for r in one.records_by_others("s")] == ["theirs 1", "theirs 2"]
    assert list(one.records_by_others("s")) == []  # nothing new
    _write(other, "s", "theirs 3")
    with open(one.path("s"), "ab") as f:
        f.write(b'{"index": 9, "n": "half writ')  # a line being written: left for the next look
    assert [r["n"] for r in one.records_by_others("s")] == ["theirs 3"]


def test_records_by_others_reads_a_file_that_shrank_again_from_its_start(tmp_path: Path):
    one, other = SharedTraceRecorder(tmp_path), SharedTraceRecorder(tmp_path)
    for n in range(3):
        _write(other, "s", n)
    assert len(list(one.records_by_others("s"))) == 3
    lines = one.path("s").read_bytes().splitlines(keepends=True)
    one.path("s").write_bytes(b"".join(lines[:1]))
    assert [r["n"] for r in one.records_by_others("s")] == [0]


def test_a_single_process_recorder_reads_back_what_it_found_and_never_its_own_lines(tmp_path: Path):
    earlier = TraceRecorder(tmp_path)  # the proxy's run before a restart
    for n in range(2):
        earlier.write("s", {"index": earlier.next_index("s"), "n": n, "notes": []})
    earlier.close()
    again = TraceRecorder(tmp_path)
    assert [r["n"] for r in again.records_by_others("s")] == [0, 1]
    again.write("s", {"index": again.next_index("s"), "n": 2, "notes": []})
    assert list(again.records_by_others("s")) == []


def test_own_lines_remembered_between_two_looks_stay_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("rollout_dataset.proxy.recorder._MAX_OWN_LINES", 3)
    recorder = TraceRecorder(tmp_path)
    assert list(recorder.records_by_others("s")) == []  # the first look: from now on own lines are noted
    for n in range(7):  # calls that never look (e.g. non-chat calls in on-policy mode)
        recorder.write("s", {"index": recorder.next_index("s"), "n": n, "notes": []})
        assert len(recorder._followed["s"].own) <= 3
    # the forgotten own lines come back once (a caller takes them in stride); the remembered ones do not
    assert [r["n"] for r in recorder.records_by_others("s")] == [0, 1, 2, 3, 4, 5]
    assert list(recorder.records_by_others("s")) == []


def test_records_by_others_passes_over_lines_that_are_not_json_objects(tmp_path: Path):
    one, other = SharedTraceRecorder(tmp_path), SharedTraceRecorder(tmp_path)
    assert list(one.records_by_others("s")) == []
    _write(other, "s", "before")
    with open(one.path("s"), "ab") as f:
        f.write(b'{"broken\n[1, 2]\n\n')  # a corrupt line, a JSON value that is not a record, a blank one
    _write(other, "s", "after")  # (noted as an outside change, and chained on)
    assert [r["n"] for r in one.records_by_others("s")] == ["before", "after"]


def test_a_record_written_whole_stands_when_saving_the_state_after_it_fails(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch):
    recorder = SharedTraceRecorder(tmp_path)
    save = recorder._save

    def failing_after_the_append(session, state):  # the state file's last write of the call fails (EIO)
        if state.pending is None and state.records == 1:
            raise OSError(5, "Input/output error")
        save(session, state)

    monkeypatch.setattr(recorder, "_save", failing_after_the_append)
    _write(recorder, "s", 0)  # no error: the record is in the file, so the harness is not told it failed
    monkeypatch.undo()
    _write(SharedTraceRecorder(tmp_path), "s", 1)  # the next writer adopts it and chains after it
    assert [r["n"] for r in read_trace(recorder.path("s"), seal=recorder.seal("s"))] == [0, 1]
