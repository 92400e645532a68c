#!/usr/bin/env python3
"""ferry's benchmark campaigns: `.venv/bin/python benchmarks/campaign.py <scenario> [options]`.

The code is the package beside this file (benchmarks/campaign/); see its __init__ for the
commands and docs/benchmarks.md for what every scenario measures.
"""

import sys

from campaign.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
