"""`python -m jevper.serve`."""

import sys

from jevper.serve.cli import main

sys.exit(main())
