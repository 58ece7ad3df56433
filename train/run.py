"""Every enabled stage in order: `python3 -m train.run --config CFG [--stages a,b]`
(train/stages.py)."""

import sys

from train.stages import main

if __name__ == "__main__":
    sys.exit(main())
