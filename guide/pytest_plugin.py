"""The guide's pytest plugin (`-p guide.pytest_plugin`, set in pyproject.toml): GPU tests skip with a
reason on a machine without CUDA; `--record ENV` writes each test's outcome and the outputs tests
observe to records/ENV.json; the `observe` and `records_in_use` fixtures."""
import contextlib
import gc
import tempfile
from pathlib import Path

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
    if config.getoption("--gpu-tier") and not hasattr(config, "workerinput"):
        import concurrent.futures

        from guide import setup_check

        # checked while the workers start (pytest_sessionstart), which takes as long
        config.stash[CHECK] = concurrent.futures.ThreadPoolExecutor(1).submit(setup_check.check, True)
    config.pluginmanager.register(Recorder(config), "guide-recorder")


def source_hash(config, nodeid):
    """The hash of a test's sources in the checkout under test, also while the test points the guide at a
    copy of it (the `checkout` fixture), whose files it may have changed."""
    pointed = project.root()
    project.set_root(config.rootpath)
    try:
        return records.source_hash(nodeid)
    finally:
        project.set_root(pointed)


CHECK, SETUP = pytest.StashKey(), pytest.StashKey()  # the GPU tier's setup check, and the line it gave


@pytest.hookimpl(wrapper=True)
def pytest_sessionstart(session):
    """A machine that cannot run the GPU tier stops it here, once the workers are starting (xdist
    starts them in this hook) and before any test runs, in one line."""
    started = yield
    if (check := session.config.stash.get(CHECK, None)) is not None:
        try:
            session.config.stash[SETUP] = check.result()
        except project.GuideError as e:
            raise pytest.UsageError(str(e)) from None
    return started


def pytest_terminal_summary(terminalreporter, config):
    if line := config.stash.get(SETUP, None):
        terminalreporter.write_line(line)


@pytest.fixture
def records_in_use(request):
    """Checks of the committed records skip in a run that is rewriting them (--record)."""
    if request.config.getoption("--record"):
        pytest.skip("this run is writing the records; run `make test` to check them")


@pytest.fixture
def observe(request):
    """observe(id, text): an output the pages show, recorded with --record. It travels with the
    test's report, so that a run spread over pytest-xdist workers records it too."""

    def keep(output_id, text):
        assert isinstance(text, str) and text, "an observed output is non-empty text"
        request.node.user_properties.append(("observed", (output_id, {
            "text": text,
            "test": request.node.nodeid,
            "source_sha256": source_hash(request.config, request.node.nodeid),
        })))
        return text

    return keep


@pytest.fixture
def ran(request):
    """ran(dtypes=torch.bfloat16, head_dims=64, ...): what this test ran, recorded beside its outcome, so
    that a claim's scope is checked against it (guide/scope.py). Call it for each case the test runs;
    a value may be one value or a list."""
    from guide import scope

    def keep(**found):
        unknown = set(found) - set(scope.RAN_KEYS)
        assert not unknown, f"ran() takes {', '.join(scope.RAN_KEYS)}, not {', '.join(sorted(unknown))}"
        for key, value in found.items():
            for v in value if isinstance(value, (list, tuple, set)) else [value]:
                request.node.user_properties.append(("ran", (key, scope.normalise(key, v))))

    return keep


