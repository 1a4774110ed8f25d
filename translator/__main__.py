"""`python -m translator` is the `translator` command."""

import sys

from translator.cli import main

sys.exit(main())
