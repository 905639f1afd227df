"""The ``msm-gpu demo`` command: batched NNLS next to SciPy, then the paper's Figure 1.

:mod:`.cli` is the command line; :mod:`.study` runs the comparisons.  It uses only the
public namespace, as a user would.
"""
