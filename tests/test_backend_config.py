import contextlib
import io
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from snippets import backend_config as bc
from snippets._cli import UsageError, run
from tests.helpers import ROOT, python, section, sh


@pytest.mark.parametrize("name", ["flex.json", "flex_dashed.json"])
def test_both_key_spellings_select_the_diffusers_flex_backend(name):
    assert bc.check(ROOT / "snippets/configs" / name).endswith("-> Diffusers backend 'flex'")


def test_check_command_as_shown(tmp_path, observe):
    shutil.copy(ROOT / "snippets/configs/flex.json", tmp_path / "config.json")
    result = sh(section("snippets/shell/backend_config.sh", "check"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok: config.json: attention_mechanism 'flex' -> Diffusers backend 'flex'\n"
    observe("backend_config.check_ok", result.stdout.strip())


def test_every_mapped_backend_exists_in_diffusers():
    from diffusers.models.attention_dispatch import AttentionBackendName

    for mechanism, backend in bc.DIFFUSERS_BACKENDS.items():
        assert mechanism in bc.MECHANISMS
        AttentionBackendName(backend)  # raises ValueError for a name Diffusers does not know


# The oracle: SimpleTuner itself, its released wheel (make test downloads it from PyPI into build/),
# read without installing it: the argparse choices and default of --attention_mechanism, and the
# Diffusers backend each name selects.
SIMPLETUNER = ("simpletuner", "4.10.1", "c6682347f9b5bdcbdf5b254e816671c219b78b6c3570425e51e9aa470022845f")
FIELDS = "simpletuner/simpletuner_sdk/server/services/field_registry/sections/advanced.py"
BACKENDS = "simpletuner/helpers/training/attention_backend.py"


@pytest.fixture(scope="module")
def simpletuner():
    import ast
    import hashlib
    import zipfile

    name, version, sha256 = SIMPLETUNER
    wheel = ROOT / "build/upstream" / f"{name}-{version}-py3-none-any.whl"
    if not wheel.exists():
        pytest.fail(f"{wheel.relative_to(ROOT)} is missing. Fix: make upstream (make test fetches it)")
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == sha256, "not the released wheel"
    with zipfile.ZipFile(wheel) as z:
        fields, backends = ast.parse(z.read(FIELDS)), ast.parse(z.read(BACKENDS))
    found = {}
    for node in ast.walk(fields):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "attention_mechanisms" for t in node.targets):
            found["choices"] = ast.literal_eval(node.value)
        if isinstance(node, ast.Call) and any(k.arg == "name" and getattr(k.value, "value", "") == "attention_mechanism"
                                              for k in node.keywords):
            found["default"] = next(ast.literal_eval(k.value) for k in node.keywords if k.arg == "default_value")
    for node in ast.walk(backends):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_DIFFUSERS_BACKEND_TARGETS":
            found["targets"] = ast.literal_eval(node.value)
    assert set(found) == {"choices", "default", "targets"}, "SimpleTuner's source changed shape"
    return found


def test_mechanisms_are_exactly_simpletuners_choices(simpletuner):
    assert sorted(bc.MECHANISMS) == sorted(simpletuner["choices"])
    assert len(set(bc.MECHANISMS)) == len(bc.MECHANISMS)


def test_each_mechanism_selects_the_backend_simpletuner_selects(simpletuner):
    for name in bc.MECHANISMS:
        assert bc.DIFFUSERS_BACKENDS.get(name) == simpletuner["targets"].get(name), name


def test_no_mechanism_means_the_simpletuner_default(simpletuner):
    assert bc.mechanism({}) == simpletuner["default"] == "kohaku-fa-auto"
    assert bc.DEFAULT not in bc.DIFFUSERS_BACKENDS


BAD = {
    "bad_json": ('{"attention_mechanism": "flex",}', "not valid JSON (line 1, column 32"),
    "unknown": ('{"attention_mechanism": "flexx"}', "unknown attention_mechanism 'flexx'. Fix: did you mean 'flex'?"),
    "case": ('{"attention_mechanism": "Flex"}', "did you mean 'flex'?"),
    "wrong_type": ('{"attention_mechanism": 1}', "must be a string, got 1"),
    "not_object": ('["flex"]', "the top level is a JSON list"),
    "conflict": ('{"attention_mechanism": "flex", "--attention_mechanism": "xformers"}', "keep only one"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_config_gets_one_line_and_exit_2(tmp_path, case, observe):
    text, expected = BAD[case]
    (tmp_path / "config.json").write_text(text)
    result = python("-m snippets.backend_config check config.json", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: config.json: ")
    assert expected in result.stderr
    observe(f"backend_config.error_{case}", result.stderr.strip())


@pytest.mark.parametrize("target", ["missing.json", "folder", "latin1.json"])
def test_unreadable_file_gets_one_line_and_exit_2(tmp_path, target):
    (tmp_path / "folder").mkdir()
    (tmp_path / "latin1.json").write_bytes('{"attention_mechanism": "fléx"}'.encode("latin-1"))
    result = python(f"-m snippets.backend_config check {target}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Fix:" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_command_gets_one_line():
    result = python("-m snippets.backend_config frobnicate")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "invalid choice" in result.stderr


@given(st.text(max_size=30))
def test_any_string_is_accepted_exactly_when_simpletuner_accepts_it(value):
    if value in bc.MECHANISMS:
        assert bc.mechanism({"attention_mechanism": value}) == value
    else:
        with pytest.raises(UsageError, match="unknown attention_mechanism"):
            bc.mechanism({"attention_mechanism": value})


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200)
@given(st.one_of(JSON, st.dictionaries(st.sampled_from(bc.KEYS), JSON, min_size=1)))
def test_any_json_value_gets_a_verdict_never_a_crash(value):
    try:
        assert bc.mechanism(value if isinstance(value, dict) else {"attention_mechanism": value}) in bc.MECHANISMS
    except UsageError as e:
        assert "Fix: " in str(e) and "\n" not in str(e)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=60) | JSON.map(lambda v: json.dumps({"attention_mechanism": v}).encode()))
def test_any_file_content_gets_exit_0_or_a_one_line_error(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_bytes(data)
        err, out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = run(bc.main, ["check", str(path)])
    assert (code, err.getvalue()) == (0, "") or (code == 2 and err.getvalue().count("\n") == 1)


def test_conflict_error_names_both_keys():
    with pytest.raises(UsageError, match=r"both 'attention_mechanism' and '--attention_mechanism' are set, "
                                         r"to different values"):
        bc.mechanism({"attention_mechanism": "flex", "--attention_mechanism": "xformers"})


def test_list_command_prints_each_mechanism_and_its_diffusers_backend():
    result = python("-m snippets.backend_config list")
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows == [[name, bc.DIFFUSERS_BACKENDS.get(name, "-")] for name in bc.MECHANISMS]


def test_no_command_gets_one_line_and_exit_2():
    result = python("-m snippets.backend_config")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "required: command" in result.stderr
