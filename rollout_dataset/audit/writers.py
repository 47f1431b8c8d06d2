"""Where audit results go: audit.json per artifact folder; for a built dataset an `audit` config
(parquet, one row per rollout, flat summary columns) with its YAML `configs` entry and a card section.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rollout_dataset.audit.metrics import QUANTILES
from rollout_dataset.builder.audit_card import (AUDIT_CONFIG, AUDIT_DATA_FILES, AUDIT_HEADING, audit_config_entry,
                                                audit_section)
from rollout_dataset.builder.card import code_span, one_line
from rollout_dataset.errors import ArtifactError

__all__ = ["write_audit_json", "AuditConfigWriter", "AUDIT_SCHEMA", "card_statement", "read_card",
           "write_card_statement"]

AUDIT_FILE = "audit.json"
_SUMMARY_FLOATS = ("mean_abs_diff", "max_abs_diff", "share_over_1e-3", "share_over_1e-2", "share_over_1e-1",
                   "kl_k1", "kl_k3")
_AUDIT_FIELDS: list[tuple[str, pa.DataType]] = [
    ("rollout_id", pa.string()), ("scorer", pa.string()), ("model", pa.string()), ("dtype", pa.string()),
    ("url", pa.string()), ("tokens_scored", pa.int64()),
    *[(name, pa.float64()) for name in _SUMMARY_FLOATS],
    *[(f"ratio_{k}", pa.float64()) for k in QUANTILES],
    ("n_not_comparable", pa.int32()), ("findings", pa.string()), ("not_comparable", pa.string()),
    ("worst", pa.string()), ("sequences", pa.string())]
#: the `audit` config: one row per rollout, keyed by rollout_id as in every other config
AUDIT_SCHEMA = pa.schema(_AUDIT_FIELDS)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_audit_json(folder: Path, doc: dict[str, Any]) -> Path:
    """Write `doc` as audit.json in an artifact folder (atomically).

    Returns:
        The file written.
    """
    path = Path(folder) / AUDIT_FILE
    _atomic_write(path, json.dumps(doc, indent=1, ensure_ascii=False))
    return path


def _row(doc: dict[str, Any]) -> dict[str, Any]:
    s = doc["summary"]
    row = {k: doc[k] for k in ("rollout_id", "scorer", "model", "dtype", "url")}
    row["tokens_scored"] = s["tokens_scored"]
    row.update({k: s[k] for k in _SUMMARY_FLOATS})
    row.update({f"ratio_{k}": s["ratio_quantiles"][k] for k in QUANTILES})
    row["n_not_comparable"] = len(doc["not_comparable"])
    for k in ("findings", "not_comparable", "worst", "sequences"):
        row[k] = json.dumps(doc[k], ensure_ascii=False, separators=(",", ":"))
    return row


class AuditConfigWriter:
    """Streams audit rows into ``<dataset>/data/audit/audit-00000.parquet`` (written beside, then renamed).

    Args:
        dataset: the dataset folder.
        rows_per_group: rows buffered per parquet row group.
    """

    def __init__(self, dataset: Path, rows_per_group: int = 256) -> None:
        self.folder = (Path(dataset) / AUDIT_DATA_FILES).parent
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / f"{AUDIT_CONFIG}-00000.parquet"
        self._tmp = self.folder / f".{AUDIT_CONFIG}-00000.parquet.tmp"
        self._writer = pq.ParquetWriter(self._tmp, AUDIT_SCHEMA)
        self._rows: list[dict[str, Any]] = []
        self._per_group = rows_per_group

    def add(self, doc: dict[str, Any]) -> None:
        """Buffer one rollout's audit document."""
        self._rows.append(_row(doc))
        if len(self._rows) >= self._per_group:
            self._flush()

    def _flush(self) -> None:
        if self._rows:
            self._writer.write_table(pa.Table.from_pylist(self._rows, schema=AUDIT_SCHEMA))
            self._rows = []

    def close(self) -> Path:
        """Write the rest, close and put the file in place.

        Returns:
            The parquet file.
        """
        self._flush()
        self._writer.close()
        for old in self.folder.glob("*.parquet"):
            old.unlink()
        os.replace(self._tmp, self.path)
        return self.path


