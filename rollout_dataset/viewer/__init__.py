"""`rollout-dataset view`: a read-only local web viewer of artifact folders and built datasets.

* `open_source(path)` — the rollouts of an artifact folder, a tree of them, or a dataset folder.
* `build_app(source)` — the ASGI app (pages, vendored assets, JSON API, strict CSP).
* `viewer_server(path)` / `serve_viewer(path)` — serve it on loopback (async block / until Ctrl-C).
* `export_static(path, out)` — a self-contained static copy that opens from disk.

See docs/viewer.md.
"""

from rollout_dataset.viewer.app import build_app
from rollout_dataset.viewer.export import export_static
from rollout_dataset.viewer.server import ViewerServer, serve_viewer, viewer_server
from rollout_dataset.viewer.sources import ArtifactSource, DatasetSource, RolloutSource, open_source

__all__ = ["build_app", "export_static", "ViewerServer", "serve_viewer", "viewer_server", "ArtifactSource",
           "DatasetSource", "RolloutSource", "open_source"]
