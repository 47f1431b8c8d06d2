"""Streaming parquet writing: one shard per config, written rollout by rollout.

Rows of each rollout become one small Arrow table (with the config's fixed schema); tables are
buffered until about `row_group_bytes` and then written as one row group, so memory stays bounded
by the buffer whatever the number of rollouts. Files are written for the Hub's viewer: zstd, page
index on, row groups of at most about 100 MB.

Encodings, per column kind (all lossless; `column_options` derives them from the Arrow schema, and
bench/dataset_build.py measures the alternatives side by side):

- scalar columns: dictionary encoding, zstd at Arrow's default level;
- token-id / mask lists: plain encoding (dictionary costs about a quarter more bytes), zstd level
  `LIST_LEVEL`;
- float32 lists (logprobs): BYTE_STREAM_SPLIT (the four bytes of each float stored as four
  streams, which zstd compresses better; values come back bit for bit, NaN included), zstd level
  `LIST_LEVEL`;
- lists of structs (chat messages): zstd level `TEXT_LEVEL` on their text leaves (about 45% smaller
  than the default level on conversations), `LIST_LEVEL` on the others;
- text and JSON-text columns: zstd level `TEXT_LEVEL` (saves about a fifth of their bytes; the whole
  build stays near 1.1x a bare pyarrow write, measured).

`TEXT_LEVEL` is 15, not 19: on 10-turn / 2k-context synthetic rollouts of real code text, level 19
made the trace, conversations and samples columns 0.7-1.2% smaller than level 15 for 4-5x their
compression CPU, which was about half of the whole build's CPU (issue 14: build speed).
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from rollout_dataset.builder.configs import CONFIG_NAMES, arrow_schema

__all__ = ["ROW_GROUP_BYTES", "SHARD_BYTES", "TEXT_LEVEL", "LIST_LEVEL", "column_options", "shard_name",
           "build_prefix", "part_shard_name", "ConfigWriter", "DatasetWriter", "PartWriter", "copy_filtered"]

ROW_GROUP_BYTES = 8 * 1024 * 1024  # per config; bounds the build's buffers (9 configs: ~72 MB at most)
SHARD_BYTES = 256 * 1024 * 1024  # a build rolls to a new shard past this many parquet bytes (compact's goal too)
TEXT_LEVEL = 15  # zstd level of string columns (19 cost 4x the CPU for ~1% fewer bytes, measured)
LIST_LEVEL = 12  # zstd level of list columns (token ids, masks, logprobs)
_WRITE_OPTIONS: dict[str, Any] = {"compression": "zstd", "write_page_index": True, "write_statistics": True}


def column_options(schema: pa.Schema) -> dict[str, Any]:
    """The per-column parquet writer options of a config (see the module docstring).

    Args:
        schema: the config's Arrow schema.

    Returns:
        Keyword arguments for `pyarrow.parquet.ParquetWriter`: ``use_dictionary``,
        ``compression_level`` and ``column_encoding``, keyed by column (leaf paths for lists).
    """
    dictionary, levels, encodings = [], {}, {}
    for f in schema:
        if pa.types.is_list(f.type) and pa.types.is_struct(f.type.value_type):
            for leaf, leaf_type in _leaves(f"{f.name}.list.element", f.type.value_type):
                text = pa.types.is_string(leaf_type) or pa.types.is_large_string(leaf_type)
                levels[leaf] = TEXT_LEVEL if text else LIST_LEVEL  # chat messages: text leaves
        elif pa.types.is_list(f.type):
            leaf = f"{f.name}.list.element"
            levels[leaf] = LIST_LEVEL
            if pa.types.is_floating(f.type.value_type):
                encodings[leaf] = "BYTE_STREAM_SPLIT"
        else:
            dictionary.append(f.name)
            if pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
                levels[f.name] = TEXT_LEVEL
    return {"use_dictionary": dictionary, "compression_level": levels, "column_encoding": encodings}


def _leaves(path: str, t: pa.DataType) -> Iterator[tuple[str, pa.DataType]]:
    """The parquet leaf column paths (and types) under a nested Arrow type."""
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            yield from _leaves(f"{path}.{t.field(i).name}", t.field(i).type)
    elif pa.types.is_list(t):
        yield from _leaves(f"{path}.list.element", t.value_type)
    else:
        yield path, t


def shard_name() -> str:
    """A unique shard file name: ``<UTC timestamp>-<uuid4 hex>.parquet`` (sorts by time)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{stamp}-{uuid.uuid4().hex}.parquet"


def build_prefix() -> str:
    """The shard-name prefix of one build: ``<UTC timestamp>-<uuid4 hex>`` (sorts by time, like `shard_name`)."""
    return shard_name()[: -len(".parquet")]


