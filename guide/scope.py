"""Where a claim holds: its `scope` in claims/registry.yaml, and what its tests really ran.

A claim's scope names the PyTorch versions, devices, dtypes, head dimensions, lengths and kinds of
input where the statement holds. Tests record what they ran with the `ran` fixture
(`ran(dtypes=torch.bfloat16, head_dims=64)`), which the records keep per test (`"ran"`); the
environment stamp of each record adds its device and its PyTorch and Diffusers versions. A scope
may say no more than that: every value it names must have been run by one of the claim's tests in
an environment where all of them passed (or passed on older code: a stale GPU record is due for a
re-run, reported by `claims status`, and its badge says so).

    scope:
      devices: [H100, H200]
      torch: ["2.11"]
      dtypes: [bfloat16, float16]
      head_dims: [64, 128]
      lengths: {from: 1, to: 4096}     # a range: its tests ran both ends

`since` (the oldest PyTorch a statement claims) is covered by a test that checked the code against
that version's API as read from its source (claims/torch_api.yaml), recorded as `ran(torch_api=...)`.
"""
import re

# The keys a scope may have, and where their values come from: the record's environment or `ran`.
FROM_ENVIRONMENT = ("devices", "torch", "diffusers", "transformers")
FROM_TESTS = ("since", "dtypes", "head_dims", "lengths", "batch", "heads", "backends", "modes", "passes",
              "flash_attn_4", "simpletuner")
KEYS = FROM_ENVIRONMENT + FROM_TESTS
# What each key's values may be; other keys hold numbers (ints) or versions (strings).
CHOICES = {
    "devices": ("CPU", "H100", "H200"),
    "dtypes": ("float64", "float32", "bfloat16", "float16"),
    "backends": ("triton", "flash", "cudnn", "fa2", "efficient", "math"),
    "modes": ("eager", "compiled"),
    "passes": ("forward", "backward"),
}
NUMBERS = ("head_dims", "lengths", "batch", "heads")
VERSIONS = ("torch", "since", "diffusers", "transformers", "flash_attn_4", "simpletuner")
RAN_KEYS = FROM_TESTS[1:] + ("torch_api", "inputs")  # what a test may record; `since` is covered by torch_api


def device(environment: dict) -> str:
    """CPU, or the GPU's short name: 'NVIDIA H100 80GB HBM3' -> 'H100'."""
    if "compute_capability" not in environment:
        return "CPU"
    found = re.search(r"\b([A-Z]+\d{2,4}[A-Z]?)\b", environment.get("gpu", ""))
    return found.group(1) if found else environment.get("gpu", "GPU")


def minor(version: str) -> str:
    """'2.11.0+cu130' -> '2.11'."""
    return ".".join(re.split(r"[.+]", str(version))[:2])


def normalise(key: str, value):
    """A value as a scope writes it: torch.bfloat16 -> 'bfloat16', 64 -> 64, a version -> a string."""
    if key == "dtypes":
        return str(value).removeprefix("torch.")
    if key in NUMBERS:
        return int(value)
    return str(value)


def values(scope_value) -> list:
    """A scope's values for one key: a list, one value, or a range {from, to} (its two ends)."""
    if isinstance(scope_value, dict):
        return [scope_value["from"], scope_value["to"]]
    return list(scope_value) if isinstance(scope_value, (list, tuple)) else [scope_value]


def form_problems(cid: str, scope) -> list:
    """What is wrong with how a scope is written, without looking at the records."""
    if not isinstance(scope, dict) or not scope:
        return [f"claim {cid!r} has no scope. Fix: add `scope:` with where it holds "
                f"(devices, torch, dtypes, head_dims, lengths, ...; guide/scope.py)"]
    problems = []
    for key, value in scope.items():
        if key not in KEYS:
            problems.append(f"claim {cid!r}: scope key {key!r} is not one of {', '.join(KEYS)}")
            continue
        if isinstance(value, dict) and (key not in NUMBERS or set(value) != {"from", "to"}):
            problems.append(f"claim {cid!r}: scope {key} is a range; only {', '.join(NUMBERS)} take "
                            f"{{from: N, to: M}}")
            continue
        if key == "since" and isinstance(value, (list, dict)):
            problems.append(f"claim {cid!r}: scope since is one version, such as \"2.5\"")
            continue
        for v in values(value):
            if key in CHOICES and v not in CHOICES[key]:
                problems.append(f"claim {cid!r}: scope {key} {v!r} is not one of {', '.join(CHOICES[key])}")
            elif key in NUMBERS and (not isinstance(v, int) or isinstance(v, bool)):
                problems.append(f"claim {cid!r}: scope {key} {v!r} is not a whole number")
            elif key in VERSIONS and not (isinstance(v, str) and re.fullmatch(r"\d+(\.\w+)+", v)):
                problems.append(f"claim {cid!r}: scope {key} {v!r} is not a version in quotes, such as \"2.11\"")
    if "devices" not in scope or "torch" not in scope:
        problems.append(f"claim {cid!r}: its scope names no {'devices' if 'devices' not in scope else 'torch'}. "
                        f"Fix: every claim says where it ran (devices) and on which PyTorch (torch)")
    return problems


def ran(tests_by_env: dict, environments: dict) -> dict:
    """{key: set of values} that a claim's tests ran, over the environments where its verdict is
    passed or stale (tests_by_env: {env: {test id: entry}} restricted to those environments)."""
    found = {}
    for env, tests in tests_by_env.items():
        environment = environments[env]
        found.setdefault("devices", set()).add(device(environment))
        found.setdefault("torch", set()).add(minor(environment.get("torch", "")))
        for package in ("diffusers", "transformers"):  # the versions the record's stamp names
            if environment.get(package):
                found.setdefault(package, set()).add(environment[package])
        for entry in tests.values():
            for key, vals in entry.get("ran", {}).items():
                found.setdefault("since" if key == "torch_api" else key, set()).update(
                    normalise("since" if key == "torch_api" else key, v) for v in vals)
    return found


def coverage_problems(claim: dict, found: dict) -> list:
    """Where the scope says more than the tests ran: a value no test ran, or a range whose ends
    no test reached."""
    cid, problems = claim["id"], []
    for key, value in (claim.get("scope") or {}).items():
        have = found.get(key, set())
        if isinstance(value, dict):
            numbers = sorted(v for v in have if isinstance(v, int))
            if not numbers or numbers[0] > value["from"] or numbers[-1] < value["to"]:
                span = f"{numbers[0]} to {numbers[-1]}" if numbers else "nothing"
                problems.append(f"claim {cid!r}: scope {key} {value['from']} to {value['to']} is wider than its "
                                f"tests ran ({span}). Fix: narrow the scope and the sentence, or test the rest")
            continue
        missing = [v for v in values(value) if normalise(key, v) not in have]
        if missing:
            shown = ", ".join(str(v) for v in sorted(have, key=str)) or "nothing"
            problems.append(f"claim {cid!r}: scope {key} names {', '.join(map(str, missing))}, which its tests "
                            f"did not run where they passed (they ran: {shown}). Fix: narrow the scope and "
                            f"the sentence, or test it there")
    return problems
