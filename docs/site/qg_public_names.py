"""Every public name of QuantumGrav (``QuantumGrav.__all__``) has an entry in the API reference and a
docstring; a name added to the package but not to docs/site/api.md is a build warning (an error under ``-W``).
"""

from __future__ import annotations

import importlib
import inspect

from sphinx.util import logging

logger = logging.getLogger(__name__)


def check_public_names(app, env) -> None:
    package_name = app.config.qg_public_package
    package = importlib.import_module(package_name)
    documented = set(env.get_domain("py").objects)
    for name in package.__all__:
        if f"{package_name}.{name}" not in documented:
            logger.warning("%s.%s is public (%s.__all__) but has no entry in the API reference: add it to %s",
                           package_name, name, package_name, app.config.qg_api_page, type="qg", subtype="public_names")
        if not inspect.getdoc(getattr(package, name)):
            logger.warning("%s.%s has no docstring", package_name, name, type="qg", subtype="public_names")


def setup(app):
    app.add_config_value("qg_public_package", "QuantumGrav", "env")
    app.add_config_value("qg_api_page", "docs/site/api.md", "env")
    app.connect("env-check-consistency", check_public_names)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
