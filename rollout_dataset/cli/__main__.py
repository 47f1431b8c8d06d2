import sys

from rollout_dataset.cli import main

sys.exit(main())
