"""ferry's benchmark campaigns.

Each campaign times ferry and its peers (cp, rsync, md5sum, rclone, fpart, curl) with hyperfine
on the same generated data, on the same machine, in the same sitting, and reports ratios
(ferry ÷ peer). Absolute numbers on a shared two-core VM say little; ratios taken minutes apart
say more, and the load average is recorded next to them so a reader can judge the noise.

    .venv/bin/python benchmarks/campaign.py local|azurite|discard|partition|all [--runs N] [--quick]
    .venv/bin/python benchmarks/campaign.py report   # redo tables, charts and the docs from results/*.json
    .venv/bin/python benchmarks/campaign.py clean    # delete the campaigns' datasets and workspaces

docs/benchmarks.md says what every scenario measures and how to read the results.
"""

import sys
from pathlib import Path

# tests/support (latencyfs, toxiproxy) is shared with the test suite.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