def part_shard_name(prefix: str, part: int, roll: int) -> str:
    """The name of a build part's shard: ``<prefix>-p<part>-<roll>.parquet``, zero-padded.

    Names sort as the rows were read: by build (time), then part (the contiguous slice of the
    sorted inputs it built), then roll (the shard's number within its part); so the dataset's rows
    come in the same order whatever the number of processes that built it.

    Args:
        prefix: from `build_prefix`.
        part: the part's index.
        roll: the shard's index within the part.

    Returns:
        The file name.
    """
    return f"{prefix}-p{part:05d}-{roll:04d}.parquet"


#: small tables buffered before they are combined into one: a one-row table of a wide config holds tens
#: of kilobytes of per-array overhead for a few hundred bytes of data, so thousands of them would hold
#: far more memory than their `nbytes` says (the summary config's buffer grew with the rollout count).
COMBINE_TABLES = 256


class ConfigWriter:
    """Appends rows of one config to one parquet shard, buffering at most `row_group_bytes`.

    Every `COMBINE_TABLES` added tables are combined into one contiguous table, so the buffer's
    memory is its data's, whatever the size of each addition.

    Args:
        config: the config name (decides the schema).
        path: the shard file to write.
        row_group_bytes: flush a row group when the buffered Arrow tables reach this size.
    """

    def __init__(self, config: str, path: str | Path, row_group_bytes: int = ROW_GROUP_BYTES) -> None:
        self.config = config
        self.path = Path(path)
        self.schema = arrow_schema(config)
        self.row_group_bytes = row_group_bytes
        self.rows = 0
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self._uncombined = 0  # tables at the end of the buffer not yet combined
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._naming_the_file():
            self._writer = pq.ParquetWriter(str(self.path), self.schema, **column_options(self.schema),
                                            **_WRITE_OPTIONS)

    @contextlib.contextmanager
    def _naming_the_file(self) -> Iterator[None]:
        """An OS error of pyarrow's writer (a full disk) names no file: name the shard (same errno)."""
        try:
            yield
        except OSError as exc:
            if exc.filename is not None or exc.errno is None:
                raise
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None

    def add(self, rows: list[dict[str, Any]]) -> None:
        """Add the rows of one rollout.

        Args:
            rows: dicts keyed by the config's columns.
        """
        if not rows:
            return
        self.add_table(pa.Table.from_pylist(rows, schema=self.schema))

    def add_table(self, table: pa.Table) -> None:
        """Add an Arrow table that already has the config's schema.

        Args:
            table: the rows.
        """
        if not len(table):
            return
        self._buffer.append(table)
        self._buffered += max(table.nbytes, 1)
        self._uncombined += 1
        self.rows += len(table)
        if self._buffered >= self.row_group_bytes:
            self.flush()
        elif self._uncombined >= COMBINE_TABLES:
            tail = pa.concat_tables(self._buffer[-self._uncombined:]).combine_chunks()
            self._buffer[-self._uncombined:] = [tail]
            self._uncombined = 0

    @property
    def buffered(self) -> int:
        """Arrow bytes of the rows added but not yet written (0 right after a row group is written)."""
        return self._buffered

    def flush(self) -> None:
        """Write the buffered rows as one row group."""
        if self._buffer:
            table = pa.concat_tables(self._buffer).combine_chunks()
            with self._naming_the_file():
                self._writer.write_table(table, row_group_size=len(table))
            self._buffer, self._buffered, self._uncombined = [], 0, 0

    def close(self) -> None:
        """Flush and close the file (a config with no rows still gets a valid, empty shard)."""
        self.flush()
        with self._naming_the_file():
            self._writer.close()


