"""`python -m lmpo` is the `lmpo` command."""

import sys

from lmpo.cli import main

sys.exit(main())
