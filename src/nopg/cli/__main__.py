"""``python -m nopg.cli``: the ``nopg`` command."""

import sys

from . import main

sys.exit(main())
