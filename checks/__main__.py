import sys

from checks.cli import main

sys.exit(main())
