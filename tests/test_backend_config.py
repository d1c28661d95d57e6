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
from tests.upstream import SIMPLETUNER, upstream_wheel


@pytest.mark.parametrize("name", ["flex.json", "flex_dashed.json"])
def test_both_key_spellings_select_the_diffusers_flex_backend(name):
    assert bc.check(ROOT / "snippets/configs" / name)[-1].endswith("-> Diffusers backend 'flex'")


def test_check_commands_as_shown(tmp_path, observe):
    for suffix in ("json", "toml", "env"):
        shutil.copy(ROOT / f"snippets/configs/flex.{suffix}", tmp_path / f"config.{suffix}")
    result = sh("set -e\n" + section("snippets/shell/backend_config.sh", "check"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "".join(f"ok: config.{suffix}: attention_mechanism 'flex' -> Diffusers backend 'flex'\n"
                                    for suffix in ("json", "toml", "env"))
    observe("backend_config.check_ok", result.stdout.strip())


def test_every_mapped_backend_exists_in_diffusers():
    from diffusers.models.attention_dispatch import AttentionBackendName

    for mechanism, backend in bc.DIFFUSERS_BACKENDS.items():
        assert mechanism in bc.MECHANISMS
        AttentionBackendName(backend)  # raises ValueError for a name Diffusers does not know


# The oracle: SimpleTuner itself, its released wheel (make test downloads it from PyPI into build/),
# read without installing it: the argparse choices and default of --attention_mechanism, and the
# Diffusers backend each name selects.
FIELDS = "simpletuner/simpletuner_sdk/server/services/field_registry/sections/advanced.py"
BACKENDS = "simpletuner/helpers/training/attention_backend.py"


@pytest.fixture(scope="module")
def simpletuner():
    import ast
    import zipfile

    with zipfile.ZipFile(upstream_wheel(SIMPLETUNER)) as z:
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
    assert bc.mechanism(bc.arguments({})) == simpletuner["default"] == "kohaku-fa-auto"
    assert bc.DEFAULT not in bc.DIFFUSERS_BACKENDS


# SimpleTuner's own readers, run from its wheel: mapping_to_cli_args (config.json and config.toml
# become command-line arguments) and parse_env_file (config.env), with the two modules they import
# for logging and state stubbed; then an argparse parser built as SimpleTuner builds
# --attention_mechanism (choices, default, exit_on_error=False).
CLI_UTILS = "simpletuner/helpers/configuration/cli_utils.py"
ENV_FILE = "simpletuner/helpers/configuration/env_file.py"
TEMPLATE_VARS = "simpletuner/helpers/configuration/template_vars.py"


@pytest.fixture(scope="module")
def upstream(simpletuner):
    import argparse
    import sys
    import types
    import zipfile

    wheel = upstream_wheel(SIMPLETUNER)
    stubs = {
        "simpletuner.helpers.training.state_tracker": {"StateTracker": object},
        "simpletuner.helpers.training.multi_process": {"should_log": lambda: False},
    }
    saved = {name: sys.modules.get(name) for name in [*stubs, "simpletuner.helpers.configuration.template_vars"]}
    loaded = {}
    try:
        for name, attrs in stubs.items():
            sys.modules[name] = types.SimpleNamespace(**attrs)
        with zipfile.ZipFile(wheel) as z:
            for path in (TEMPLATE_VARS, CLI_UTILS, ENV_FILE):
                module = types.ModuleType(path[:-3].replace("/", "."))
                exec(compile(z.read(path), path, "exec"), module.__dict__)
                sys.modules[module.__name__] = loaded[path] = module
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    parser = argparse.ArgumentParser(exit_on_error=False, allow_abbrev=False)
    parser.add_argument("--attention_mechanism", choices=simpletuner["choices"], default=simpletuner["default"], type=str)

    def select(args):
        """SimpleTuner's value of attention_mechanism for these arguments, or the ArgumentError."""
        try:
            return parser.parse_known_args(args)[0].attention_mechanism
        except argparse.ArgumentError as e:
            return e

    return types.SimpleNamespace(mapping=loaded[CLI_UTILS].mapping_to_cli_args,
                                 env=loaded[ENV_FILE].parse_env_file, select=select)


def ours(args):
    try:
        return bc.mechanism(args)
    except UsageError as e:
        return e


KEYS = st.sampled_from(["attention_mechanism", "--attention_mechanism", "-attention_mechanism",
                        " attention_mechanism ", "seed", "attention-mechanism"])
VALUES = (st.none() | st.booleans() | st.integers() | st.sampled_from(
    ["flex", "xformers", "Flex", " flex", "false", " FALSE ", "true", "True", "", "kohaku-fa-auto", "native_math"])
    | st.lists(st.sampled_from(["flex"]), max_size=2) | st.dictionaries(st.just("a"), st.just(1), max_size=1)
    | st.text(max_size=8))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(KEYS, VALUES, max_size=4))
def test_a_json_or_toml_mapping_selects_what_simpletuner_selects(upstream, config):
    args = bc.arguments(config)
    assert [a for a in args if "attention_mechanism" in a] == [
        a for a in upstream.mapping(config) if "attention_mechanism" in a]
    theirs, mine = upstream.select(args), ours(args)
    if isinstance(mine, UsageError) and "more than once" in str(mine):  # SimpleTuner silently takes the last
        assert len({a for a in args if a.startswith("--attention_mechanism")}) > 1
    elif isinstance(theirs, Exception):
        assert isinstance(mine, UsageError), (config, theirs)
    else:
        assert mine == theirs


ENV_LINES = st.lists(st.sampled_from([
    'TRAINER_EXTRA_ARGS="--attention_mechanism=flex"', "export TRAINER_EXTRA_ARGS='--attention_mechanism xformers'",
    'TRAINER_EXTRA_ARGS+=" --attention_mechanism=native"', "TRAINER_EXTRA_ARGS+=--seed 1", "TRAINER_EXTRA_ARGS=",
    "# TRAINER_EXTRA_ARGS=--attention_mechanism=flex", "TRAINER_EXTRA_ARGS = --attention_mechanism=Flex",
    "MODEL_TYPE=lora", "not a line", "", 'TRAINER_EXTRA_ARGS="--attention_mechanism"',
    "TRAINER_EXTRA_ARGS=\"--attention_mechanism=flex'", "TRAINER_EXTRA_ARGS='--attention_mechanism=flex\"",
    'TRAINER_EXTRA_ARGS+="--seed=1 --note+=2"',
]), max_size=5)


@settings(max_examples=200, deadline=None)
@given(ENV_LINES)
def test_a_config_env_passes_the_arguments_simpletuner_reads_from_it(upstream, tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("env") / "config.env"
    path.write_text("\n".join(lines) + "\n")
    args = bc.read_config(path)
    assert args == " ".join(upstream.env(str(path)).get("TRAINER_EXTRA_ARGS", [])).split()
    theirs, mine = upstream.select(args), ours(args)
    if isinstance(theirs, Exception):
        assert isinstance(mine, UsageError)
    elif not (isinstance(mine, UsageError) and "more than once" in str(mine)):
        assert mine == theirs


@pytest.mark.parametrize("name", ["flex.toml", "flex.env"])
def test_the_toml_and_env_examples_select_flex_as_simpletuner_reads_them(upstream, name):
    import tomllib

    path = ROOT / "snippets/configs" / name
    theirs = (upstream.mapping(tomllib.loads(path.read_text())) if name.endswith(".toml")
              else " ".join(upstream.env(str(path))["TRAINER_EXTRA_ARGS"]).split())
    assert upstream.select(theirs) == "flex"
    assert bc.check(path) == [f"ok: {path}: attention_mechanism 'flex' -> Diffusers backend 'flex'"]


BAD = {
    "bad_json": ("config.json", '{"attention_mechanism": "flex",}', "not valid JSON (line 1, column 32"),
    "unknown": ("config.json", '{"attention_mechanism": "flexx"}', "unknown attention_mechanism 'flexx'. Fix: did you mean 'flex'?"),
    "case": ("config.json", '{"attention_mechanism": "Flex"}', "did you mean 'flex'?"),
    "number": ("config.json", '{"attention_mechanism": 1}', "unknown attention_mechanism '1'"),
    "not_object": ("config.json", '["flex"]', "the top level is a JSON list"),
    "conflict": ("config.json", '{"attention_mechanism": "flex", "--attention_mechanism": "xformers"}', "keep only one"),
    "bad_toml": ("config.toml", 'attention_mechanism = flex', "not valid TOML (Invalid value (at line 1, column 23))"),
    "no_value": ("config.env", 'TRAINER_EXTRA_ARGS="--attention_mechanism --seed 1"', "set without a value"),
    "deep_json": ("config.json", "[" * 100_000, "nested more than 200 levels deep"),
    "deep_toml": ("config.toml", "a = " + "[" * 100_000, "nested more than 200 levels deep"),
    "format": ("config.yaml", "attention_mechanism: flex", "unknown config format '.yaml'"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_config_gets_one_line_and_exit_2(tmp_path, case, observe):
    name, text, expected = BAD[case]
    (tmp_path / name).write_text(text)
    result = python(f"-m snippets.backend_config check {name}", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"error: {name}: ")
    assert expected in result.stderr
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr
    observe(f"backend_config.error_{case}", result.stderr.strip())


@pytest.mark.parametrize("name", ["config.toml", "config.json"])
def test_a_key_that_looks_like_attention_mechanism_gets_a_warning_and_exit_1(tmp_path, name, observe):
    text = 'attention-mechanism = "flex"\n' if name.endswith(".toml") else '{"Attention_Mechanism": "flex"}'
    (tmp_path / name).write_text(text)
    result = python(f"-m snippets.backend_config check {name}", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == f"ok: {name}: attention_mechanism 'kohaku-fa-auto' selects no Diffusers backend\n"
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"warning: {name}: ")
    assert "rename it to attention_mechanism" in result.stderr
    if name.endswith(".toml"):
        observe("backend_config.warning_misspelt", result.stderr.strip())


@pytest.mark.parametrize("key, warned", [("attention_mechansim", True), ("atention_mechanism", True),
                                         ("attention_mechanisms", True), ("attention_heads", False),
                                         ("attn_mechanism", False), ("attention_mechanism", False)])
def test_misspelt_keys_are_those_close_to_attention_mechanism(key, warned):
    assert bc.misspelt(bc.arguments({key: "flex"})) == ([key] if warned else [])


def test_nesting_is_the_deepest_bracket_level():
    assert [bc.nesting(t) for t in ("{}", "[[]][[[]]]", "[[[]][[[]]]]", '{"a": [1, [2]], "b": {}}', "]]][", "x")] == [1, 3, 4, 3, 1, 0]


def test_an_unknown_value_is_named_whole():
    with pytest.raises(UsageError, match="unknown attention_mechanism 'flex=1'"):
        bc.mechanism(["--attention_mechanism=flex=1"])


def test_a_correct_key_beside_others_gets_no_warning(tmp_path):
    (tmp_path / "config.toml").write_text('attention_mechanism = "flex"\nseed = 1\nattention_heads = 8\n')
    assert bc.check(tmp_path / "config.toml") == [
        f"ok: {tmp_path / 'config.toml'}: attention_mechanism 'flex' -> Diffusers backend 'flex'"]


@pytest.mark.parametrize("target", ["missing.json", "folder", "latin1.json", "fifo.json"])
def test_unreadable_file_gets_one_line_and_exit_2(tmp_path, target, observe):
    import os

    (tmp_path / "folder").mkdir()
    (tmp_path / "latin1.json").write_bytes('{"attention_mechanism": "fléx"}'.encode("latin-1"))
    os.mkfifo(tmp_path / "fifo.json")  # opening it would wait for a writer forever
    result = python(f"-m snippets.backend_config check {target}", cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Fix:" in result.stderr
    assert "Traceback" not in result.stderr
    if target in ("folder", "fifo.json"):
        assert "not a regular file" in result.stderr
    if target == "fifo.json":
        observe("backend_config.error_fifo", result.stderr.strip())


def test_unknown_command_gets_one_line():
    result = python("-m snippets.backend_config frobnicate")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "invalid choice" in result.stderr


@given(st.text(max_size=30))
def test_any_string_is_accepted_exactly_when_simpletuner_accepts_it(value):
    if value in bc.MECHANISMS:
        assert bc.mechanism([f"--attention_mechanism={value}"]) == value
    else:
        with pytest.raises(UsageError, match="unknown attention_mechanism"):
            bc.mechanism([f"--attention_mechanism={value}"])


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["config.json", "config.toml", "config.env"]),
       st.binary(max_size=60) | JSON.map(lambda v: json.dumps({"attention_mechanism": v}).encode()))
def test_any_file_content_gets_exit_0_or_a_one_line_error(name, data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        err, out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = run(bc.main, ["check", str(path)])
    assert (code, err.getvalue()) == (0, "") or (code in (1, 2) and err.getvalue().count("\n") == 1)


def test_list_command_prints_each_mechanism_and_its_diffusers_backend():
    result = python("-m snippets.backend_config list")
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows == [[name, bc.DIFFUSERS_BACKENDS.get(name, "-")] for name in bc.MECHANISMS]


def test_no_command_gets_one_line_and_exit_2():
    result = python("-m snippets.backend_config")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "required: command" in result.stderr
