"""`<!-- observed: ID -->` in a page becomes the output a recorded run produced, with the stamp of
the environment that produced it; if the code behind it changed since, the page says the output is
not verified for the current code. `<!-- observed: ID gpu -->` is an output only a GPU run records:
until one does, the page says so. Any other ID with no record fails the build. The stamp's date is
in the page's locale; the output itself stays exactly as the program printed it.
`<!-- observed: ID picture -->` shows a mask's picture output drawn as an SVG (guide/site/pictures.py)."""
import re

from guide.project import GuideError
from guide.site import numbers, pictures

MARKER = re.compile(r"^( *)<!-- observed: ([\w.]+)( gpu)?( picture)? -->$", re.M)


def stamp(env):
    parts = [env.get("gpu") if "compute_capability" in env else "CPU",
             env.get("compute_capability") and f"sm {env['compute_capability']}",
             f"torch {env.get('torch')}", env.get("cuda") and f"CUDA {env['cuda']}",
             env.get("triton") and f"Triton {env['triton']}",
             env.get("diffusers") and f"diffusers {env['diffusers']}",
             env.get("transformers") and f"transformers {env['transformers']}",
             f"Python {env.get('python')}", env.get("date") and numbers.date(env["date"])]
    return ", ".join(p for p in parts if p)


def render(snapshot, output_id, lang, gpu=False, picture=False):
    words = snapshot.words[lang]["observed"]
    found = snapshot.output(output_id)
    if found is None:
        if not gpu:
            raise GuideError(f"no recorded output {output_id!r}. Fix: run `make record` (CPU) "
                             f"or `make verify-gpu` (CUDA) to record it")
        return f'!!! note "{words["pending"]}"\n    {words["pending_body"]} (`{output_id}`)\n'
    env, out, stale = found
    if picture:
        try:
            block = pictures.figure(out["text"], snapshot.words[lang]["picture"])
        except GuideError as e:
            raise GuideError(f"output {output_id!r}: {e}") from None
    else:
        fence = "````" if "```" in out["text"] else "```"
        block = f"{fence}text\n{out['text']}\n{fence}\n"
    note = f'<p class="observed-stamp"><small>{words["seen"]}: {stamp(env)}</small></p>\n'
    if stale:
        return f'!!! warning "{words["stale"]}"\n    {words["stale_body"]}\n\n{block}{note}'
    return block + note


def indent(text, prefix):
    return "".join(prefix + line if line.strip() else line for line in text.splitlines(True))


def transform(markdown, snapshot, lang):
    return MARKER.sub(lambda m: indent(render(snapshot, m.group(2), lang, bool(m.group(3)), bool(m.group(4))),
                                       m.group(1)), markdown)
