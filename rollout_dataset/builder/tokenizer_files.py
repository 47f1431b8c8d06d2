"""The tokenizer travels with the data: find the captures' exact tokenizer files, hash them, and store
them in the dataset's `tokenizer/` folder.

A capture names its tokenizer (summary config `tokenizer`): ``"builtin"`` (the local backend's), a
local folder, or a Hub id. `resolve_tokenizer_files` reads that tokenizer's files (a Hub id from the
local Hugging Face cache only: a build never downloads; its resolved commit is recorded), and
`TokenizerFiles.sha256` (SHA-256 of ``tokenizer.json``) identifies it on every summary row. One
dataset holds one tokenizer: `TokenizerRegistry` refuses a build that mixes two
(`TokenizerMismatchError`), whether within the build or against what the dataset already holds.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from rollout_dataset.builder.training_template import TRAINING_TEMPLATE_FILE, training_template_of
from rollout_dataset.errors import TokenizerMismatchError
from rollout_dataset.files import write_bytes_atomic

__all__ = ["TOKENIZER_DIR", "TOKENIZER_FILES", "TokenizerFiles", "TokenizerRegistry", "resolve_tokenizer_files",
           "stored_tokenizer_sha256", "tokenizer_uploads", "write_tokenizer_files"]

log = logging.getLogger(__name__)

#: the dataset folder (and Hub repo) path of the stored tokenizer.
TOKENIZER_DIR = "tokenizer"
#: the files of a tokenizer that are copied when present (tokenizer.json is required).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "chat_template.json", "added_tokens.json", "generation_config.json", TRAINING_TEMPLATE_FILE)
_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token",
                 "additional_special_tokens")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class TokenizerFiles:
    """One tokenizer's files, ready to store.

    Attributes:
        name: the name the capture gave it (``"builtin"``, a folder, a Hub id).
        files: file name -> bytes (always ``tokenizer.json``; ``special_tokens_map.json`` is derived
            from ``tokenizer_config.json`` when the tokenizer ships none; `TRAINING_TEMPLATE_FILE`
            from the chat template, see `rollout_dataset.builder.training_template`).
        sha256: SHA-256 of ``tokenizer.json``.
        hub_id: the Hub repo id for a Hub tokenizer, else None.
        revision: the resolved commit of that Hub repo, else None.
    """

    name: str
    files: dict[str, bytes] = field(repr=False)
    sha256: str
    hub_id: str | None = None
    revision: str | None = None


def _read_folder(folder: Path) -> dict[str, bytes]:
    files = {n: (folder / n).read_bytes() for n in TOKENIZER_FILES if (folder / n).is_file()}
    if "special_tokens_map.json" not in files and "tokenizer_config.json" in files:
        try:
            config = json.loads(files["tokenizer_config.json"])
        except ValueError:
            config = {}
        special = {k: config[k] for k in _SPECIAL_KEYS if isinstance(config, dict) and config.get(k) is not None}
        files["special_tokens_map.json"] = (json.dumps(special, indent=2, ensure_ascii=False) + "\n").encode()
    training = training_template_of(files)  # the chat template with {% generation %} markers, when its shape is known
    if training is not None:
        files[TRAINING_TEMPLATE_FILE] = training
    return files


def resolve_tokenizer_files(name: str | None, cache_dir: str | Path | None = None) -> TokenizerFiles | None:
    """Find a tokenizer's files without touching the network.

    Args:
        name: ``"builtin"``, a local folder, or a Hub id (looked up in the local HF cache only).
        cache_dir: the Hugging Face hub cache to look in (default: huggingface_hub's).

    Returns:
        The files, or None when they cannot be found (logged; the build goes on without them) or the
        tokenizer has no ``tokenizer.json`` (a slow tokenizer).
    """
    if not name:
        return None
    hub_id = revision = None
    if name == "builtin":
        from rollout_dataset.tokenizers import BUILTIN_TOKENIZER_DIR

        folder = BUILTIN_TOKENIZER_DIR
    elif Path(name).expanduser().is_dir():
        folder = Path(name).expanduser()
    else:
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(name, local_files_only=True, cache_dir=cache_dir,
                                            allow_patterns=list(TOKENIZER_FILES)))
        except Exception as exc:  # noqa: BLE001 - not a repo id, not cached: the dataset goes without a tokenizer
            log.warning("tokenizer %r: not a folder and not in the local Hugging Face cache (%s); the dataset "
                        "will not carry it", name, type(exc).__name__)
            return None
        hub_id, revision = name, folder.name  # snapshots/<commit>
    files = _read_folder(folder)
    if "tokenizer.json" not in files:
        log.warning("tokenizer %r at %s has no tokenizer.json; the dataset will not carry it", name, folder)
        return None
    return TokenizerFiles(name=name, files=files, sha256=_sha256(files["tokenizer.json"]), hub_id=hub_id,
                          revision=revision)


def stored_tokenizer_sha256(dataset_dir: str | Path) -> str | None:
    """SHA-256 of the dataset's stored ``tokenizer/tokenizer.json``, or None when it stores none."""
    path = Path(dataset_dir) / TOKENIZER_DIR / "tokenizer.json"
    return _sha256(path.read_bytes()) if path.is_file() else None


def write_tokenizer_files(tokenizer: TokenizerFiles, dataset_dir: str | Path) -> Path:
    """Store a tokenizer in ``<dataset_dir>/tokenizer/`` (each file written to a temp name, then renamed).

    Args:
        tokenizer: from `resolve_tokenizer_files`.
        dataset_dir: the dataset folder.

    Returns:
        The tokenizer folder.

    Raises:
        TokenizerMismatchError: the folder already holds another tokenizer (a ValueError).
    """
    folder = Path(dataset_dir) / TOKENIZER_DIR
    stored = stored_tokenizer_sha256(dataset_dir)
    if stored is not None and stored != tokenizer.sha256:
        raise TokenizerMismatchError(f"{folder / 'tokenizer.json'}: holds tokenizer sha256 {stored}, but these "
                                     f"rollouts used {tokenizer.name!r} (sha256 {tokenizer.sha256}); build "
                                     "captures of different tokenizers into different datasets")
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in tokenizer.files.items():
        write_bytes_atomic(folder / name, data)
    return folder


def tokenizer_uploads(dataset_dir: str | Path, remote_sha256: str | None) -> list[tuple[str, Path]]:
    """The stored tokenizer's files a push must add to a repo.

    Args:
        dataset_dir: the local dataset folder.
        remote_sha256: SHA-256 of the repo's ``tokenizer/tokenizer.json``; None when it has none.

    Returns:
        ``(path_in_repo, local_file)`` pairs; empty when the repo already holds this tokenizer or the
        dataset stores none.

    Raises:
        TokenizerMismatchError: the repo holds another tokenizer (a ValueError).
    """
    local = stored_tokenizer_sha256(dataset_dir)
    if local is None or remote_sha256 == local:
        return []
    if remote_sha256 is not None:
        raise TokenizerMismatchError(f"the repo's {TOKENIZER_DIR}/tokenizer.json has sha256 {remote_sha256}, "
                                     f"{dataset_dir} stores {local}: push captures of another tokenizer to "
                                     "another repo")
    folder = Path(dataset_dir) / TOKENIZER_DIR
    return [(f"{TOKENIZER_DIR}/{p.name}", p) for p in sorted(folder.iterdir())
            if p.is_file() and p.name in TOKENIZER_FILES]


class TokenizerRegistry:
    """Resolves each rollout's tokenizer once per name and keeps one tokenizer per dataset.

    Args:
        existing_rows: the dataset's summary rows already written (their `tokenizer` and
            `tokenizer_sha256`; read only up to the first that names a tokenizer).
        stored_sha256: SHA-256 of the dataset's stored tokenizer.json, if any.
    """

    def __init__(self, existing_rows: Iterable[dict[str, Any]] = (), stored_sha256: str | None = None) -> None:
        self._by_name: dict[str | None, TokenizerFiles | None] = {}
        self.identity: str | None = None  # sha256, or "name:<name>" when the files were not found
        self.origin = ""
        self.tokenizer: TokenizerFiles | None = None
        if stored_sha256:
            self.identity, self.origin = stored_sha256, f"the dataset's {TOKENIZER_DIR}/tokenizer.json"
        for row in existing_rows:
            key = row.get("tokenizer_sha256") or (f"name:{row['tokenizer']}" if row.get("tokenizer") else None)
            if key and self.identity is None:
                self.identity, self.origin = key, f"rollout {row.get('rollout_id')} already in the dataset"
            if self.identity is not None:
                break

    @classmethod
    def seeded(cls, identity: str | None, origin: str = "") -> "TokenizerRegistry":
        """A registry that starts from another one's identity (a build part checks against the dataset's).

        Args:
            identity: the `identity` of the registry to continue (None: no tokenizer yet).
            origin: where that identity came from (for the error message).

        Returns:
            The registry.
        """
        registry = cls()
        registry.identity, registry.origin = identity, origin
        return registry

    def check(self, name: str | None, where: str) -> TokenizerFiles | None:
        """The tokenizer of one rollout, refused when it differs from the dataset's.

        Args:
            name: the tokenizer name the rollout's capture used.
            where: the artifact folder, for the error message.

        Returns:
            Its files, or None when they cannot be found.

        Raises:
            TokenizerMismatchError: another tokenizer is already in this dataset or build.
        """
        if name not in self._by_name:
            self._by_name[name] = resolve_tokenizer_files(name) if name else None
        tok = self._by_name[name]
        key = tok.sha256 if tok else (f"name:{name}" if name else None)
        if key is None:
            return None
        if self.identity == f"name:{name}":  # rows built before hashes were recorded, same name
            self.identity = key
        if self.identity is not None and key != self.identity:
            raise TokenizerMismatchError(
                f"{where}: tokenizer {name!r} ({'sha256 ' + tok.sha256 if tok else 'files not found'}) differs from "
                f"{self.identity} of {self.origin}; one dataset holds captures of one tokenizer (build the others "
                "into another dataset)")
        if self.identity is None:
            self.identity, self.origin = key, where
        if tok is not None:
            self.tokenizer = tok
        return tok
