import sys

from basis.cli import main

sys.exit(main())
