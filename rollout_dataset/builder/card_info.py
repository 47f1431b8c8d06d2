"""What the dataset card states beyond the summary rows: the author's options and the Arrow sizes.

- `CardOptions`: title, license, languages, homepage, repository and citation, set at `build` time
  and kept in the dataset folder (``card_options.json``, never pushed) so that a later `push`,
  which re-renders the card for the union on the Hub, keeps them.
- `arrow_num_bytes`: the in-memory Arrow size of parquet shards, which is what `datasets` means
  by `dataset_info.num_bytes` (the parquet size is `download_size`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Iterable

import pyarrow.parquet as pq

from rollout_dataset.errors import ConfigError
from rollout_dataset.files import write_text_atomic

__all__ = ["CARD_OPTIONS_FILE", "CardOptions", "save_card_options", "load_card_options", "arrow_num_bytes",
           "default_citation"]

log = logging.getLogger(__name__)

CARD_OPTIONS_FILE = "card_options.json"


@dataclass(frozen=True)
class CardOptions:
    """The author's facts for the card.

    Args:
        pretty_name: the display name.
        license: a Hub license id.
        language: language codes of the text (the card's `language` YAML).
        homepage: the project's or dataset's homepage URL.
        repository: the source repository URL of the capture setup.
        citation: a BibTeX entry; None generates one from the title and the repo.
        refused: ``(artifact folder name, reason)`` of each folder a build left out because the
            schema check refused it (`build(..., skip_invalid=True)`); kept across extending builds.
    """

    pretty_name: str = "Agent rollouts (rollout-dataset)"
    license: str = "apache-2.0"
    language: tuple[str, ...] = field(default=("en",))
    homepage: str | None = None
    repository: str | None = None
    citation: str | None = None
    refused: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "language", tuple(self.language))
        object.__setattr__(self, "refused", tuple((str(f), str(r)) for f, r in self.refused))
        for name in ("homepage", "repository"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and value.startswith(("https://", "http://"))):
                raise ConfigError(f"{name}={value!r}: give an http(s) URL")


def save_card_options(options: CardOptions, dataset_dir: str | Path) -> Path:
    """Keep the options next to the dataset (``card_options.json``).

    Args:
        options: the options.
        dataset_dir: the dataset folder.

    Returns:
        The file written.
    """
    path = Path(dataset_dir) / CARD_OPTIONS_FILE
    data = asdict(options)
    data["language"] = list(options.language)
    if options.refused:  # kept only when a build left folders out
        data["refused"] = [list(pair) for pair in options.refused]
    else:
        del data["refused"]
    write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return path


def load_card_options(dataset_dir: str | Path) -> CardOptions:
    """The options a dataset folder was built with (defaults when it has none or it is unreadable).

    Args:
        dataset_dir: the dataset folder.

    Returns:
        The options.
    """
    path = Path(dataset_dir) / CARD_OPTIONS_FILE
    if not path.is_file():
        return CardOptions()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object")
        known = {f.name for f in fields(CardOptions)}
        return CardOptions(**{k: v for k, v in data.items() if k in known})
    except (ValueError, TypeError) as exc:
        log.warning("%s: unreadable (%s); card options fall back to the defaults", path, exc)
        return CardOptions()


def arrow_num_bytes(shards: Iterable[str | Path]) -> int:
    """The Arrow (in-memory) size of parquet shards, streamed one row group at a time.

    Args:
        shards: parquet files.

    Returns:
        The sum of the decoded tables' `nbytes`.
    """
    total = 0
    for shard in shards:
        pf = pq.ParquetFile(str(shard))
        for i in range(pf.num_row_groups):
            total += pf.read_row_group(i).nbytes
    return total


def default_citation(pretty_name: str, repo_id: str | None, year: int) -> str:
    """A BibTeX entry for the dataset.

    Args:
        pretty_name: the title.
        repo_id: the Hub repo id (None: a local dataset).
        year: the year of the latest rollout.

    Returns:
        The entry.
    """
    key = "".join(c if c.isalnum() else "_" for c in (repo_id or "rollout_dataset")).strip("_").lower()
    lines = [f"@misc{{{key}_{year},", f"  title = {{{pretty_name}}},",
             f"  author = {{{repo_id.split('/')[0] if repo_id else 'The dataset authors'}}},", f"  year = {{{year}}},"]
    if repo_id:
        lines += ["  publisher = {Hugging Face},",
                  "  howpublished = {\\url{https://huggingface.co/datasets/" + repo_id + "}},"]
    lines += ["  note = {Agent rollouts captured token-exact with rollout-dataset}", "}"]
    return "\n".join(lines)
