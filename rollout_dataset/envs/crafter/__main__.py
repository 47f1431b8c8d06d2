"""`python -m rollout_dataset.envs.crafter`: capture one Crafter rollout (see `cli.py`)."""

import sys

from rollout_dataset.envs.crafter.cli import main

sys.exit(main())
