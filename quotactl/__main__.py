"""``python -m quotactl``: the same as the ``quotactl`` console script."""

import sys

from quotactl.cli import main

sys.exit(main())
