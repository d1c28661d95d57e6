import contextlib
import io
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from snippets import backend_config as bc
from snippets._cli import UsageError, run
from tests.helpers import ROOT, python, section, sh
from tests.upstream import SIMPLETUNER, upstream_wheel


@pytest.mark.parametrize("name", ["flex.json", "flex_dashed.json"])
def test_both_key_spellings_select_the_diffusers_flex_backend(name):
    assert bc.check(ROOT / "snippets/configs" / name).endswith("-> Diffusers backend 'flex'")


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


def test_mechanisms_are_exactly_simpletuners_choices(simpletuner, ran):
    ran(simpletuner=SIMPLETUNER[1])
    assert sorted(bc.MECHANISMS) == sorted(simpletuner["choices"])
    assert len(set(bc.MECHANISMS)) == len(bc.MECHANISMS)


def test_each_mechanism_selects_the_backend_simpletuner_selects(simpletuner, ran):
    ran(simpletuner=SIMPLETUNER[1])
    for name in bc.MECHANISMS:
        assert bc.DIFFUSERS_BACKENDS.get(name) == simpletuner["targets"].get(name), name


def test_no_mechanism_means_the_simpletuner_default(simpletuner, ran):
    ran(simpletuner=SIMPLETUNER[1])
    assert bc.mechanism(bc.arguments({})) == simpletuner["default"] == "kohaku-fa-auto"
    assert bc.DEFAULT not in bc.DIFFUSERS_BACKENDS


# SimpleTuner's own readers, run from its wheel: mapping_to_cli_args (config.json and config.toml
# become command-line arguments) and parse_env_file (config.env), with the two modules they import
# for logging and state stubbed; then SimpleTuner's command-line parser: every option of its field
# registry (run from the wheel, the modules it imports for choices stubbed), added as
# cmd_args.get_argument_parser adds them to argparse.ArgumentParser(exit_on_error=False) (abbreviations
# allowed), read with parse_args (an unknown option stops it). --attention_mechanism has its choices
# and default; the other options take any value or none, so that only attention_mechanism decides.
CLI_UTILS = "simpletuner/helpers/configuration/cli_utils.py"
ENV_FILE = "simpletuner/helpers/configuration/env_file.py"
TEMPLATE_VARS = "simpletuner/helpers/configuration/template_vars.py"
REGISTRY = "simpletuner/simpletuner_sdk/server/services/field_registry/"
MODEL_FIELDS = "simpletuner/helpers/models/field_registry/"


@pytest.fixture(scope="module")
def simpletuner_options(tmp_path_factory):
    """The option strings of SimpleTuner's parser, one list per option, as _populate_parser_from_field_registry
    and _add_argument_from_field (cmd_args.py) take them from its field registry."""
    import sys
    import types
    import zipfile

    folder = tmp_path_factory.mktemp("simpletuner")
    with zipfile.ZipFile(upstream_wheel(SIMPLETUNER)) as z:
        z.extractall(folder, [n for n in z.namelist() if n.startswith((REGISTRY, MODEL_FIELDS))])
    packages = ["simpletuner", "simpletuner.helpers", "simpletuner.helpers.models", "simpletuner.helpers.training",
                "simpletuner.helpers.image_manipulation", "simpletuner.simpletuner_sdk",
                "simpletuner.simpletuner_sdk.server", "simpletuner.simpletuner_sdk.server.services"]
    stubs = {  # what the registry imports for its choices; the option names do not depend on them
        "simpletuner.helpers.training": {"quantised_precision_levels": []},
        "simpletuner.helpers.training.optimizer_param": {"available_optimizer_keys": lambda: ["adamw_bf16"]},
        "simpletuner.helpers.image_manipulation.nsfw_classifier": {"DEFAULT_NSFW_CHECK_MODELS_CSV": ""},
        "simpletuner.helpers.models.registry": {"ModelRegistry": types.SimpleNamespace(model_families=dict)},
    }
    saved = {name: module for name, module in sys.modules.items() if name.startswith("simpletuner")}
    try:
        for name in packages + list(stubs):
            module = types.ModuleType(name)
            module.__path__ = [str(folder / name.replace(".", "/"))]
            module.__dict__.update(stubs.get(name, {}))
            sys.modules[name] = module
        registry = __import__(REGISTRY.rstrip("/").replace("/", ".") + ".registry", fromlist=["field_registry"])
        fields = list(registry.field_registry._fields.values())
    finally:
        for name in [name for name in sys.modules if name.startswith("simpletuner")]:
            del sys.modules[name]
        sys.modules.update(saved)
    seen, options = set(), []
    for field in fields:  # _populate_parser_from_field_registry's filter, then _add_argument_from_field's names
        name = field.arg_name
        if not name or not name.startswith("--") or name == "--help" or field.default_value == "==SUPPRESS==" or name in seen:
            continue
        seen.add(name)
        strings = [name, *(field.aliases or [])]
        options.append([o for i, o in enumerate(strings) if o not in strings[:i]])
    assert len(options) > 500 and [bc.OPTION] in options, "SimpleTuner's field registry changed shape"
    return options


