"""Calls that must leave the fast roads (the small roads, the working sets) for the
general road, built from one fast-road call's inputs: shared by their tests."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

#: The calls every fast road hands over: a keyword other than tol, a start, a backend or
#: representation asked for, float32, two right-hand sides, a sparse C, a list for d.
COMMON = ("option", "x0", "backend", "representation", "float32", "two columns", "sparse", "list")


def general_road_call(case, c, d, representation="gram"):
    """(c, d, keywords) of the call ``case`` (one of :data:`COMMON`) made from ``c`` and
    ``d`` (the user's arrays are not modified)."""
    kwargs = {}
    if case == "option":
        kwargs = {"max_iter": 5000}
    elif case == "x0":
        kwargs = {"x0": np.zeros(c.shape[1])}
    elif case == "backend":
        kwargs = {"backend": "cpu"}
    elif case == "representation":
        kwargs = {"representation": representation}
    elif case == "float32":
        c = c.astype(np.float32)
    elif case == "two columns":
        d = np.c_[d, d]
    elif case == "sparse":
        c = sp.csr_matrix(c)
    elif case == "list":
        d = d.tolist()
    else:
        raise ValueError(f"not a common case: {case!r}")
    return c, d, kwargs
