"""`python -m jevper.probe`."""

import sys

from jevper.probe.cli import main

sys.exit(main())
