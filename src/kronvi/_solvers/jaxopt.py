"""The one module that imports jaxopt (archived upstream; it warns on import).

Exactly that deprecation warning is filtered here; nothing else in kronvi imports jaxopt.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="JAXopt is no longer maintained", category=DeprecationWarning)
    import jaxopt

LBFGS = jaxopt.LBFGS
ZoomLineSearch = jaxopt.ZoomLineSearch

__all__ = ["LBFGS", "ZoomLineSearch"]
