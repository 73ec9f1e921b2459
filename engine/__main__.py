"""`python -m engine`: the command line's entry point (the contract in README).

The command line is a use case over the engine and the catalog, so it lives one layer up, in
planner/cli.py; this file only starts it. It is the one module of engine/ allowed to import
from above (tests/test_layers.py): nothing imports it.
"""

import sys

from planner.cli import main

if __name__ == "__main__":
    sys.exit(main())
