"""``python -m msm_gpu demo``: same as the ``msm-gpu`` console script."""

import sys

from .cli import main

sys.exit(main())
