"""The guide's pytest plugin (`-p guide.pytest_plugin`, set in pyproject.toml): GPU tests skip with a
reason on a machine without CUDA; `--record ENV` writes each test's outcome and the outputs tests
observe to records/ENV.json; the `observe` and `records_in_use` fixtures."""
import pytest

from guide import project, records


def pytest_addoption(parser):
    parser.addoption("--record", metavar="ENV",
                     help="write each test's outcome and the outputs tests observe to records/ENV.json "
                          "(auto: cpu or the GPU name)")
    parser.addoption("--gpu-tier", action="store_true",
                     help="run the GPU tests and every other test of a claim that has a GPU test, so that "
                          "such a claim can be verified on the GPU (make verify-gpu)")


def pytest_configure(config):
    project.set_root(config.rootpath)
    config._observed = {}
    config._outcomes = {}


@pytest.fixture
def records_in_use(request):
    """Checks of the committed records skip in a run that is rewriting them (--record)."""
    if request.config.getoption("--record"):
        pytest.skip("this run is writing the records; run `make test` to check them")


@pytest.fixture
def observe(request):
    """observe(id, text): an output the pages show, recorded with --record."""

    def keep(output_id, text):
        assert isinstance(text, str) and text, "an observed output is non-empty text"
        request.config._observed[output_id] = {
            "text": text,
            "test": request.node.nodeid,
            "source_sha256": records.source_hash(request.node.nodeid),
        }
        return text

    return keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each test's outcome for the record: passed, failed or skipped (with the reason)."""
    report = (yield).get_result()
    if not records.sources(records.topic_of(item.nodeid)):
        return  # tests of the site and the records themselves verify no snippet
    if report.when == "call" or report.outcome != "passed":  # setup/teardown count when they fail or skip
        entry = {"outcome": report.outcome, "seconds": round(report.duration, 2),
                 "gpu": "gpu" in item.keywords, "source_sha256": records.source_hash(item.nodeid)}
        if report.skipped:
            entry["reason"] = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if report.failed and report.when != "call":
            entry["outcome"] = "error"
        if item.nodeid not in item.config._outcomes or entry["outcome"] != "passed":
            item.config._outcomes[item.nodeid] = entry


def pytest_sessionfinish(session, exitstatus):
    name = session.config.getoption("--record")
    if name == "auto":  # one record per kind of machine: cpu, or the GPU's name
        name = records.gpu_name()
    if name and session.config._outcomes and exitstatus in (0, 1):  # failures are recorded too
        path = records.save(name, session.config._outcomes, session.config._observed)
        print(f"\nrecorded {len(session.config._outcomes)} tests and {len(session.config._observed)} outputs "
              f"in {project.relative(path)}")


def function_of(nodeid: str) -> str:
    return nodeid.split("[", 1)[0]


def gpu_tier(items) -> tuple:
    """(kept, deselected): the GPU tests, and the other tests of every claim that has a GPU test."""
    from guide import claims

    gpu = {function_of(i.nodeid) for i in items if "gpu" in i.keywords}
    needed = set(gpu)
    for claim in claims.registry():
        if gpu & set(claim.get("tests", [])):
            needed |= set(claim["tests"])
    kept = [i for i in items if function_of(i.nodeid) in needed]
    return kept, [i for i in items if function_of(i.nodeid) not in needed]


def pytest_collection_modifyitems(config, items):
    import torch

    if config.getoption("--gpu-tier"):
        items[:], deselected = gpu_tier(items)
        config.hook.pytest_deselected(items=deselected)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run `make verify-gpu` on a CUDA machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
