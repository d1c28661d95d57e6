"""The claims registry: every factual statement of the guide, its tests and its verdict per environment.

    python -m guide claims check    # problems with the registry, its texts and the pages; exit 1 if any
    python -m guide claims status   # each claim's verdict in each recorded environment

claims/registry.yaml lists the claims; claims/<lang>.yaml hold their texts; a page marks a claim
with <!-- claim: ID --> in the section the registry names; records/*.json hold the test outcomes.
"""
import re

from guide import i18n, project, records, scope

MARKER = re.compile(r"<!-- claim: ([\w-]+) -->")
# confirmed: the older statement holds, measured as the same quantity under comparable conditions;
# corrected: it is false, and the claim says what is true; other-quantity: a number of the older
# texts that was not measured as such here, the claim says what was measured instead;
# not-verified: no machine here can check it, so no page repeats it.
SEEDS = ("confirmed", "corrected", "other-quantity", "not-verified")
# The verdict of a claim in one environment, worst first.
VERDICTS = ("failed", "stale", "passed", "skipped", "not-run")


def registry() -> list:
    """The claims; shared, so callers read them and never change them."""
    return project.parsed(project.path("claims/registry.yaml"))


def texts(lang: str) -> dict:
    path = project.path("claims", f"{lang}.yaml")
    return project.parsed(path) if path.exists() else {}


def by_function(tests: dict) -> dict:
    """A record's test ids grouped by test function ('file::name', parameters dropped)."""
    grouped = {}
    for nodeid in tests:
        grouped.setdefault(nodeid.split("[", 1)[0], []).append(nodeid)
    return grouped


def outcomes(name: str, all_records: dict) -> dict:
    """The test outcomes that count for environment `name`: its own record's, except those of tests
    parametrized with another environment's name (checks of that GPU's benchmark record, run on any
    machine), which count for that environment alone, wherever they ran."""
    found = {}
    for record_name, record in all_records.items():
        for nodeid, entry in record["tests"].items():
            target = records.parameter(nodeid)
            if (target if target in all_records else record_name) == name:
                found[nodeid] = entry
    return found


def verdict(claim: dict, tests: dict) -> str:
    """The claim's verdict from one environment's test outcomes ({test id: entry}):
    passed only when every test the claim names ran there, passed, and is current;
    failed when one failed; stale when one ran on other sources or test code than today's;
    skipped (not verified here) when one was skipped or did not run; not-run when none ran."""
    grouped = by_function(tests)
    states = []
    for test in claim.get("tests", []):
        found = grouped.get(test, [])
        if not found:
            states.append("missing")
        for nodeid in found:
            entry = tests[nodeid]
            if entry["outcome"] in ("failed", "error"):
                states.append("failed")
            elif not records.current(entry["source_sha256"], nodeid):
                states.append("stale")
            else:
                states.append("passed" if entry["outcome"] == "passed" else "skipped")
    for word in ("failed", "stale"):
        if word in states:
            return word
    if not states or set(states) == {"missing"}:
        return "not-run"
    return "passed" if set(states) == {"passed"} else "skipped"


def verdicts(claim: dict, all_records=None) -> dict:
    """{environment: verdict} for every recorded environment."""
    all_records = records.all_records() if all_records is None else all_records
    return {name: verdict(claim, outcomes(name, all_records)) for name in all_records}


def overall(by_env: dict) -> str:
    """One word for a page badge: failed or stale if any environment says so; passed if every test
    passed in at least one environment; pending otherwise."""
    seen = set(by_env.values())
    for word in ("failed", "stale", "passed"):
        if word in seen:
            return word
    return "pending"


def is_gpu(record: dict) -> bool:
    return "compute_capability" in record["environment"]


