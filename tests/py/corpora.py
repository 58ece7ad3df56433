"""Where the shared corpora of real inputs are (../shared/corpora/README.md): public data no one
on this project wrote, read by tests that skip with a printed reason where it is absent."""
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
BASES = (os.environ.get("CA_CORPORA"), ROOT.parent / "shared" / "corpora", "/work/shared/corpora")


def find(name, marker):
    """The corpus folder `name` (holding `marker`) under $CA_CORPORA, ../shared/corpora or
    /work/shared/corpora, or None."""
    for base in BASES:
        if base and (pathlib.Path(base) / name / marker).exists():
            return pathlib.Path(base) / name
    return None


def where():
    return " or ".join(str(b) for b in BASES if b)
