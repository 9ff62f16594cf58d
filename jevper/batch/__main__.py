import sys

from jevper.batch.cli import main

sys.exit(main())
