"""docs/architecture.md is a true map of the tree: every module it names exists, and every package
of the product is named in it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text()
PRODUCT = ("agents", "kb", "kloom", "services", "kernels", "migrations")


def _files(*tops: str) -> list[Path]:
    return [p.relative_to(ROOT) for top in tops for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts]


def test_every_module_the_map_names_exists():
    files = _files(*PRODUCT, "tests", "benchmarks", "suite")
    paths, names = {str(p) for p in files}, {p.name for p in files}
    named = set(re.findall(r"[\w/]*\w\.py\b", DOC))
    missing = sorted(n for n in named if n not in paths and not ("/" not in n and n in names) and not any(p.endswith("/" + n) for p in paths))
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_every_package_is_on_the_map():
    packages = sorted({p.parent for p in _files(*PRODUCT) if p.name == "__init__.py"} | {Path("migrations/versions")})
    unnamed = [str(p) for p in packages if not re.search(rf"(^|[\s(/]){re.escape(p.name)}/", DOC, re.M)]
    assert not unnamed, f"packages that docs/architecture.md does not name: {unnamed}"
