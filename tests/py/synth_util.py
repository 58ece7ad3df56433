"""Shared helpers of the tests/py/test_synth_*.py files: the harness on sys.path, one crawled
catalog per test process, and where the shared corpora are."""
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "harness"))

import corpora  # noqa: E402

torch = pytest.importorskip("torch", reason="torch is not installed (the synth filters need it)")

_CATALOG = []


def catalog():
    import synth_catalog
    if not _CATALOG:
        _CATALOG.append(synth_catalog.crawl(with_transformers=False))
    return _CATALOG[0]


def kernelbench():
    """The KernelBench tree under the shared corpora, or None."""
    return corpora.find("kernelbench", "level1")


CPU_CFG = {"device": "cpu", "compile_backend": "aot_eager", "min_ms": 0.0, "max_ms": 1e9,
           "max_similarity": 0.9}
