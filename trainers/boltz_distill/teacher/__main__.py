"""``python -m trainers.boltz_distill.teacher``: see ``cli``."""

import sys

from trainers.boltz_distill.teacher.cli import main

sys.exit(main())
