"""Loading tasks from local JSONL / parquet files and folders (the Hub code path), with column maps."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rollout_dataset.errors import TaskSourceError
from rollout_dataset.tasks import load_task_source, load_tasks, select_task, warn_of_held_out_leaks

INSTRUCTION = "Print the input doubled.\n\nExample 1\nInput:\n2\nOutput:\n4\n"


def _rows(n: int = 4) -> list[dict]:
    return [
        {
            "id": f"double-{i}",
            "statement": INSTRUCTION.replace("doubled", f"doubled ({i})"),
            "tests": [{"input": f"{i + 10}\n", "output": f"{2 * (i + 10)}\n"}, {"input": "-3\n", "output": "-6\n"}],
            "solution": "print(2 * int(input()))",
        }
        for i in range(n)
    ]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _write_parquet(path, rows):
    table = pa.Table.from_pylist([{**r, "tests": json.dumps(r["tests"])} for r in rows])
    pq.write_table(table, path)
    return path


def test_jsonl_file_loads_with_default_column_names(tmp_path):
    path = _write_jsonl(tmp_path / "tasks.jsonl", _rows())
    tasks = load_task_source(str(path))
    assert [t.task_id for t in tasks] == ["double-0", "double-1", "double-2", "double-3"]
    first = tasks[0]
    assert first.held_out_tests[0].input == "10\n" and first.held_out_tests[0].output == "20\n"
    assert first.reference_solution == "print(2 * int(input()))"
    assert first.source == f"file:{path.resolve()}"


def _leaky_task_file(tmp_path):
    rows = _rows(2)
    rows[1]["tests"][0] = {"input": "110\n", "output": "220\n"}  # held-out test 0 of double-1
    rows[1]["statement"] += "\nFor example 110 gives 220.\n"
    return _write_jsonl(tmp_path / "tasks.jsonl", rows)


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def test_a_task_whose_statement_shows_a_held_out_test_is_warned_of_once_per_process(tmp_path, caplog):
    task = load_task_source(str(_leaky_task_file(tmp_path)))[1]
    with caplog.at_level("WARNING", logger="rollout_dataset.tasks.loader"):
        first = warn_of_held_out_leaks(task)
        again = warn_of_held_out_leaks(task)  # the next rollout on the same task: no second warning
    assert first == again and len(first) == 2
    assert len(_warnings(caplog)) == 2 and all("task double-1: held-out test 0" in w for w in _warnings(caplog))


def test_clean_tasks_are_not_warned_of(tmp_path, caplog):
    tasks = load_tasks(str(_leaky_task_file(tmp_path)), n_prompts=2) + load_tasks("builtin", n_prompts=64)
    with caplog.at_level("WARNING", logger="rollout_dataset.tasks.loader"):
        problems = [warn_of_held_out_leaks(t) for t in tasks if t.task_id != "double-1"]
    assert problems == [[]] * (len(tasks) - 1) and _warnings(caplog) == []


def test_examples_are_read_from_the_instruction_when_there_is_no_visible_test_column(tmp_path):
    tasks = load_task_source(str(_write_jsonl(tmp_path / "t.jsonl", _rows(1))))
    assert [(v.input, v.output) for v in tasks[0].visible_tests] == [("2\n", "4\n")]


def test_parquet_file_with_tests_as_json_text_loads(tmp_path):
    tasks = load_task_source(str(_write_parquet(tmp_path / "tasks.parquet", _rows())))
    assert len(tasks) == 4 and tasks[2].held_out_tests[1].output == "-6\n"


def test_column_map_renames_columns(tmp_path):
    rows = [{"pid": r["id"], "question": r["statement"], "cases": {"inputs": ["1\n"], "outputs": ["2\n"]}} for r in _rows(2)]
    path = _write_jsonl(tmp_path / "odd.jsonl", rows)
    tasks = load_task_source(str(path), column_map={"task_id": "pid", "tests": "cases"})
    assert tasks[1].task_id == "double-1" and tasks[1].held_out_tests[0].output == "2\n"


def test_missing_required_column_names_the_file_and_the_column(tmp_path):
    path = _write_jsonl(tmp_path / "no_tests.jsonl", [{"id": "a", "statement": "x"}])
    with pytest.raises(TaskSourceError, match=r"no_tests\.jsonl.*missing column for tests"):
        load_task_source(str(path))


def test_a_mapped_column_that_does_not_exist_is_named(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _rows(1))
    with pytest.raises(TaskSourceError, match=r"t\.jsonl: column 'problem_text' \(mapped to instruction\) is missing"):
        load_task_source(str(path), column_map={"instruction": "problem_text"})


def test_a_bad_json_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_rows(1)[0]) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(TaskSourceError, match=r"bad\.jsonl:2: not valid JSON"):
        load_task_source(str(path))


def test_malformed_tests_name_the_row_and_column(tmp_path):
    rows = _rows(2)
    rows[1]["tests"] = [{"input": "1\n"}]
    with pytest.raises(TaskSourceError, match=r"row 1: column 'tests'\[0\]: each test needs"):
        load_task_source(str(_write_jsonl(tmp_path / "t.jsonl", rows)))


def test_repeated_ids_are_refused(tmp_path):
    rows = _rows(2)
    rows[1]["id"] = rows[0]["id"]
    with pytest.raises(TaskSourceError, match="repeats row 0"):
        load_task_source(str(_write_jsonl(tmp_path / "t.jsonl", rows)))


def test_a_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(TaskSourceError, match="no such file or folder"):
        load_task_source(str(tmp_path / "nope.jsonl"))


def test_tasks_without_an_id_get_a_stable_hash_id(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "id"} for r in _rows(2)]
    path = _write_jsonl(tmp_path / "t.jsonl", rows)
    ids = [t.task_id for t in load_task_source(str(path))]
    assert ids == [t.task_id for t in load_task_source(str(path))] and len(set(ids)) == 2


def test_a_local_folder_loads_through_the_datasets_code_path(tmp_path):
    folder = tmp_path / "ds"
    (folder / "data").mkdir(parents=True)
    _write_parquet(folder / "data" / "train-00000-of-00001.parquet", _rows(3))
    tasks = load_task_source(str(folder))
    assert sorted(t.task_id for t in tasks) == ["double-0", "double-1", "double-2"]


def test_a_saved_dataset_folder_loads_with_a_split(tmp_path):
    import datasets

    rows = [{**r, "tests": json.dumps(r["tests"])} for r in _rows(3)]
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "saved"))
    tasks = load_task_source(f"{tmp_path / 'saved'}:test")
    assert [t.task_id for t in tasks] == ["double-0", "double-1", "double-2"]


def test_file_tasks_are_selected_deterministically_and_indexed(tmp_path):
    path = str(_write_jsonl(tmp_path / "t.jsonl", _rows(4)))
    a = load_tasks(path, n_prompts=3, seed=1)
    assert [t.task_id for t in a] == [t.task_id for t in load_tasks(path, n_prompts=3, seed=1)]
    assert select_task(a, 2) is a[2]


def test_a_malformed_hub_source_is_refused_before_any_download():
    with pytest.raises(TaskSourceError, match=r"expected hf:ORG/NAME"):
        load_task_source("hf:too/many/parts")
