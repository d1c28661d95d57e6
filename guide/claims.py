"""The claims registry: every factual statement of the guide, its tests and its verdict per environment.

    python -m guide claims check    # problems with the registry, its texts and the pages; exit 1 if any
    python -m guide claims status   # each claim's verdict in each recorded environment

claims/registry.yaml lists the claims; claims/<lang>.yaml hold their texts; a page marks a claim
with <!-- claim: ID --> in the section the registry names; records/*.json hold the test outcomes.
"""
import re

from guide import i18n, project, records

MARKER = re.compile(r"<!-- claim: ([\w-]+) -->")
SEEDS = ("confirmed", "corrected", "not-verified")
# The verdict of a claim in one environment, worst first.
VERDICTS = ("failed", "stale", "passed", "skipped", "not-run")


def registry() -> list:
    """The claims; shared, so callers read them and never change them."""
    return project.parsed(project.path("claims/registry.yaml"))


def texts(lang: str) -> dict:
    path = project.path("claims", f"{lang}.yaml")
    return project.parsed(path) if path.exists() else {}


def matches(nodeid: str, test: str) -> bool:
    """A registry test names a test function; its parametrized cases count as that test."""
    return nodeid == test or nodeid.startswith(test + "[")


def by_function(tests: dict) -> dict:
    """A record's test ids grouped by test function ('file::name', parameters dropped)."""
    grouped = {}
    for nodeid in tests:
        grouped.setdefault(nodeid.split("[", 1)[0], []).append(nodeid)
    return grouped


_GROUPED = {}  # id(record["tests"]) -> (tests, its size, grouped): records are parsed once and shared


def verdict(claim: dict, record: dict) -> str:
    """failed, stale (the snippet changed since), passed, skipped (e.g. needs a GPU) or not-run."""
    tests = record["tests"]
    cached = _GROUPED.get(id(tests))
    if cached is None or cached[0] is not tests or cached[1] != len(tests):
        _GROUPED[id(tests)] = cached = (tests, len(tests), by_function(tests))
    found = [(nodeid, tests[nodeid]) for t in claim.get("tests", []) for nodeid in cached[2].get(t, [])]
    if not found:
        return "not-run"
    if any(entry["outcome"] in ("failed", "error") for _, entry in found):
        return "failed"
    if any(entry["source_sha256"] != records.source_hash(nodeid) for nodeid, entry in found):
        return "stale"
    return "passed" if any(entry["outcome"] == "passed" for _, entry in found) else "skipped"


def verdicts(claim: dict, all_records=None) -> dict:
    all_records = records.all_records() if all_records is None else all_records
    return {name: verdict(claim, record) for name, record in all_records.items()}


def overall(by_env: dict) -> str:
    """One word for a page badge: failed, stale, passed or pending (no environment ran it yet)."""
    seen = set(by_env.values())
    for word in ("failed", "stale", "passed"):
        if word in seen:
            return word
    return "pending"


def sections(lang: str, page: str) -> dict:
    """Section id -> (heading text, markdown of the section) of docs/<lang>/<page>."""
    text = i18n.body(i18n.docs() / lang / page)
    parts = re.split(r"^(#{2,6} .*?\{#[\w-]+\})$", text, flags=re.M)
    found = {}
    for heading, body in zip(parts[1::2], parts[2::2]):
        title, anchor = re.match(r"#+ (.*?) \{#([\w-]+)\}", heading).groups()
        found[anchor] = (title, body)
    return found


def test_defined(test: str) -> bool:
    path, _, name = test.partition("::")
    file = project.path(path)
    return file.exists() and re.search(rf"^def {re.escape(name)}\(", file.read_text(encoding="utf-8"), re.M)


def check() -> list:
    """Every problem, one line each: ids, tests, texts, seeds, markers on pages in every language."""
    problems, claims = [], registry()
    ids = [c["id"] for c in claims]
    problems += [f"claim {i!r} is listed twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    for claim in claims:
        cid, seed = claim["id"], claim.get("seed")
        if seed is not None and seed not in SEEDS:
            problems.append(f"claim {cid!r}: seed {seed!r} is not one of {', '.join(SEEDS)}")
        if seed != "not-verified" and not claim.get("tests"):
            problems.append(f"claim {cid!r} has no test: name the test that fails if it becomes false")
        if seed == "not-verified" and (claim.get("tests") or claim.get("page")):
            problems.append(f"claim {cid!r} is not verified, so it has no test and no page")
        for test in claim.get("tests", []):
            if not test_defined(test):
                problems.append(f"claim {cid!r}: test {test} does not exist")
        for lang in project.languages():
            text = texts(lang).get(cid, {})
            need = ["said", "why"] if seed == "not-verified" else ["claim"] + (["said"] if seed else [])
            problems += [f"claims/{lang}.yaml: {cid!r} has no {key!r}" for key in need if not text.get(key)]
            if claim.get("page"):
                if not (i18n.docs() / lang / claim["page"]).exists():
                    problems.append(f"claim {cid!r}: docs/{lang}/{claim['page']} is missing")
                    continue
                section = sections(lang, claim["page"]).get(claim["section"])
                if section is None:
                    problems.append(f"claim {cid!r}: docs/{lang}/{claim['page']} has no section #{claim['section']}")
                elif f"<!-- claim: {cid} -->" not in section[1]:
                    problems.append(f"claim {cid!r}: docs/{lang}/{claim['page']}#{claim['section']} "
                                    f"does not mark it with <!-- claim: {cid} -->")
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
    return 0
