"""`view PATH --export OUT`: a self-contained static copy of the viewer that opens from disk.

OUT holds the two pages, their assets (the package's own files: no CDN, no network) and ``data/``:
one small script per document (``info.js``, ``index.js``, ``ids.js``, ``r<N>.js`` per rollout and
``r<N>-s<K>-w<J>.js`` per token window), each calling ``RD_DATA(key, payload)``. Scripts, not JSON
fetched at run time, because a page opened from ``file://`` may not fetch files beside it; the
pages then read the same shapes the server's API returns. OUT can be zipped, mailed, or uploaded to a
Hub repo beside the dataset.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from rollout_dataset.viewer.app import PAGES, IndexScan, error_view, load_view, static_dir
from rollout_dataset.viewer.sources import open_source
from rollout_dataset.viewer.views import page_json, token_window

__all__ = ["export_static", "EXPORT_WINDOW"]

log = logging.getLogger(__name__)

#: tokens per exported window (the pages ask for windows of this size; common.js ``WINDOW``).
EXPORT_WINDOW = 2048


def _write_data(folder: Path, name: str, key: str, payload: Any) -> None:
    """One data script: ``RD_DATA(key, "<JSON text>")``. The payload goes as a string the page hands to
    ``JSON.parse``, never as an object literal, which would take a key ``__proto__`` (a rollout id, a
    harness's field) for the object's prototype and drop it."""
    text = json.dumps(page_json(payload), ensure_ascii=False)
    (folder / name).write_text(f"RD_DATA({json.dumps(key)},{text});\n", encoding="utf-8")


def export_static(path: str | Path, out: str | Path) -> dict[str, Any]:
    """Write the static copy of PATH's viewer to OUT.

    Args:
        path: an artifact folder, a tree of them, or a dataset folder (read only).
        out: a new (or empty) folder outside PATH.

    Returns:
        ``{"folder", "index", "rollouts"}``: OUT, its index.html, and how many rollouts it holds.

    Raises:
        ArtifactError: PATH holds no rollout.
        FileExistsError: OUT exists and is not empty, or lies inside PATH (the viewer never writes there).
    """
    source = open_source(path)
    out = Path(out)
    if out.resolve().is_relative_to(source.root):
        raise FileExistsError(f"{out}: inside {source.root}; the viewer never writes into PATH, choose another OUT")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out}: exists and is not an empty folder; choose a new OUT")
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    assets = static_dir()
    shutil.copytree(assets, out / "static", ignore=shutil.ignore_patterns(*PAGES, "__pycache__"))
    for page in PAGES:
        html = (assets / page).read_text(encoding="utf-8")
        (out / page).write_text(html.replace('content="server"', 'content="export"'), encoding="utf-8")
    scan = IndexScan(source)
    rows = scan.all()
    ids = {row["id"]: n for n, row in enumerate(rows)}
    _write_data(data, "info.js", "info", {"kind": source.kind, "name": source.root.name, "exported": True})
    _write_data(data, "index.js", "index", {"rows": rows, "done": True, "error": scan.error})
    _write_data(data, "ids.js", "ids", ids)
    for rid, n in ids.items():
        try:
            loaded, view, tokenizer = load_view(source, rid)
        except Exception as exc:  # noqa: BLE001 - shown in the exported page, as the server would
            loaded, view, tokenizer = None, error_view(source, rid, exc), None
        _write_data(data, f"r{n}.js", "rollout", view)
        if loaded is None:  # the error view above: no sequences
            continue
        for seq in view.get("sequences") or []:
            for w, start in enumerate(range(0, seq["n_tokens"], EXPORT_WINDOW)):
                try:
                    window = token_window(loaded, seq["index"], start, EXPORT_WINDOW, tokenizer)
                except Exception as exc:  # noqa: BLE001 - a corrupt row: the page names it, as the server's 500 does
                    log.warning("rollout %s, sequence %s, tokens from %d: %s", rid, seq["index"], start, exc)
                    window = {"error": source.shown(f"{type(exc).__name__}: {exc}")}
                _write_data(data, f"r{n}-s{seq['index']}-w{w}.js", f"t{seq['index']}-{start}", window)
    log.debug("exported %d rollouts to %s", len(ids), out)
    return {"folder": str(out), "index": str(out / "index.html"), "rollouts": len(ids)}
