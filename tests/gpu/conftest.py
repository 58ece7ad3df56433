"""Shared by the GPU tests: the `timing` marker and the session's work directories.

`timing` marks tests whose verdicts rest on measured time (the stream basis, the sync overhead,
repeatability): tests/gpu/run.sh runs them with the GPU to themselves, and everything else
beside other work. Without run.sh every test runs in order, as `python3 -m pytest tests/gpu`.

$CA_GPU_WORK (default: a fresh directory for the session) holds what the session's tests may
share because it depends only on its inputs: the cuda-agent compile cache of the CLI tests
(`gpu_cache`, content-addressed) and the torch.utils.cpp_extension builds of the example
solutions (`extension_dir(name)`: ninja rebuilds nothing when the sources and flags are the
same), so run.sh's processes build each thing once.
"""

import os
import pathlib

import pytest


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "timing: the verdict rests on measured time (tests/gpu/run.sh runs these "
        "with the GPU to themselves)")


@pytest.fixture(scope="session")
def gpu_work(tmp_path_factory) -> pathlib.Path:
    """$CA_GPU_WORK, else a directory for this session."""
    path = os.environ.get("CA_GPU_WORK")
    if not path:
        return tmp_path_factory.mktemp("gpu-work")
    work = pathlib.Path(path)
    work.mkdir(parents=True, exist_ok=True)
    return work


@pytest.fixture(scope="session")
def gpu_cache(gpu_work) -> pathlib.Path:
    """The cuda-agent compile cache shared by the tests that go through the CLI."""
    return gpu_work / "cache"


@pytest.fixture(scope="session")
def extension_dir(gpu_work):
    """extension_dir(solution name): the build directory of that solution's extension."""
    def path(name: str) -> pathlib.Path:
        d = gpu_work / "ext" / name
        d.mkdir(parents=True, exist_ok=True)
        return d
    return path