def card_statement(summary: dict[str, Any], scorer: Any, n_rollouts: int, n_not_comparable: int) -> str:
    """The card's statement of the audit: scorer, model, dtype, figures and the command.

    Returns:
        A markdown section (``## Logprob audit`` ...).
    """
    url, model, dtype = one_line(scorer.url), one_line(scorer.model), one_line(scorer.dtype)
    how = f"the server's own prefill scores (`prompt_logprobs`) at {url}" if scorer.kind == "server" else \
        f"a transformers forward pass of {code_span(model)} in {dtype}"
    flag = f"--against {url}" if scorer.kind == "server" else f"--model {model} --dtype {dtype}"
    q = summary["ratio_quantiles"]
    return (f"{AUDIT_HEADING}\n\n"
            f"The captured `logprobs` of {n_rollouts} rollouts were re-scored from the `sequences` rows by {how} "
            f"(model {code_span(model)}): {summary['tokens_scored']} sampled tokens, mean |Δ logprob| "
            f"{summary['mean_abs_diff']:.2g}, max {summary['max_abs_diff']:.2g}, share over 1e-2 "
            f"{summary['share_over_1e-2']:.2g}; KL(sampler ‖ scorer) k1 {summary['kl_k1']:.2g}, k3 "
            f"{summary['kl_k3']:.2g}; importance ratio p01 {q['p01']:.4f}, p50 {q['p50']:.4f}, p99 {q['p99']:.4f}. "
            f"{n_not_comparable} calls were not comparable (reasons in the `audit` config). Per-rollout figures "
            f"are in the `audit` config, one row per rollout: `load_dataset(REPO, \"audit\", split=\"train\")`, "
            f"REPO being this dataset's id or folder. Reproduce: {code_span('rollout-dataset audit DATASET ' + flag)}.\n")


def read_card(dataset: Path) -> tuple[dict[str, Any], str]:
    """Read the dataset card's YAML front matter and body, checking what the audit will change in it.

    Args:
        dataset: the dataset folder (its ``README.md``; a missing card reads as empty).

    Returns:
        ``(meta, body)``: the front matter (a mapping) and the text after its closing ``---``.

    Raises:
        ArtifactError: the front matter has no closing ``---``, is not valid YAML, is not a mapping, or
            its ``configs`` is not a list of mappings (named with README.md).
    """
    import yaml

    card = Path(dataset) / "README.md"
    text = card.read_text(encoding="utf-8") if card.is_file() else "---\n---\n"
    if not text.startswith("---\n"):
        return {}, text
    end = text.find("\n---", 3)
    if end < 0:
        raise ArtifactError(f"{card}: YAML front matter has no closing '---' line; fix or delete the card")
    try:
        meta = yaml.safe_load(text[4:end]) or {}
    except yaml.YAMLError as exc:
        raise ArtifactError(f"{card}: YAML front matter is not valid YAML ({one_line(exc)})") from None
    if not isinstance(meta, dict):
        raise ArtifactError(f"{card}: YAML front matter is a {type(meta).__name__}, not a mapping")
    configs = meta.get("configs", [])
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        raise ArtifactError(f"{card}: YAML field 'configs' must be a list of mappings (config_name, data_files)")
    return meta, text[end + 4:]


def write_card_statement(dataset: Path, statement: str) -> None:
    """Add (or replace) the `audit` config's YAML entry and the audit section of the dataset card.

    Args:
        dataset: the dataset folder.
        statement: the section (`card_statement`); it becomes the card's last section.

    Raises:
        ArtifactError: the card's front matter is corrupt (see `read_card`).
    """
    import yaml

    meta, body = read_card(dataset)
    meta["configs"] = [c for c in meta.get("configs", []) if c.get("config_name") != AUDIT_CONFIG]
    meta["configs"].append(audit_config_entry())
    infos = meta.get("dataset_info")
    if isinstance(infos, list):
        meta["dataset_info"] = [i for i in infos if not (isinstance(i, dict) and i.get("config_name") == AUDIT_CONFIG)]
    body = audit_section(body)[0].rstrip("\n") + "\n\n" + statement
    _atomic_write(Path(dataset) / "README.md",
                  "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---" + body)
