"""The Python tier's needs: where $TEST_REQUIRE (tests/unit/test.h, tests/it/lib.sh) lists
"torch" or "pyarrow", this interpreter must import it, else the whole tier fails at start-up
instead of skipping the files that need it (CI names what its machine has)."""

import importlib
import os

import pytest

NEEDS = {"torch": "torch", "pyarrow": "pyarrow"}


def pytest_configure(config):
    required = set(filter(None, os.environ.get("TEST_REQUIRE", "").split(",")))
    for need in sorted(required & NEEDS.keys()):
        try:
            importlib.import_module(NEEDS[need])
        except ImportError as exc:
            raise pytest.UsageError(
                f'TEST_REQUIRE says this host has "{need}", but this Python cannot import '
                f"{NEEDS[need]}: {exc}") from None
