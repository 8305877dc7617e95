"""The previous release's module paths, kept importable: a script, notebook, pickle or ``!pyobject`` that names
``QuantumGrav.errors`` (say) gets the module that now holds it, the same object, so its classes are the same."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

_SECTIONS = "QuantumGrav.config.sections."
# old path -> where its names live now (several: a module that was split)
MOVED: dict[str, tuple[str, ...]] = {
    "QuantumGrav.errors": ("QuantumGrav.common.errors",),
    "QuantumGrav.files": ("QuantumGrav.common.files",),
    "QuantumGrav.processes": ("QuantumGrav.common.processes",),
    "QuantumGrav.logging_utils": ("QuantumGrav.common.logging_utils",),
    "QuantumGrav.version": ("QuantumGrav.common.version",),
    "QuantumGrav.config.section": (_SECTIONS + "base",),
    "QuantumGrav.config.data_section": (_SECTIONS + "data",),
    "QuantumGrav.data.store_cache": ("QuantumGrav.data.stores.cache",),
    "QuantumGrav.data.store_graphs": ("QuantumGrav.data.stores.graphs",),
    "QuantumGrav.data.store_limits": ("QuantumGrav.data.stores.limits",),
    "QuantumGrav.config.learning_sections": (_SECTIONS + "task", _SECTIONS + "early_stopping", _SECTIONS + "model"),
    "QuantumGrav.config.training_sections": (_SECTIONS + "training", _SECTIONS + "loaders", _SECTIONS + "optimizer"),
}


class OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Asked last (after the package's own files): an old path that names one module is that module; one that
    was split is a module that looks each name up in its parts."""

    def find_spec(self, name: str, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec) -> ModuleType:
        parts = [importlib.import_module(new) for new in MOVED[spec.name]]
        if len(parts) == 1:
            return parts[0]
        module = ModuleType(spec.name, f"Moved to {', '.join(MOVED[spec.name])}.")

        def lookup(attribute: str):
            for part in parts:
                if hasattr(part, attribute):
                    return getattr(part, attribute)
            raise AttributeError(f"module {spec.name!r} has no attribute {attribute!r}")

        module.__getattr__ = lookup
        return module

    def exec_module(self, module: ModuleType) -> None:
        pass  # the module exists already: create_module returned it


def install() -> None:
    if not any(isinstance(finder, OldPaths) for finder in sys.meta_path):
        sys.meta_path.append(OldPaths())
