"""Selecting FlexAttention in a SimpleTuner config.json, checked before a run.

    python -m snippets.backend_config check config.json
    python -m snippets.backend_config list
"""
import difflib
import json
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

KEYS = ("attention_mechanism", "--attention_mechanism")


def read_config(path) -> dict:
    """The JSON object in `path`, or a UsageError naming what is wrong with the file."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file", "pass the path of your SimpleTuner config.json")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise UsageError(f"{path}: cannot read the file ({reason})", "make it a readable UTF-8 text file")
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(
            f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})",
            "correct the JSON syntax at that position",
        )
    if not isinstance(config, dict):
        raise UsageError(
            f"{path}: the top level is a JSON {type(config).__name__}, not an object",
            'write the options as one object, e.g. {"attention_mechanism": "flex"}',
        )
    return config


def mechanism(config: dict, source="config") -> str:
    """The attention mechanism a config selects, validated as SimpleTuner would."""
    given = {k: config[k] for k in KEYS if k in config}
    if len(set(map(repr, given.values()))) > 1:
        raise UsageError(
            f"{source}: both {KEYS[0]!r} and {KEYS[1]!r} are set, to different values",
            "keep only one of the two keys",
        )
    if not given:
        return DEFAULT
    value = next(iter(given.values()))
    if not isinstance(value, str):
        raise UsageError(
            f"{source}: attention_mechanism must be a string, got {json.dumps(value)}",
            'write it in quotes, e.g. "attention_mechanism": "flex"',
        )
    if value not in MECHANISMS:
        close = difflib.get_close_matches(value.strip().lower(), MECHANISMS, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UsageError(
            f"{source}: unknown attention_mechanism {value!r}",
            f"{hint}use one of: {', '.join(MECHANISMS)}",
        )
    return value


# --8<-- [start:check]
def check(path) -> str:
    """One line saying which attention a SimpleTuner config selects."""
    name = mechanism(read_config(path), source=path)
    backend = DIFFUSERS_BACKENDS.get(name)
    if backend is None:
        return f"ok: {path}: attention_mechanism {name!r} selects no Diffusers backend"
    return f"ok: {path}: attention_mechanism {name!r} -> Diffusers backend {backend!r}"
# --8<-- [end:check]


def main(argv) -> int:
    parser = ArgumentParser(prog="python -m snippets.backend_config")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="validate a SimpleTuner config.json").add_argument("file")
    sub.add_parser("list", help="list the accepted attention mechanisms")
    args = parser.parse_args(argv)
    if args.command == "list":
        for name in MECHANISMS:
            print(f"{name:32} {DIFFUSERS_BACKENDS.get(name, '-')}")
    else:
        print(check(args.file))
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