class Recorder:
    """Each test's outcome (passed, failed or skipped with the reason) and the outputs it observed,
    read from the test reports: in one process, or in the controller of a pytest-xdist run, where
    every worker's reports arrive."""

    def __init__(self, config):
        self.config = config
        self.outcomes = {}
        self.observed = {}
        self.seen = {}  # test id -> what it ran (the `ran` fixture), for the scopes of its claims
        self.deselected = set()  # collected and not run (-k, -m, the GPU tier): their records stay

    def pytest_deselected(self, items):
        self.deselected.update(item.nodeid for item in items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        """pytest-xdist: a worker collected, and deselected, for the controller that records."""
        self.deselected.update(getattr(node, "workeroutput", {}).get("deselected", ()))

    def pytest_runtest_logreport(self, report):
        # Each property is a (name, value) pair, as pytest's --junitxml expects.
        found = {}
        for name, value in report.user_properties:
            if name == "observed":
                self.observed[value[0]] = value[1]
            elif name == "ran" and report.passed:
                found.setdefault(value[0], set()).add(value[1])
        if found and report.when == "call":
            self.seen[report.nodeid] = {key: sorted(vals) for key, vals in sorted(found.items())}
        if not records.sources(records.topic_of(report.nodeid)):
            return  # tests of the site and the records themselves verify no snippet
        if report.when == "call" or report.outcome != "passed":  # setup/teardown count when they fail or skip
            entry = {"outcome": report.outcome, "seconds": round(report.duration, 2),
                     "gpu": "gpu" in report.keywords, "source_sha256": source_hash(self.config, report.nodeid)}
            if report.nodeid in self.seen and report.passed:
                entry["ran"] = self.seen[report.nodeid]
            if report.skipped:
                longrepr = report.longrepr
                entry["reason"] = longrepr[2] if isinstance(longrepr, (tuple, list)) else str(longrepr)
            if report.failed and report.when != "call":
                entry["outcome"] = "error"
            if report.nodeid not in self.outcomes or entry["outcome"] != "passed":
                self.outcomes[report.nodeid] = entry

    def pytest_sessionfinish(self, session, exitstatus):
        if hasattr(self.config, "workerinput"):
            self.config.workeroutput["deselected"] = sorted(self.deselected)
            return  # a pytest-xdist worker: its controller records the run
        name = self.config.getoption("--record")
        if name == "auto":  # one record per kind of machine: cpu, or the GPU's name
            name = records.gpu_name()
        if name and self.outcomes and exitstatus in (0, 1):  # failures are recorded too
            named = {arg.split("[", 1)[0] for arg in self.config.args if "::" in arg and "[" in arg}
            path = records.save(name, self.outcomes, self.observed, self.deselected, named)
            print(f"\nrecorded {len(self.outcomes)} tests and {len(self.observed)} outputs "
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


TURN = pytest.StashKey()


@contextlib.contextmanager
def turn(folder: Path):
    """A test's turn among the workers of one run, which share a machine and its GPU: a shared lock,
    held while the test runs. alone() turns it into the only one for a part of the test."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "running", "w") as running:
        fcntl.flock(running, fcntl.LOCK_SH)
        try:
            yield running
        finally:
            fcntl.flock(running, fcntl.LOCK_UN)


@contextlib.contextmanager
def alone_in(running):
    """The part of a test that must have the machine to itself (it measures time or memory, or
    exhausts the GPU's memory): it starts when no other worker's test runs, and no test starts until
    it ends. Its test waits there; the others go on until none is left running."""
    import fcntl

    fcntl.flock(running, fcntl.LOCK_EX)  # from shared to exclusive: the lock is let go, then taken
    try:
        yield
    finally:
        fcntl.flock(running, fcntl.LOCK_SH)


@pytest.fixture
def alone(request):
    """`with alone():` the part of the test that must have the machine to itself (alone_in); the
    test's compiles and other work come before it, shared with the other workers. Such a test
    comes first in the order (longest_first), so that its compiles run beside the other tests;
    its part that runs alone then waits for them to finish."""
    running = request.node.stash.get(TURN, None)
    return (lambda: alone_in(running)) if running else contextlib.nullcontext


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """In a run spread over pytest-xdist workers that share a machine and its GPU: each test takes its
    turn (turn), and gives back the GPU memory its process cached, for the next test of any worker."""
    if not hasattr(item.config, "workerinput"):
        yield
        return
    folder = Path(tempfile.gettempdir()) / f"guide-turns-{item.config.workerinput['testrunuid']}"
    with turn(folder) as running:
        item.stash[TURN] = running
        yield
        import torch

        if torch.cuda.is_initialized():
            gc.collect()
            torch.cuda.empty_cache()


def longest_first(items, workers: int) -> None:
    """Order a run spread over pytest-xdist workers so that no long chain of work is left to the end:
    first the tests with a part that runs alone (their compiles run beside the other tests, and that
    part waits until the others are done), then the others by the seconds each took in this machine's
    record, longest first (a test without a recorded time before them), and last the tests marked
    `cached`, which run what other tests compile and find it in the compile caches after them.
    xdist's load scheduler (with --maxschedchunk 2) starts each worker on two consecutive tests, run
    one after the other: each worker starts on one of the longest tests, followed by one of the
    shortest, so that no test waits long behind another (nor until the end behind a test that runs
    alone)."""
    seconds = records.load(records.gpu_name())["tests"]

    ordered = sorted(items, key=lambda item: -seconds.get(item.nodeid, {}).get("seconds", float("inf")))
    alone = [item for item in ordered if "alone" in item.fixturenames]
    cached = [item for item in ordered if item.get_closest_marker("cached") and item not in alone]
    first = alone + [item for item in ordered if item not in alone and item not in cached]
    n = min(workers, len(first) // 2)
    shortest = first[::-1][:n]
    items[:] = [item for pair in zip(first[:n], shortest) for item in pair] + first[n:len(first) - n] + cached


def pytest_collection_modifyitems(config, items):
    import torch

    if config.getoption("--gpu-tier"):
        items[:], deselected = gpu_tier(items)
        config.hook.pytest_deselected(items=deselected)
    if hasattr(config, "workerinput"):  # every worker orders the same collection the same way
        longest_first(items, config.workerinput["workercount"])
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run `make verify-gpu` on a CUDA machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