def gate(all_records: dict) -> tuple:
    """(problems, due): what a CPU machine must fail on, and the GPU verifications that are due.

    A problem: a claim's scope is wider than what its tests ran (scope_problems); a claim failed
    anywhere; a claim is stale in a record this machine can re-record
    (the CPU one); a claim passed nowhere and waits for no GPU run. Due: a claim whose GPU verdict
    is stale (its sources or test code changed after the GPU run): its badge says "not verified for
    the current code" until `make verify-gpu` runs again."""
    problems, due = scope_problems(all_records), []
    for claim in registry():
        if claim.get("seed") == "not-verified":
            continue
        by_env = verdicts(claim, all_records)
        gpu_stale = [n for n, v in by_env.items() if v == "stale" and is_gpu(all_records[n])]
        if "failed" in by_env.values():
            problems.append(f"claim {claim['id']!r} fails: {by_env}")
        elif any(v == "stale" and not is_gpu(all_records[n]) for n, v in by_env.items()):
            problems.append(f"claim {claim['id']!r} is stale on the CPU: {by_env}. Fix: make record")
        elif gpu_stale:
            due.append(f"claim {claim['id']!r}: re-run `make verify-gpu` on {', '.join(gpu_stale)}")
        elif "passed" not in by_env.values():
            problems.append(f"claim {claim['id']!r} is verified nowhere: {by_env}. "
                            f"Fix: make record, or make verify-gpu on a CUDA machine")
    return problems, due


def passed_tests(claim: dict, tests: dict) -> dict:
    """The entries of the claim's tests in one environment when every one of them ran and passed there
    (on today's code or older code); {} otherwise: what covers the claim's scope in that environment."""
    grouped = by_function(tests)
    if not claim.get("tests") or any(not grouped.get(test) for test in claim["tests"]):
        return {}
    found = {nodeid: tests[nodeid] for test in claim["tests"] for nodeid in grouped[test]}
    return found if all(entry["outcome"] == "passed" for entry in found.values()) else {}


def scope_problems(all_records=None) -> list:
    """Each claim's scope: written with the known keys and values, and no wider than what its tests
    ran in the environments where the claim passed (or is stale, due for a re-run)."""
    all_records = records.all_records() if all_records is None else all_records
    environments = {name: record["environment"] for name, record in all_records.items()}
    problems = []
    for claim in registry():
        if claim.get("seed") == "not-verified":
            continue
        if scope.form_problems(claim["id"], claim.get("scope")):
            continue  # check() names it
        counted = {name: found for name in all_records if (found := passed_tests(claim, outcomes(name, all_records)))}
        problems += scope.coverage_problems(claim, scope.ran(counted, environments))
    return problems


def sections(lang: str, page: str) -> dict:
    """Section id -> (heading text, markdown of the section) of docs/<lang>/<page>."""
    text = i18n.body(i18n.docs() / lang / page)
    parts = re.split(r"^(#{2,6} .*?\{#[\w-]+\})$", text, flags=re.M)
    found = {}
    for heading, body in zip(parts[1::2], parts[2::2]):
        title, anchor = re.match(r"#+ (.*?) \{#([\w-]+)\}", heading).groups()
        found[anchor] = (title, body)
    return found


def placed(lang: str, claims: list) -> tuple:
    """Where the claims stand in one language: {page: its sections} for the pages that exist, {page: the
    ids it should hold} for those that do not, and [claim] for the claims whose page lacks their section."""
    found, missing_pages = {}, {}
    for claim in (c for c in claims if c.get("page")):
        page = claim["page"]
        if page not in found and page not in missing_pages:
            if (i18n.docs() / lang / page).exists():
                found[page] = sections(lang, page)
            else:
                missing_pages[page] = []
        if page in missing_pages:
            missing_pages[page].append(claim["id"])
    missing_sections = [c for c in claims if c.get("page") in found and c["section"] not in found[c["page"]]]
    return found, missing_pages, missing_sections


def quantity_problems(claim: dict) -> list:
    """A seed verdict on a measurement names the quantity the older text gave and the one measured
    here; `confirmed` needs them to be the same."""
    cid, seed, quantity = claim["id"], claim.get("seed"), claim.get("quantity")
    measures = any(t.startswith("tests/test_bench.py::") for t in claim.get("tests", []))
    if seed in ("confirmed", "corrected", "other-quantity") and measures and not quantity:
        return [f"claim {cid!r}: a seed verdict on a benchmark needs `quantity: {{said: ..., measured: ...}}`. "
                f"Fix: name the older text's quantity and the one the tests measure"]
    if seed == "other-quantity" and not quantity:
        return [f"claim {cid!r}: seed other-quantity needs `quantity: {{said: ..., measured: ...}}`"]
    if quantity and (not isinstance(quantity, dict) or not quantity.get("said") or not quantity.get("measured")):
        return [f"claim {cid!r}: quantity needs both `said` and `measured`"]
    if seed == "confirmed" and quantity and quantity["said"] != quantity["measured"]:
        return [f"claim {cid!r}: seed confirmed, but the older text's quantity ({quantity['said']}) is not the one "
                f"measured ({quantity['measured']}). Fix: seed: other-quantity, and say what was measured"]
    return []


