"""A docstring may document only parameters its signature has: a documented parameter that the function,
method or class does not take is a build warning (an error under ``-W``).

The docstrings are Google style (``Args:``); napoleon turns them into ``:param name:`` fields before this
check runs (it is connected after napoleon), so both spellings are checked.
"""

from __future__ import annotations

import inspect
import re

from sphinx.util import logging

logger = logging.getLogger(__name__)
PARAM_FIELD = re.compile(r"^:param\s+(?:[^:]*\s)?([\\*\w]+)\s*:")


def documented_parameters(lines: list[str]) -> list[str]:
    """The names of the ``:param ...:`` fields of a docstring, stars kept (``**kwargs``)."""
    return [match.group(1).replace("\\", "") for line in lines if (match := PARAM_FIELD.match(line))]


def signature_parameters(obj) -> set[str] | None:
    """The parameter names ``obj`` accepts (``*args``/``**kwargs`` with their stars), or None without a signature."""
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return {stars.get(p.kind, "") + name for name, p in signature.parameters.items()}


def check_parameters(app, what, name, obj, options, lines) -> None:
    if what not in {"function", "method", "class"}:
        return
    accepted = signature_parameters(obj)
    if accepted is None:
        return
    unknown = [p for p in documented_parameters(lines) if p not in accepted and p.lstrip("*") not in accepted]
    if unknown:
        logger.warning("docstring of %s documents %s, which its signature %s does not have",
                       name, ", ".join(repr(p) for p in unknown), sorted(accepted) or "()",
                       type="qg", subtype="docstring")


def setup(app):
    app.setup_extension("sphinx.ext.napoleon")  # napoleon's converter must run before the check
    app.connect("autodoc-process-docstring", check_parameters, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
