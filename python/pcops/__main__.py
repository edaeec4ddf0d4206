"""`python -m pcops`: the `pcops` command (info, demo, bench) where its script is not on PATH."""

import sys

from pcops.cli import main

sys.exit(main())
