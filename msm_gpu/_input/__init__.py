"""From the user's arrays to a checked, classified problem.

:mod:`.validation` checks arguments (clear errors naming them), :mod:`.stats` and
:mod:`.scaling` measure and rescale the data, :mod:`.problem` builds the quadratic
``(A, R)`` from a design and :mod:`.design` keeps the design form ``C, d`` for the
objective and the wide and sparse roads.
"""
