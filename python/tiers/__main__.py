"""``python -m tiers``: the same as the ``tiers`` command."""
import sys

from .cli import main

sys.exit(main())
