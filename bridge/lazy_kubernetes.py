"""Import kubernetes-asyncio without its 1,500 generated models and 60 API classes.

The bridges borrow only kubernetes-asyncio's configuration loaders (kubeconfig, in-cluster, exec
plugins: :mod:`bridge.runtime.session`), but its packages import everything they contain on first
import: ``import kubernetes_asyncio.config`` runs ``kubernetes_asyncio/__init__.py``, which imports
``client``, whose ``__init__`` imports every model and API module. That is about 40 MiB of resident
memory, a quarter of a bridge's, for code the bridges never call.

:func:`install` makes those three packages (``kubernetes_asyncio``, ``kubernetes_asyncio.client``
and its ``models`` and ``api``) lazy, as SPEC 1's ``lazy_loader`` does for scientific Python: each
package's module is created without running its ``__init__``; the names that ``__init__`` would
have imported (read from its ``from <module> import <Name>`` lines) are imported on first access
through the module's ``__getattr__`` (PEP 562). So ``from kubernetes_asyncio.client import V1Pod``
still works, importing one model; submodules import as usual. Nothing changes if kubernetes-asyncio
was imported before :func:`install`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["LAZY_PACKAGES", "install"]

LAZY_PACKAGES = (
    "kubernetes_asyncio",
    "kubernetes_asyncio.client",
    "kubernetes_asyncio.client.models",
    "kubernetes_asyncio.client.api",
)

_FROM_IMPORT = re.compile(r"^from\s+([\w.]+)\s+import\s+(\w+)\s*$", re.MULTILINE)
_IMPORT_AS = re.compile(r"^import\s+([\w.]+)\s+as\s+(\w+)\s*$", re.MULTILINE)
_VERSION = re.compile(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)


def exported_names(init_source: str) -> dict[str, tuple[str, str | None]]:
    """What a generated package ``__init__`` imports: each name to (module, attribute), where an
    attribute of None means the name is the module itself (``import a.b as b``)."""
    names: dict[str, tuple[str, str | None]] = {}
    for module, name in _FROM_IMPORT.findall(init_source):
        if module != "__future__":
            names[name] = (module, name)
    for module, name in _IMPORT_AS.findall(init_source):
        names[name] = (module, None)
    return names


class _LazyPackageLoader(importlib.abc.Loader):
    def __init__(self, init_file: Path) -> None:
        self._init_file = init_file

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        source = self._init_file.read_text(encoding="utf-8")
        names = exported_names(source)
        version = _VERSION.search(source)
        if version is not None:
            setattr(module, "__version__", version.group(1))  # noqa: B010 (mypy: not a module attribute)
        setattr(module, "__all__", sorted(names))  # noqa: B010

        def __getattr__(name: str) -> object:  # noqa: N807 (PEP 562)
            if name not in names:
                raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
            source_module, attribute = names[name]
            imported = importlib.import_module(source_module)
            value = imported if attribute is None else getattr(imported, attribute)
            setattr(module, name, value)
            return value

        def __dir__() -> list[str]:  # noqa: N807 (PEP 562)
            return sorted({*module.__dict__, *names})

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        module.__dir__ = __dir__  # type: ignore[method-assign]


class _LazyPackageFinder(importlib.abc.MetaPathFinder):
    def __init__(self, packages: Sequence[str]) -> None:
        self._packages = frozenset(packages)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._packages:
            return None
        # The real spec, from the path-based finder: its location, not its loader.
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.origin is None or spec.submodule_search_locations is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname,
            spec.origin,
            loader=_LazyPackageLoader(Path(spec.origin)),
            submodule_search_locations=list(spec.submodule_search_locations),
        )


def install(packages: Sequence[str] = LAZY_PACKAGES) -> bool:
    """Make ``packages`` lazy from now on; False (and nothing done) when one is imported already
    (then it stays as it is) or the finder is installed."""
    if any(name in sys.modules for name in packages):
        return False
    if any(isinstance(finder, _LazyPackageFinder) for finder in sys.meta_path):
        return False
    sys.meta_path.insert(0, _LazyPackageFinder(packages))
    return True
