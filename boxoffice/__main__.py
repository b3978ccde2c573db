import sys

from boxoffice.cli import main

sys.exit(main())
