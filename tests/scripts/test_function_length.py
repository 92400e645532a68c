"""The function-length check in its Python mode (tools/long_functions.py --lang python, run by
`make lint` over the pipeline's scripts): it flags a function over the limit, nested or in a
class, passes one at the limit, and passes the scripts as they stand."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import long_functions  # noqa: E402


def body(lines: int, indent: str = "    ") -> str:
    """A def's body making the def exactly `lines` lines."""
    return "".join(f"{indent}x{i} = {i}\n" for i in range(lines - 1))


def test_a_function_over_the_limit_is_flagged_and_one_at_it_is_not(tmp_path, capsys):
    src = tmp_path / "mod.py"
    src.write_text(
        "def fits():\n" + body(100) + "\n\nclass C:\n    def too_long(self):\n" + body(101, " " * 8)
    )
    assert long_functions.main(["--lang", "python", str(src)]) == 1
    out = capsys.readouterr().out
    assert "C.too_long is 101 lines (at most 100)" in out
    assert "fits" not in out


def test_a_nested_function_is_measured_on_its_own(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text("def outer():\n    def inner():\n" + body(60, " " * 8) + body(41))
    found = {f.name: f.lines for f in long_functions.functions([src], "python")}
    assert found == {"outer": 101, "outer.inner": 60}
    assert long_functions.main(["--lang", "python", "--max", "101", str(src)]) == 0


def test_the_pipeline_scripts_have_no_function_over_the_limit(capsys):
    scripts = ROOT / "workflow" / "scripts"
    assert long_functions.main(["--lang", "python", str(scripts)]) == 0, capsys.readouterr().out
