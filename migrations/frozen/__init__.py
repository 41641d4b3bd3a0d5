"""Frozen copies of the storage codecs, for the migrations that rewrite stored values.

Migrations 0012-0014 rewrite entry sets, deltas and change packs on downgrade. They read and
write them with these copies of ``monitor/codec/`` (and the value types they use) as they
stood when the copies were made, never with the live package: the codecs are then free to
change shape, and an old migration still reads what it was written for.

migrations/ is not an importable package, so a migration loads this file by path, the way
Alembic loads the migrations themselves, and asks it for a module::

    frozen = load_python_file(Path(__file__).resolve().parents[1] / "frozen", "__init__.py")
    entryset = frozen.load("entryset")
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_PACKAGE = "sitemap_monitor_frozen_codecs"


def load(name: str) -> ModuleType:
    """The frozen module ``name`` (``entryset``, ``entrydelta``, ``changepacks``...)."""
    if _PACKAGE not in sys.modules:
        here = Path(__file__).resolve().parent
        spec = importlib.util.spec_from_file_location(
            _PACKAGE, here / "__init__.py", submodule_search_locations=[str(here)])
        assert spec is not None
        assert spec.loader is not None
        package = importlib.util.module_from_spec(spec)
        sys.modules[_PACKAGE] = package
        spec.loader.exec_module(package)
    return importlib.import_module(f"{_PACKAGE}.{name}")