def check() -> list:
    """Every problem, one line each: ids, tests, texts, seeds, markers on pages in every language."""
    problems, claims = [], registry()
    ids = [c["id"] for c in claims]
    problems += [f"claim {i!r} is listed twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    placements = {lang: placed(lang, claims) for lang in project.languages()}
    for claim in claims:
        cid, seed = claim["id"], claim.get("seed")
        if seed is not None and seed not in SEEDS:
            problems.append(f"claim {cid!r}: seed {seed!r} is not one of {', '.join(SEEDS)}")
        problems += quantity_problems(claim)
        if seed == "not-verified" and claim.get("scope"):
            problems.append(f"claim {cid!r} is not verified, so it has no scope")
        if seed != "not-verified" and not claim.get("tests"):
            problems.append(f"claim {cid!r} has no test: name the test that fails if it becomes false")
        if seed == "not-verified" and (claim.get("tests") or claim.get("page")):
            problems.append(f"claim {cid!r} is not verified, so it has no test and no page")
        for test in claim.get("tests", []):
            if not records.test_exists(test):
                problems.append(f"claim {cid!r}: test {test} does not exist")
        for lang in project.languages():
            text = texts(lang).get(cid, {})
            need = ["said", "why"] if seed == "not-verified" else ["claim"] + (["said"] if seed else [])
            problems += [f"claims/{lang}.yaml: {cid!r} has no {key!r}" for key in need if not text.get(key)]
            if claim.get("page"):
                found, missing_pages, _ = placements[lang]
                if claim["page"] in missing_pages:
                    problems.append(f"claim {cid!r}: docs/{lang}/{claim['page']} is missing")
                    continue
                section = found[claim["page"]].get(claim["section"])
                if section is None:
                    problems.append(f"claim {cid!r}: docs/{lang}/{claim['page']} has no section #{claim['section']}")
                elif f"<!-- claim: {cid} -->" not in section[1]:
                    problems.append(f"claim {cid!r}: docs/{lang}/{claim['page']}#{claim['section']} "
                                    f"does not mark it with <!-- claim: {cid} -->")
                else:
                    problems += [f"claim {cid!r}: docs/{lang}/{claim['page']}#{claim['section']} does not show "
                                 f"its figures <!-- bench: {name} -->" for name in claim.get("figures", [])
                                 if f"<!-- bench: {name} -->" not in section[1]]
    problems += [p for claim in claims if claim.get("seed") != "not-verified"
                 for p in scope.form_problems(claim["id"], claim.get("scope"))]
    for lang in project.languages():
        problems += [f"claims/{lang}.yaml: {i!r} is not in claims/registry.yaml"
                     for i in sorted(set(texts(lang)) - set(ids))]
        for page in sorted((i18n.docs() / lang).glob("*.md")):
            problems += [f"docs/{lang}/{page.name} marks {i!r}, which is not in claims/registry.yaml"
                         for i in MARKER.findall(page.read_text(encoding="utf-8")) if i not in ids]
    return problems


def status() -> int:
    """Each claim's verdict in each recorded environment."""
    all_records = records.all_records()
    print(f"{'claim':24} " + " ".join(f"{name:22}" for name in all_records))
    for claim in registry():
        by_env = verdicts(claim, all_records)
        if claim.get("seed") == "not-verified":
            by_env = dict.fromkeys(by_env, "not-verified")
        print(f"{claim['id']:24} " + " ".join(f"{by_env[name]:22}" for name in all_records))
    problems, due = gate(all_records)
    for line in problems:
        print(f"error: {line}")
    for line in due:
        print(f"due: {line}")
    return 1 if problems else 0
