"""pytest plugin of the mutation runs (``-p mutation_plugin``, see pytest_mutant.sh).

Hypothesis: no shrinking (a failing example kills the mutant as it is; shrinking it costs
seconds to minutes per mutant), no example database (each mutant starts from the same
state) and derandomized generation (the same examples for every mutant, so a session can
be reproduced).  Tests that set their own ``@settings`` keep their max_examples/deadline.
"""

from hypothesis import Phase, settings

settings.register_profile(
    "mutation",
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    database=None,
    derandomize=True,
    print_blob=False,
)
settings.load_profile("mutation")
