"""MkDocs hook: `<!-- observed: ID -->` in a page becomes the output a recorded run produced.

The output comes from records/*.json (see scripts/records.py), with the environment that
produced it. If the snippet behind it changed since, the page says the output is not verified
for the current code. An ID with no record fails the build.
"""
import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts import i18n, records  # noqa: E402

# `<!-- observed: ID -->`, or `<!-- observed: ID gpu -->` for an output only a GPU run records.
MARKER = re.compile(r"^( *)<!-- observed: ([\w.]+)( gpu)? -->$", re.M)



def find(output_id, gpu=False):
    """(environment, output) of the first record that has this output; None for a pending GPU one."""
    for record in records.all_records().values():
        if output_id in record["outputs"]:
            return record["environment"], record["outputs"][output_id]
    if gpu:
        return None
    raise PluginError(f"no recorded output {output_id!r}. Fix: run `make record` (CPU) "
                      f"or `make verify-gpu` (CUDA) to record it")


def stamp(env):
    parts = [env.get("gpu") if "compute_capability" in env else "CPU", env.get("compute_capability") and f"sm {env['compute_capability']}",
             f"torch {env.get('torch')}", env.get("cuda") and f"CUDA {env['cuda']}",
             env.get("triton") and f"Triton {env['triton']}",
             env.get("diffusers") and f"diffusers {env['diffusers']}",
             f"Python {env.get('python')}", env.get("date")]
    return ", ".join(p for p in parts if p)


def render(output_id, lang, gpu=False):
    words = i18n.words(lang, "observed")
    found = find(output_id, gpu)
    if found is None:
        return f'!!! note "{words["pending"]}"\n    {words["pending_body"]} (`{output_id}`)\n'
    env, out = found
    fence = "````" if "```" in out["text"] else "```"
    block = f"{fence}text\n{out['text']}\n{fence}\n"
    note = f'<p class="observed-stamp"><small>{words["seen"]}: {stamp(env)}</small></p>\n'
    if out["source_sha256"] != records.source_hash(output_id):
        return f'!!! warning "{words["stale"]}"\n    {words["stale_body"]}\n\n{block}{note}'
    return block + note


def indent(text, prefix):
    return "".join(prefix + line if line.strip() else line for line in text.splitlines(True))


def on_page_markdown(markdown, page, config, files):
    lang = config.plugins["i18n"].current_language
    return MARKER.sub(lambda m: indent(render(m.group(2), lang, bool(m.group(3))), m.group(1)), markdown)