class DatasetWriter:
    """One `ConfigWriter` per config under ``<out_dir>/data/<config>/<shard>.parquet``.

    Args:
        out_dir: the dataset folder.
        row_group_bytes: see `ConfigWriter`.
    """

    def __init__(self, out_dir: str | Path, row_group_bytes: int = ROW_GROUP_BYTES) -> None:
        self.out_dir = Path(out_dir)
        name = shard_name()
        self.writers = {c: ConfigWriter(c, self.out_dir / "data" / c / name, row_group_bytes) for c in CONFIG_NAMES}

    def add(self, rows_by_config: dict[str, list[dict[str, Any]]]) -> None:
        """Add one rollout's rows (every config).

        Raises:
            ValueError: a value does not fit its column's type (the message names config and column).
        """
        tables = {}
        for config, rows in rows_by_config.items():  # convert all first: a bad value adds nothing
            try:
                tables[config] = pa.Table.from_pylist(rows, schema=self.writers[config].schema) if rows else None
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
                column = next((c for c in self.writers[config].schema.names
                               if not _fits(rows, c, self.writers[config].schema)), "?")
                raise ValueError(f"config {config!r}, column {column!r}: {exc}") from None
        for config, table in tables.items():
            if table is not None:
                self.writers[config].add_table(table)

    def close(self) -> dict[str, int]:
        """Close every shard.

        Returns:
            Rows written per config.
        """
        for w in self.writers.values():
            w.close()
        return {c: w.rows for c, w in self.writers.items()}

    def __enter__(self) -> "DatasetWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class PartWriter:
    """The shards of one build part: per config, row groups of at most `row_group_bytes` and shards
    rolled past `shard_bytes`, named by `part_shard_name` under ``<out_dir>/data/<config>/``.

    A config's shard is opened at its first row (a part writes no empty shard; the build adds one
    empty shard for a config that has no rows at all). Memory is bounded by the buffers: at most
    `row_group_bytes` per config, whatever the number of rollouts.

    Args:
        out_dir: the dataset (staging) folder.
        prefix: the build's shard-name prefix (`build_prefix`).
        part: the part's index.
        row_group_bytes: see `ConfigWriter`.
        shard_bytes: start a new shard once one holds this many parquet bytes.
    """

    def __init__(self, out_dir: str | Path, prefix: str, part: int, *, row_group_bytes: int = ROW_GROUP_BYTES,
                 shard_bytes: int = SHARD_BYTES) -> None:
        self.out_dir = Path(out_dir)
        self.prefix, self.part = prefix, part
        self.row_group_bytes, self.shard_bytes = row_group_bytes, shard_bytes
        self.schemas = {c: arrow_schema(c) for c in CONFIG_NAMES}
        self.rows = {c: 0 for c in CONFIG_NAMES}
        self.shards: dict[str, list[Path]] = {c: [] for c in CONFIG_NAMES}
        self._open: dict[str, ConfigWriter] = {}

    def add(self, rows_by_config: dict[str, list[dict[str, Any]]]) -> None:
        """Add one rollout's rows (every config); a bad value adds nothing.

        Raises:
            ValueError: a value does not fit its column's type (the message names config and column).
        """
        tables = {}
        for config, rows in rows_by_config.items():
            if not rows:
                continue
            schema = self.schemas[config]
            try:
                tables[config] = pa.Table.from_pylist(rows, schema=schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
                column = next((c for c in schema.names if not _fits(rows, c, schema)), "?")
                raise ValueError(f"config {config!r}, column {column!r}: {exc}") from None
        for config, table in tables.items():
            self.add_table(config, table)

    def add_table(self, config: str, table: pa.Table) -> None:
        """Add rows of one config as an Arrow table with the config's schema.

        Args:
            config: the config name.
            table: the rows.
        """
        if not len(table):
            return
        writer = self._open.get(config)
        if writer is None:
            path = self.out_dir / "data" / config / part_shard_name(self.prefix, self.part, len(self.shards[config]))
            writer = self._open[config] = ConfigWriter(config, path, self.row_group_bytes)
            self.shards[config].append(path)
        writer.add_table(table)
        self.rows[config] += len(table)
        if not writer.buffered and writer.path.stat().st_size >= self.shard_bytes:
            writer.close()  # a row group was just written and the shard is full: the next rows open a new one
            del self._open[config]

    def close(self) -> dict[str, int]:
        """Flush and close every open shard.

        Returns:
            Rows written per config.
        """
        for writer in self._open.values():
            writer.close()
        self._open.clear()
        return dict(self.rows)


def _fits(rows: list[dict[str, Any]], column: str, schema: pa.Schema) -> bool:
    try:
        pa.array([r.get(column) for r in rows], type=schema.field(column).type)
        return True
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        return False


def _batches(path: str | Path) -> Iterator[pa.RecordBatch]:
    f = pq.ParquetFile(str(path))
    for i in range(f.num_row_groups):
        yield from f.read_row_group(i).to_batches()


def copy_filtered(src: str | Path, dst: str | Path, config: str, drop_rollout_ids: set[str]) -> int:
    """Copy a shard without the rows of some rollouts, one row group at a time.

    Args:
        src: the shard to read.
        dst: the shard to write (same schema and options).
        config: the config name.
        drop_rollout_ids: rollout ids whose rows are left out.

    Returns:
        The number of rows written.
    """
    import pyarrow.compute as pc

    w = ConfigWriter(config, dst)
    n = 0
    try:
        drop = pa.array(sorted(drop_rollout_ids), pa.string())
        for batch in _batches(src):
            table = pa.Table.from_batches([batch]).cast(w.schema)
            if len(drop):
                table = table.filter(pc.invert(pc.is_in(table["rollout_id"], value_set=drop)))
            w.add_table(table)
            n += len(table)
    finally:
        w.close()
    return n
