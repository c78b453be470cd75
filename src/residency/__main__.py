import sys

from residency._cli import main

sys.exit(main())
