"""Shared by the GPU tests: the `timing` marker and the session's work directories.

`timing` marks tests whose verdicts rest on measured time (the stream basis, the sync overhead,
repeatability): tests/gpu/run.sh runs them with the GPU to themselves, and everything else
beside other work. Without run.sh every test runs in order, as `python3 -m pytest tests/gpu`.

$CA_GPU_WORK (default: a fresh directory for the session) holds what the session's tests may
share because it depends only on its inputs: the cuda-agent compile cache of the CLI tests
(`gpu_cache`, content-addressed) and the torch.utils.cpp_extension builds of the example
solutions (`extension_dir(name)`: ninja rebuilds nothing when the sources and flags are the
same), so run.sh's processes build each thing once.

`adv_results` (with `adv_service`) evaluates the adversarial cases (tests/adversarial/gpu/)
the session's tests ask for through one evaluator service, each once: test_adversarial.py's
parametrised `case`s and the names in any test's `adv_cases` marker (test_skill_facts.py).
"""

import os
import pathlib
import sys

import pytest


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "timing: the verdict rests on measured time (tests/gpu/run.sh runs these "
        "with the GPU to themselves)")
    config.addinivalue_line(
        "markers", "adv_cases(*names): adversarial cases (tests/adversarial/gpu/) whose reports "
        "the test reads from the adv_results fixture")


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


def _say(config, line: str) -> None:
    """A progress line on the terminal, past pytest's output capture."""
    capture = config.pluginmanager.get_plugin("capturemanager")
    if capture is None:
        print(line, file=sys.stderr, flush=True)
        return
    with capture.global_and_fixture_disabled():
        print(line, file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def adv_service(tmp_path_factory, pytestconfig):
    """The socket of an evaluator service on CUDA for the session's adversarial cases."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import adversarial_gpu as adv
    try:
        with adv.service(tmp_path_factory.mktemp("adv-service"),
                         lambda line: _say(pytestconfig, line)) as sock:
            yield sock
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def adv_results(adv_service, tmp_path_factory, request) -> dict:
    """{case name: {"report", "error", "seconds"}}: every adversarial case a collected test asks
    for (a parametrised `case`, or a name in an `adv_cases` marker), evaluated up front, several
    at once ($CA_ADV_JOBS, default 4; $CA_ADV_BUDGET_MS per timed function, default 500); every
    report written to $CA_ADV_REPORT as JSON when it is set."""
    import adversarial_gpu as adv
    wanted: set[str] = set()
    for item in request.session.items:
        case = getattr(item, "callspec", None) and item.callspec.params.get("case")
        if isinstance(case, adv.Case):
            wanted.add(case.name)
        for mark in item.iter_markers("adv_cases"):
            wanted.update(mark.args)
    if not wanted:
        return {}
    cases = adv.load_cases(sorted(wanted))
    out = adv.evaluate_cases(cases, adv_service, tmp_path_factory.mktemp("adv-ws"),
                             int(os.environ.get("CA_ADV_JOBS", "4")),
                             os.environ.get("CA_ADV_BUDGET_MS", "500"),
                             lambda line: _say(request.config, line))
    if os.environ.get("CA_ADV_REPORT"):
        adv.write_summary(os.environ["CA_ADV_REPORT"], cases, out)
    return out
