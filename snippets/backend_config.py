"""Selecting FlexAttention in a SimpleTuner config (config.json, config.toml or config.env), checked before a run.

    python -m snippets.backend_config check config.json
    python -m snippets.backend_config list
"""
import difflib
import json
import os
import re
import stat
import tomllib
from pathlib import Path

from snippets._cli import ArgumentParser, UsageError, run

# --8<-- [start:mechanisms]
# The values SimpleTuner 4.10.1's --attention_mechanism accepts (argparse choices, exact spelling).
MECHANISMS = (
    "diffusers", "xformers", "sla", "sageattention",
    "sageattention-int8-fp16-triton", "sageattention-int8-fp16-cuda", "sageattention-int8-fp8-cuda",
    "flash-attn", "flash-attn-hub", "flash-attn-2", "flash-attn-varlen-hub",
    "flash-attn-3", "flash-attn-3-hub", "flash-attn-3-varlen", "flash-attn-3-varlen-hub", "flash-attn-4-hub",
    "flex", "kohaku-fa", "kohaku-fa-auto",
    "metal-flash-attention", "metal-flash-attention-int8", "metal-flash-attention-int4",
    "native", "cudnn", "native-efficient", "native-flash", "native-math", "native-npu", "native-xla",
)
DEFAULT = "kohaku-fa-auto"  # SimpleTuner's default: its own kernels where they apply, else PyTorch SDPA

# The mechanisms that select a Diffusers attention backend, and which one.
DIFFUSERS_BACKENDS = {
    "flex": "flex",
    "flash-attn": "flash",
    "flash-attn-hub": "flash_hub",
    "flash-attn-2": "flash_varlen",
    "flash-attn-varlen-hub": "flash_varlen_hub",
    "flash-attn-3": "_flash_3",
    "flash-attn-3-hub": "_flash_3_hub",
    "flash-attn-3-varlen": "_flash_varlen_3",
    "flash-attn-3-varlen-hub": "_flash_3_varlen_hub",
    "flash-attn-4-hub": "flash_4_hub",
    "native": "native",
    "cudnn": "_native_cudnn",
    "native-efficient": "_native_efficient",
    "native-flash": "_native_flash",
    "native-math": "_native_math",
    "native-npu": "_native_npu",
    "native-xla": "_native_xla",
}
# --8<-- [end:mechanisms]

OPTION = "--attention_mechanism"
# SimpleTuner's parser is Python's argparse, which reads an option from any start of its name that
# no other option shares; no other option of SimpleTuner 4.10.1 begins with --at.
SHORTEST = "--at"
NESTING = 200  # deeper JSON or TOML than this is refused before Python's recursion limit is hit


def read_config(path) -> list:
    """The command-line arguments SimpleTuner makes of a config.json, config.toml or config.env,
    or a UsageError naming what is wrong with the file."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file", "pass the path of your SimpleTuner config.json, config.toml or config.env")
    if not stat.S_ISREG(path.stat().st_mode):  # a folder, a FIFO, a device: refused before opening
        raise UsageError(f"{path}: not a regular file", "pass the path of the config file itself")
    if path.suffix not in (".json", ".toml", ".env"):
        raise UsageError(f"{path}: unknown config format {path.suffix or '(no suffix)'!r}",
                         "SimpleTuner reads config.json, config.toml or config.env; name the file after its format")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise UsageError(f"{path}: cannot read the file ({reason})", "make it a readable UTF-8 text file")
    if path.suffix == ".env":
        return env_arguments(text)
    if nesting(text) > NESTING:
        raise UsageError(f"{path}: nested more than {NESTING} levels deep",
                         "a SimpleTuner config is a flat list of options; remove the nested structure")
    try:
        # SimpleTuner 4.10.1 parses TOML with the `toml` package, which refuses some files tomllib reads.
        config = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})",
                         "correct the JSON syntax at that position")
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: not valid TOML ({e})", "correct the TOML syntax at that position")
    if not isinstance(config, dict):
        raise UsageError(f"{path}: the top level is a JSON {type(config).__name__}, not an object",
                         'write the options as one object, e.g. {"attention_mechanism": "flex"}')
    return arguments(config)


def nesting(text: str) -> int:
    """How deeply brackets nest in JSON or TOML text (brackets inside strings count too: an upper bound)."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(depth - 1, 0)
    return deepest