@pytest.fixture(scope="module")
def upstream(simpletuner, simpletuner_options):
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
    parser = argparse.ArgumentParser(exit_on_error=False)
    collect = argparse.ArgumentParser(exit_on_error=False)  # every value attention_mechanism is given
    for strings in simpletuner_options:
        if strings[0] == bc.OPTION:
            parser.add_argument(*strings, choices=simpletuner["choices"], default=simpletuner["default"], type=str)
            collect.add_argument(*strings, action="append", default=[])
        else:
            parser.add_argument(*strings, nargs="?", const=True)
            collect.add_argument(*strings, nargs="?", const=True)

    def select(args):
        """SimpleTuner's value of attention_mechanism for these arguments, or the error that stops it
        (argparse raises ArgumentError, or before Python 3.13 prints the error and exits)."""
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):
                return parser.parse_args(args).attention_mechanism
        except argparse.ArgumentError as e:
            return e
        except SystemExit:
            return ValueError(said.getvalue().strip().splitlines()[-1])

    return types.SimpleNamespace(mapping=loaded[CLI_UTILS].mapping_to_cli_args, env=loaded[ENV_FILE].parse_env_file,
                                 select=select, values=lambda args: collect.parse_args(args).attention_mechanism,
                                 options=simpletuner_options)


def ours(args):
    try:
        return bc.mechanism(args)
    except UsageError as e:
        return e


KEYS = st.sampled_from(["attention_mechanism", "--attention_mechanism", "-attention_mechanism",
                        " attention_mechanism ", "seed", "attention-mechanism", "attention_mech", "at",
                        "-attention", "Attention_Mechanism", "attention_mechanisms"])
VALUES = (st.none() | st.booleans() | st.integers() | st.sampled_from(
    ["flex", "xformers", "Flex", " flex", "false", " FALSE ", "true", "True", "", "kohaku-fa-auto", "native_math"])
    | st.lists(st.sampled_from(["flex"]), max_size=2) | st.dictionaries(st.just("a"), st.just(1), max_size=1)
    | st.text(max_size=8))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(KEYS, VALUES, max_size=4))
@example({"attention_mechanism": "false"})  # each text that reads as a boolean, every time, not only when drawn
@example({"attention_mechanism": " FALSE ", "--attention_mechanism": "true"})
@example({"attention_mechanism": "True"})
def test_a_json_or_toml_mapping_selects_what_simpletuner_selects(upstream, ran, config):
    ran(simpletuner=SIMPLETUNER[1])
    args = bc.arguments(config)
    assert [a for a in args if not a.startswith("--seed")] == [
        a for a in upstream.mapping(config) if not a.startswith("--seed")]
    same(upstream, args)


