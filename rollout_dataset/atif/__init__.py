"""ATIF (Agent Trajectory Interchange Format, Harbor's RFC 0001, v1.8) in and out.

`atif.export` turns one artifact folder's documents into an ATIF trajectory (`trajectory.json`);
`atif.importer` turns an ATIF trajectory (a bare file, or a Harbor trial folder with its
`result.json`) into the documents of an artifact folder, through the same graph and export code a
capture uses. Pure: no proxy, backend or server imports (see docs/atif.md).
"""

from __future__ import annotations

__all__ = ["ATIF_SCHEMA_VERSION"]

#: the `schema_version` this project writes and reads.
ATIF_SCHEMA_VERSION = "ATIF-v1.8"