def arguments(config: dict) -> list:
    """A JSON or TOML mapping as SimpleTuner turns it into command-line arguments: a key gets `--`
    (with or without its dashes); None, "false", "" and a nested table leave the option unset; true
    is a bare flag; a list gives the option once per item; values are stripped, and `{env:NAME}`
    is replaced by that environment variable."""
    args = []
    for key, value in config.items():
        key = str(key).strip()
        option = key if key.startswith("--") else "--" + key.lstrip("-")
        if isinstance(value, str):
            value = re.sub(r"\{env:([^{}]+)\}", lambda m: os.environ.get(m.group(1), ""), value)
            if value.strip().lower() in ("true", "false"):
                value = value.strip().lower() == "true" or None
        if value is True:
            args.append(option)
        elif value is False:
            args.append(f"{option}=false")
        elif isinstance(value, (str, int, float, list)):
            items = value if isinstance(value, list) else [value]
            args += [f"{option}={str(item).strip()}" for item in items if str(item).strip()]
    return args


def env_arguments(text: str) -> list:
    """The arguments a config.env passes: SimpleTuner sets its variables (KEY=value, `export`,
    quotes, KEY+=more) and reads the options in TRAINER_EXTRA_ARGS, split at whitespace."""
    variables = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#") or "=" not in line:
            continue
        line = line.removeprefix("export ")
        if "+=" in line:
            key, value = line.split("+=", 1)
            variables.setdefault(key.strip(), []).extend(value.strip('"').strip("'").strip().split())
        else:
            key, value = (part.strip() for part in line.split("=", 1))
            if len(value) > 1 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            variables[key] = value.split()
    return variables.get("TRAINER_EXTRA_ARGS", [])


def is_option(name: str) -> bool:
    """Whether SimpleTuner reads an option name (the part before `=`) as --attention_mechanism: the
    name itself or a start of it (`--attention_mech`) that no other SimpleTuner option shares."""
    return len(name) >= len(SHORTEST) and OPTION.startswith(name)


def mechanism(args: list, source="config") -> str:
    """The attention mechanism these arguments select, validated as SimpleTuner's parser would."""
    unknown = misspelt(args)
    if unknown:
        raise UsageError(f"{source}: SimpleTuner knows no option {unknown[0]!r} and stops at it (\"unrecognized arguments\")",
                         "rename it to attention_mechanism")
    values = []
    for i, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        if not is_option(name):
            continue
        if equals:
            values.append(value)
            continue
        following = args[i + 1] if i + 1 < len(args) else None
        if following is None or following.startswith("-"):
            raise UsageError(f"{source}: attention_mechanism is set without a value",
                             'give it one, e.g. "attention_mechanism": "flex"')
        values.append(following)
    if len(set(values)) > 1:
        raise UsageError(f"{source}: attention_mechanism is set more than once, to different values ({', '.join(map(repr, values))})",
                         "keep only one (SimpleTuner would silently use the last)")
    if not values:
        return DEFAULT
    value = values[0]
    if value not in MECHANISMS:
        close = difflib.get_close_matches(value.strip().lower().replace("_", "-"), MECHANISMS, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UsageError(f"{source}: unknown attention_mechanism {value!r}", f"{hint}use one of: {', '.join(MECHANISMS)}")
    return value


def misspelt(args: list) -> list:
    """Arguments that look like attention_mechanism but that SimpleTuner does not read as it, e.g.
    --attention-mechanism, -attention_mechanism or "--attention_mechanism with a quote left in a
    config.env: SimpleTuner stops at an option it does not know, and at an argument that is no option's value."""
    names = {arg.split("=", 1)[0] for arg in args}
    target = OPTION[2:]
    looks = {name: name.lstrip("-").lower() for name in names}
    return sorted(name for name, bare in looks.items() if not is_option(name)
                  and (bare.replace("-", "_") == target or difflib.SequenceMatcher(None, bare, target).ratio() >= 0.85))


# --8<-- [start:check]
def check(path) -> str:
    """Which attention a SimpleTuner config selects, as one line; a UsageError for a problem."""
    name = mechanism(read_config(path), source=path)
    backend = DIFFUSERS_BACKENDS.get(name)
    if backend is None:
        return f"ok: {path}: attention_mechanism {name!r} selects no Diffusers backend"
    return f"ok: {path}: attention_mechanism {name!r} -> Diffusers backend {backend!r}"
# --8<-- [end:check]


def main(argv) -> int:
    parser = ArgumentParser(prog="python -m snippets.backend_config")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="validate a SimpleTuner config.json, config.toml or config.env").add_argument("file")
    sub.add_parser("list", help="list the accepted attention mechanisms")
    args = parser.parse_args(argv)
    if args.command == "list":
        for name in MECHANISMS:
            print(f"{name:32} {DIFFUSERS_BACKENDS.get(name, '-')}")
        return 0
    print(check(args.file))
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
