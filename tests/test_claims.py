"""The claims registry: complete, consistent in every language, and verified by current records."""
import json
import shutil

import pytest

from guide import claims, project, records
from tests.helpers import ROOT


def test_registry_texts_and_pages_agree():
    problems = claims.check()
    assert not problems, "\n".join(problems)


def test_every_claim_is_verified_and_current(records_in_use):
    """The gate: no claim fails or is stale anywhere, and every tested claim passed somewhere."""
    all_records = records.all_records()
    bad = {}
    for claim in claims.registry():
        if claim.get("seed") == "not-verified":
            continue
        by_env = claims.verdicts(claim, all_records)
        if claims.overall(by_env) != "passed" or {"failed", "stale"} & set(by_env.values()):
            bad[claim["id"]] = by_env
    assert not bad, f"claims without a current passing record (make record / make verify-gpu): {bad}"
    recorded = {nodeid for r in all_records.values() for nodeid, e in r["tests"].items() if e["outcome"] == "passed"}
    unrecorded = sorted(t for c in claims.registry() for t in c.get("tests", [])
                        if not any(claims.matches(nodeid, t) for nodeid in recorded))
    assert not unrecorded, f"tests of claims that no record shows passing: {unrecorded}"


def test_gpu_claims_are_verified_on_every_recorded_gpu(records_in_use):
    all_records = records.all_records()
    gpus = [name for name, r in all_records.items() if "compute_capability" in r["environment"]]
    assert gpus, "no GPU record: run `make verify-gpu` on a CUDA machine"
    for claim in claims.registry():
        gpu_tests = [nodeid for r in all_records.values() for nodeid, e in r["tests"].items()
                     if e["gpu"] and any(claims.matches(nodeid, t) for t in claim.get("tests", []))]
        if gpu_tests:
            assert all(claims.verdict(claim, all_records[g]) == "passed" for g in gpus), claim["id"]


def test_every_seed_statement_has_a_verdict():
    seeds = [c for c in claims.registry() if c.get("seed")]
    assert {c["seed"] for c in seeds} == set(claims.SEEDS)
    for lang in project.languages():
        said = " ".join(claims.texts(lang)[c["id"]]["said"] for c in seeds)
        # The statements the guide corrects are quoted from the older guide itself.
        assert "build_flex_attention_kernels" in said and "~/.cache/torch/kernels" in said, lang


@pytest.fixture
def copy_of_snippets(tmp_path, monkeypatch):
    """The guide working on a copy of the checkout's data, whose snippets/ a test may change."""
    for name in ("snippets", "tests", "records", "claims", "words", "docs"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", tmp_path)
    monkeypatch.setattr(project, "_root", tmp_path)
    return tmp_path / "snippets"


TEST = "tests/test_troubleshooting.py::test_no_backward_on_cpu"


def current_record():
    """A record made now: one test and its output, with the hashes of the current snippets."""
    return {"environment": {"name": "cpu"},
            "tests": {TEST: {"outcome": "passed", "gpu": False, "source_sha256": records.source_hash(TEST)}},
            "outputs": {"troubleshooting.cpu_backward": {
                "text": "NotImplementedError: ...", "test": TEST,
                "source_sha256": records.source_hash("troubleshooting.cpu_backward")}}}


def test_a_changed_snippet_makes_its_entries_and_claims_stale(copy_of_snippets):
    record = current_record()
    claim = {"id": "cpu-forward-only", "tests": [TEST]}
    assert not records.stale(record) and claims.verdict(claim, record) == "passed"

    path = copy_of_snippets / "troubleshooting.py"
    path.write_text(path.read_text() + "\n# changed\n")

    assert sorted(records.stale(record)) == [TEST, "troubleshooting.cpu_backward"]
    assert claims.verdict(claim, record) == "stale"
    assert claims.overall({"cpu": "stale", "nvidia-h100": "passed"}) == "stale"


def test_a_changed_shell_snippet_counts_too(copy_of_snippets):
    record = current_record()
    assert records.topic_of(TEST) == "troubleshooting"
    kernels_entry = "kernels.where"
    before = records.source_hash(kernels_entry)
    path = copy_of_snippets / "shell" / "kernels.sh"
    path.write_text(path.read_text() + "\n# changed\n")
    assert records.source_hash(kernels_entry) != before
    assert not records.stale(record), "another topic's change leaves this record current"


def test_a_changed_snippet_is_flagged_on_the_page(copy_of_snippets):
    from guide.site import observed, snapshot

    record = current_record()
    (copy_of_snippets.parent / "records/cpu.json").write_text(json.dumps(record))
    for other in copy_of_snippets.parent.glob("records/nvidia-*.json"):
        other.unlink()
    before = snapshot.load(copy_of_snippets.parent)
    assert "Not verified" not in observed.render(before, "troubleshooting.cpu_backward", "en")
    path = copy_of_snippets / "troubleshooting.py"
    path.write_text(path.read_text() + "\n# changed\n")
    after = snapshot.load(copy_of_snippets.parent)
    assert after is not before, "a changed snippet makes a new snapshot"
    assert "Not verified for the current code" in observed.render(after, "troubleshooting.cpu_backward", "en")
    assert "尚未针对当前代码验证" in observed.render(after, "troubleshooting.cpu_backward", "zh")
    assert snapshot.load(copy_of_snippets.parent) is after, "unchanged files: the same snapshot"


def test_failed_skipped_and_missing_outcomes():
    claim = {"id": "x", "tests": ["tests/test_doctor.py::test_doctor_json"]}
    entry = {"outcome": "passed", "gpu": False,
             "source_sha256": records.source_hash("tests/test_doctor.py::test_doctor_json")}
    record = {"tests": {"tests/test_doctor.py::test_doctor_json": entry}}
    assert claims.verdict(claim, record) == "passed"
    assert claims.verdict(claim, {"tests": {}}) == "not-run"
    for outcome, verdict in (("failed", "failed"), ("error", "failed"), ("skipped", "skipped")):
        record["tests"]["tests/test_doctor.py::test_doctor_json"] = {**entry, "outcome": outcome}
        assert claims.verdict(claim, record) == verdict
    assert claims.overall({"cpu": "skipped"}) == "pending"


def test_check_names_each_problem_in_one_line(monkeypatch):
    registry = claims.registry()
    broken = [*registry, registry[0], {"id": "new-claim", "page": "index.md", "section": "nowhere",
                                       "tests": ["tests/test_doctor.py::test_missing"], "seed": "maybe"}]
    monkeypatch.setattr(claims, "registry", lambda: broken)
    problems = claims.check()
    assert f"claim {registry[0]['id']!r} is listed twice" in problems
    assert "claim 'new-claim': seed 'maybe' is not one of confirmed, corrected, not-verified" in problems
    assert "claim 'new-claim': test tests/test_doctor.py::test_missing does not exist" in problems
    assert "claim 'new-claim': docs/zh/index.md has no section #nowhere" in problems
    assert "claims/pt.yaml: 'new-claim' has no 'claim'" in problems
    assert all("\n" not in p for p in problems)


def test_cli_check_and_status():
    from tests.helpers import python

    check = python("-m guide claims check", cwd=ROOT)
    assert check.returncode == 0 and check.stdout.strip().endswith("0 problems"), check.stdout
    status = python("-m guide claims status", cwd=ROOT)
    assert status.returncode == 0 and "cpu-forward-only" in status.stdout
    wrong = python("-m guide claims frobnicate", cwd=ROOT)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1
