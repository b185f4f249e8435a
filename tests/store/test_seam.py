"""The store is one seam: no SQL runs outside ``src/prefctl/store`` (the import-linter contract
in pyproject.toml says the same of the driver's module)."""

from __future__ import annotations

import ast
from pathlib import Path

import prefctl

_SRC = Path(prefctl.__file__).parent
_RUNS_SQL = {"execute", "executemany", "executescript"}


def _sql_calls(path: Path) -> list[int]:
    """Lines of ``path`` that hand SQL text (a literal, an f-string, a concatenation) to
    ``execute``, ``executemany`` or ``executescript``."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _RUNS_SQL
            and node.args
            and isinstance(node.args[0], ast.Constant | ast.JoinedStr | ast.BinOp)
        ):
            lines.append(node.lineno)
    return lines


def test_store_seam_no_module_outside_store_runs_sql() -> None:
    outside = [
        f"{path.relative_to(_SRC)}:{line}"
        for path in sorted(_SRC.rglob("*.py"))
        if path.relative_to(_SRC).parts[0] != "store"
        for line in _sql_calls(path)
    ]
    assert outside == []


def test_store_seam_check_finds_sql_in_a_module(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('conn.execute(f"SELECT {x}")\napi.execute(import_id)\n', encoding="utf-8")
    assert _sql_calls(module) == [1]


def test_store_seam_contract_covers_every_package_but_the_store() -> None:
    import tomllib

    pyproject = tomllib.loads((_SRC.parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    (seam,) = [
        c for c in pyproject["tool"]["importlinter"]["contracts"] if c["type"] == "forbidden"
    ]
    packages = {
        f"prefctl.{path.stem}"
        for path in _SRC.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()
    }
    assert set(seam["source_modules"]) == packages - {"prefctl.store"}
    assert {"sqlite3", "psycopg", "psycopg_pool"} <= set(seam["forbidden_modules"])
