"""`python -m hourglass_client`: the same as `hourglass-worker`."""

import sys

from hourglass_client.cli import main

sys.exit(main())
