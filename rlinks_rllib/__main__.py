"""``python -m rlinks_rllib`` is the ``rlinks`` command."""

import sys

from .cli import main

sys.exit(main())