def same(upstream, args):
    """The check selects what SimpleTuner selects, or refuses what stops SimpleTuner."""
    theirs, mine = upstream.select(args), ours(args)
    if isinstance(mine, UsageError) and "more than once" in str(mine):  # SimpleTuner silently takes the last
        assert len(set(upstream.values(args))) > 1, args
    elif isinstance(theirs, Exception):
        assert isinstance(mine, UsageError), (args, theirs)
    else:
        assert mine == theirs, (args, mine)


ENV_LINES = st.lists(st.sampled_from([
    'TRAINER_EXTRA_ARGS="--attention_mechanism=flex"', "export TRAINER_EXTRA_ARGS='--attention_mechanism xformers'",
    'TRAINER_EXTRA_ARGS+=" --attention_mechanism=native"', "TRAINER_EXTRA_ARGS+=--seed 1", "TRAINER_EXTRA_ARGS=",
    "# TRAINER_EXTRA_ARGS=--attention_mechanism=flex", "TRAINER_EXTRA_ARGS = --attention_mechanism=Flex",
    "MODEL_TYPE=lora", "not a line", "", 'TRAINER_EXTRA_ARGS="--attention_mechanism"',
    "TRAINER_EXTRA_ARGS=\"--attention_mechanism=flex'", "TRAINER_EXTRA_ARGS='--attention_mechanism=flex\"",
    'TRAINER_EXTRA_ARGS+="--seed=1 --tracker_run_name=a+=2"', "TRAINER_EXTRA_ARGS+=--attention_mech native",
    'TRAINER_EXTRA_ARGS+=" -attention_mechanism=flex"', "TRAINER_EXTRA_ARGS+=--at=flex",
    "TRAINER_EXTRA_ARGS+=--attention-mechanism=flex",
]), max_size=5)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ENV_LINES)
def test_a_config_env_passes_the_arguments_simpletuner_reads_from_it(upstream, ran, tmp_path_factory, lines):
    ran(simpletuner=SIMPLETUNER[1])
    path = tmp_path_factory.mktemp("env") / "config.env"
    path.write_text("\n".join(lines) + "\n")
    args = bc.read_config(path)
    assert args == " ".join(upstream.env(str(path)).get("TRAINER_EXTRA_ARGS", [])).split()
    same(upstream, args)


@pytest.mark.parametrize("name", ["flex.toml", "flex.env"])
def test_the_toml_and_env_examples_select_flex_as_simpletuner_reads_them(upstream, ran, name):
    import tomllib

    ran(simpletuner=SIMPLETUNER[1])
    path = ROOT / "snippets/configs" / name
    theirs = (upstream.mapping(tomllib.loads(path.read_text())) if name.endswith(".toml")
              else " ".join(upstream.env(str(path))["TRAINER_EXTRA_ARGS"]).split())
    assert upstream.select(theirs) == "flex"
    assert bc.check(path) == f"ok: {path}: attention_mechanism 'flex' -> Diffusers backend 'flex'"


TOML_FILE = "simpletuner/helpers/configuration/toml_file.py"


def test_simpletuner_reads_toml_with_the_toml_package_and_the_check_with_tomllib(ran):
    """What the page says of TOML: SimpleTuner 4.10.1 parses config.toml with the `toml` package, which its
    wheel requires, not with Python's tomllib, which this check uses."""
    import ast
    import zipfile

    ran(simpletuner=SIMPLETUNER[1])
    with zipfile.ZipFile(upstream_wheel(SIMPLETUNER)) as z:
        theirs = ast.parse(z.read(TOML_FILE))
        metadata = z.read(f"simpletuner-{SIMPLETUNER[1]}.dist-info/METADATA").decode().splitlines()
    mine = ast.parse((ROOT / "snippets/backend_config.py").read_text())

    def imported(tree):
        return {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}

    def called(tree):
        return {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}

    assert "toml" in imported(theirs) and "tomllib" not in imported(theirs) and "toml.load" in called(theirs)
    assert "Requires-Dist: toml>=0.10.2" in metadata
    assert "tomllib" in imported(mine) and "toml" not in imported(mine) and "tomllib.loads" in called(mine)


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


