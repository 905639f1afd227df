"""Tools for the people who work on the package, not used by it at run time.

``python -m msm_gpu.devtools.layers`` checks the import graph against the package's floors.
"""
