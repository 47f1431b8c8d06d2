"""`rollout-dataset export --format atif PATH... --out DIR`: rollouts as ATIF v1.8 trajectories.

PATH is an artifact folder, a folder holding artifact folders, or a built dataset; one `<rollout_id>.atif.json` per
rollout is written to DIR (see docs/atif.md). An invalid folder is one ``error: file: json.path:
reason`` line and exit 1.
"""

from __future__ import annotations

import argparse

__all__ = ["add_arguments", "run"]

#: the formats `export` writes.
FORMATS = ("atif",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments.

    Args:
        parser: the sub-command's parser.
    """
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="artifact folders, folders holding artifact folders, or datasets built by rollout-dataset")
    parser.add_argument("--format", choices=FORMATS, required=True,
                        help="the output format: 'atif' (Harbor's Agent Trajectory Interchange Format v1.8)")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder to write <rollout_id>.atif.json files into")


def run(args: argparse.Namespace) -> int:
    """Export every rollout under the paths.

    Args:
        args: the parsed arguments.

    Returns:
        0 when every rollout was written, 1 on a missing or invalid input, or a dataset row that cannot be
        restored (one ``error:`` line).
    """
    from rollout_dataset.atif.export import export_trajectories
    from rollout_dataset.builder.inputs import first_failure_line
    from rollout_dataset.cli.reporting import EXIT_FAILED, report_error
    from rollout_dataset.errors import RolloutDatasetError, SchemaValidationError

    try:
        written = export_trajectories(args.paths, args.out)
    except SchemaValidationError as exc:
        return report_error(first_failure_line(exc), EXIT_FAILED)
    except (RolloutDatasetError, OSError, ValueError, KeyError) as exc:  # a cut or inconsistent dataset row: named
        return report_error(exc, EXIT_FAILED)
    print(f"{args.out}: {len(written)} ATIF trajectories written")
    return 0