# The problems the page shows: the files it shows (snippets/configs/), saved under their names, and
# the FIFO its shell block makes, checked by its commands, each line run as a reader runs it:
# shell section -> (output id, exit code, what the one line on stderr says) for each of its checks.
SHOWN = {
    "misspelt_mechanism": [("error_unknown", 2, "error: misspelt_mechanism.json: unknown attention_mechanism 'flexx'. "
                                                "Fix: did you mean 'flex'? use one of: diffusers, ")],
    "misspelt_key": [("error_misspelt_key", 2, "error: misspelt_key.toml: SimpleTuner knows no option "
                                               "'--attention-mechanism' and stops at it (\"unrecognized arguments\").")],
    "syntax": [("error_bad_json", 2, "error: trailing_comma.json: not valid JSON (line 3, column 1: "),
               ("error_bad_toml", 2, "error: unquoted_value.toml: not valid TOML (Invalid value (at line 1, column 23))")],
    "not_a_config": [("error_fifo", 2, "error: fifo.json: not a regular file."),
                     ("error_deep_json", 2, "error: nested.json: nested more than 200 levels deep.")],
}
SHOWN_OUTPUTS = {f"backend_config.{output}" for checks in SHOWN.values() for output, _, _ in checks}


@pytest.mark.parametrize("name", SHOWN)
def test_the_problems_the_page_shows_as_its_commands_check_them(tmp_path, name, observe):
    for saved in ("misspelt_mechanism.json", "misspelt_key.toml", "trailing_comma.json", "unquoted_value.toml",
                  "nested.json"):
        shutil.copy(ROOT / "snippets/configs" / saved, tmp_path / saved)
    lines = section("snippets/shell/backend_config.sh", name).splitlines()
    checks = [line for line in lines if line.startswith("python -m snippets.backend_config check ")]
    for line in lines:
        if line not in checks:  # mkfifo
            assert sh(line, cwd=tmp_path).returncode == 0
    assert len(checks) == len(SHOWN[name])
    for line, (output, code, said) in zip(checks, SHOWN[name]):
        result = sh(line, cwd=tmp_path, timeout=60)
        assert result.returncode == code, result.stderr
        assert result.stderr.count("\n") == 1 and result.stderr.startswith(said) and "Fix:" in result.stderr
        assert result.stdout == ""
        observe(f"backend_config.{output}", result.stderr.strip())


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
    if f"backend_config.error_{case}" not in SHOWN_OUTPUTS:  # those the page shows: the files it shows
        observe(f"backend_config.error_{case}", result.stderr.strip())


LOOKALIKES = ["attention-mechanism", "Attention_Mechanism", "attention_mechansim", "atention_mechanism",
              "attention_mechanisms", "ATTENTION-MECHANISM", "attention_mechanism_"]


@pytest.mark.parametrize("name", ["config.toml", "config.json"])
def test_a_key_that_looks_like_attention_mechanism_stops_simpletuner_and_the_check(upstream, ran, tmp_path, name):
    """SimpleTuner's parser stops at an option it does not know; the check says so, in one line, exit 2."""
    ran(simpletuner=SIMPLETUNER[1])
    for key in LOOKALIKES:
        text = f'{key} = "flex"\n' if name.endswith(".toml") else json.dumps({key: "flex"})
        theirs = upstream.select(upstream.mapping({key: "flex"}))
        assert isinstance(theirs, Exception) and f"unrecognized arguments: --{key}=flex" in str(theirs), (key, theirs)
        (tmp_path / name).write_text(text)
        result = python(f"-m snippets.backend_config check {name}", cwd=tmp_path)
        assert result.returncode == 2, (key, result.stdout)
        assert result.stdout == ""
        assert result.stderr == (f"error: {name}: SimpleTuner knows no option '--{key}' and stops at it "
                                 f'("unrecognized arguments"). Fix: rename it to attention_mechanism\n')


