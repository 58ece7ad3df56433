"""Stage entry point: `python3 -m train.collect --config CFG` (train/stages.py)."""

import sys

from train.stages import main

if __name__ == "__main__":
    sys.exit(main("collect"))
