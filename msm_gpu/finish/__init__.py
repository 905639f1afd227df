"""The exact finish: from an MSM iterate to the answer a direct solver gives.

MSM's sweeps (paper, Algorithm 1) find the active set of a column fast; the finish solves
the reduced problem on that face exactly and checks the KKT conditions.  :mod:`.run` runs a
whole solve (sweeps, finish, settle), :mod:`.face_solves` holds the face solves (direct,
conjugate gradient, pivoted), :mod:`.terms` the per-penalty face tables and
:mod:`.design_form` the finish that works on the design ``C`` instead of its Gram.
"""
