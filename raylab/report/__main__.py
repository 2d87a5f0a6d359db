"""``python -m raylab.report``: see ``raylab.report``."""

import sys

from raylab.report import main

sys.exit(main())
