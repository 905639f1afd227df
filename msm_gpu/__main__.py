"""``python -m msm_gpu demo``: same as the ``msm-gpu`` console script."""

import sys

from .demo.cli import main

sys.exit(main())
