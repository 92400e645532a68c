"""The Python function-length check (tools/function_length.py, run by `make lint`): it flags a
function over the limit, nested or in a class, passes one at the limit, and passes the pipeline's
scripts as they stand."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "function_length", ROOT / "tools" / "function_length.py"
)
function_length = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(function_length)


def body(lines: int, indent: str = "    ") -> str:
    """A def of exactly `lines` lines."""
    return "".join(f"{indent}x{i} = {i}\n" for i in range(lines - 1))


def test_a_function_over_the_limit_is_flagged_and_one_at_it_is_not(tmp_path, capsys):
    src = tmp_path / "mod.py"
    src.write_text(
        "def fits():\n" + body(100) + "\n\nclass C:\n    def too_long(self):\n" + body(101, " " * 8)
    )
    assert function_length.main([str(src)]) == 1
    err = capsys.readouterr().err
    assert "C.too_long is 101 lines, over 100" in err
    assert "fits" not in err


def test_a_nested_function_is_measured_on_its_own(tmp_path, capsys):
    src = tmp_path / "mod.py"
    src.write_text("def outer():\n    def inner():\n" + body(60, " " * 8) + body(41))
    found = {name: n for n, _, name in function_length.lengths(str(src))}
    assert found == {"outer": 101, "outer.inner": 60}
    assert function_length.main([str(src), "--limit", "101"]) == 0


def test_the_pipeline_scripts_have_no_function_over_the_limit(capsys):
    assert function_length.main([str(ROOT / "workflow" / "scripts")]) == 0, capsys.readouterr().err
