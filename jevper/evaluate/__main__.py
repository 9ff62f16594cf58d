import sys

from jevper.evaluate.cli import main

sys.exit(main())
