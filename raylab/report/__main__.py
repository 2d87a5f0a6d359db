"""``python -m raylab.report``: see ``raylab.report``."""

import sys

from raylab.report.writer import main

sys.exit(main())