def test_a_start_of_the_name_is_attention_mechanism_for_simpletuner_and_the_check(upstream, ran, tmp_path):
    """SimpleTuner's parser (argparse) reads an option from any start of its name no other option shares:
    --at is the shortest start of --attention_mechanism that no other SimpleTuner option begins with."""
    ran(simpletuner=SIMPLETUNER[1])
    names = [o for strings in upstream.options for o in strings]
    assert [o for o in names if o.startswith(bc.SHORTEST)] == [bc.OPTION]
    assert len([o for o in names if o.startswith(bc.SHORTEST[:-1])]) > 1
    for end in range(3, len(bc.OPTION) + 1):
        key = bc.OPTION[2:end]
        theirs = upstream.select(upstream.mapping({key: "flex"}))
        if isinstance(theirs, Exception):
            assert end < len(bc.SHORTEST) and "ambiguous option" in str(theirs), (key, theirs)
            continue
        assert theirs == "flex", key
        (tmp_path / "config.json").write_text(json.dumps({key: "flex"}))
        assert bc.check(tmp_path / "config.json").endswith("attention_mechanism 'flex' -> Diffusers backend 'flex'")
        assert bc.mechanism([f"--{key}", "native"]) == upstream.select([f"--{key}", "native"]) == "native"
    assert bc.mechanism(["--a=flex"]) == bc.DEFAULT  # not a key the check knows: SimpleTuner's other options are not checked


@pytest.mark.parametrize("key, warned", [("attention_mechansim", True), ("atention_mechanism", True),
                                         ("attention_mechanisms", True), ("attention_heads", False),
                                         ("attn_mechanism", False), ("attention_mechanism", False),
                                         ("attention_mech", False), ("-attention_mechanism", False)])
def test_misspelt_keys_are_those_close_to_attention_mechanism(key, warned):
    assert bc.misspelt(bc.arguments({key: "flex"})) == ([f"--{key}"] if warned else [])
    assert bc.misspelt(["-attention_mechanism=flex", "--attention_mech=flex"]) == ["-attention_mechanism"]


def test_nesting_is_the_deepest_bracket_level():
    assert [bc.nesting(t) for t in ("{}", "[[]][[[]]]", "[[[]][[[]]]]", '{"a": [1, [2]], "b": {}}', "]]][", "x")] == [1, 3, 4, 3, 1, 0]


def test_an_unknown_value_is_named_whole():
    with pytest.raises(UsageError, match="unknown attention_mechanism 'flex=1'"):
        bc.mechanism(["--attention_mechanism=flex=1"])


def test_a_correct_key_beside_others_gets_no_error(tmp_path):
    (tmp_path / "config.toml").write_text('attention_mechanism = "flex"\nseed = 1\nattention_heads = 8\n')
    assert bc.check(tmp_path / "config.toml") == (
        f"ok: {tmp_path / 'config.toml'}: attention_mechanism 'flex' -> Diffusers backend 'flex'")


@pytest.mark.parametrize("target", ["missing.json", "folder", "latin1.json", "fifo.json"])
def test_unreadable_file_gets_one_line_and_exit_2(tmp_path, target):
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
    assert (code, err.getvalue()) == (0, "") or (code == 2 and err.getvalue().count("\n") == 1), err.getvalue()


def test_list_command_prints_each_mechanism_and_its_diffusers_backend():
    result = python("-m snippets.backend_config list")
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows == [[name, bc.DIFFUSERS_BACKENDS.get(name, "-")] for name in bc.MECHANISMS]


def test_no_command_gets_one_line_and_exit_2():
    result = python("-m snippets.backend_config")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "required: command" in result.stderr
