import sys

from boxoffice_cli.main import main

sys.exit(main())
