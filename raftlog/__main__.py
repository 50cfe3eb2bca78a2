"""``python -m raftlog``: the same as the ``raftlog`` console script."""

import sys

from raftlog.cli import main

sys.exit(main())
