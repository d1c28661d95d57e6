"""A page as a program: its code blocks, resolved by the same include mechanism as the build
(pymdownx.snippets with mkdocs.yml's settings), in page order; the tier it runs in; and the page
as a notebook (nbformat) and a script (jupytext's percent format) in the page's language.

    python -m guide pages list                  # each page: its tier and number of Python blocks
    python -m guide pages script PAGE [LANG]    # the page's Python code, as one script

A page's program is its Python blocks and the commands of its shell blocks that run the guide's own
programs (`python -m snippets...`): every output the page shows (`observed(page)`) is printed by one of
them (tests/test_pages.py checks it). The other shell lines install, delete or set the environment,
and print nothing the page shows.

A page's tier is `program: cpu` or `program: gpu` in the front matter of its English page: a GPU
page's code needs a CUDA GPU, and runs in `make verify-gpu`; a CPU page's code runs in `make test`.
"""
import functools
import re

from guide import i18n, project
from guide.project import GuideError

OBSERVED = re.compile(r"^ *<!-- observed: ([\w.]+)( gpu)?(?: picture)? -->$", re.M)  # as guide/site/observed.py reads it
FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,})[ \t]*(\w*)[^\n]*\n(.*?)^\1\2[ \t]*$\n?", re.M | re.S)
TIERS = ("cpu", "gpu")
# Top-level modules of page code, as the packages a reader installs (torch: the oldest with FlexAttention).
PACKAGES = {"torch": "torch>=2.5", "diffusers": "diffusers==0.42.1", "transformers": "transformers==5.23.0",
            "triton": "triton",
            "numpy": "numpy", "matplotlib": "matplotlib"}


@functools.lru_cache(maxsize=4)
def _preprocessor(root: str):
    import markdown

    settings = {}
    for entry in project.mkdocs_config().get("markdown_extensions", []):
        if isinstance(entry, dict) and "pymdownx.snippets" in entry:
            settings = dict(entry["pymdownx.snippets"] or {})
    settings["base_path"] = [str(project.path(p)) for p in settings.get("base_path", ["."])]
    md = markdown.Markdown(extensions=["pymdownx.snippets"], extension_configs={"pymdownx.snippets": settings})
    return md.preprocessors["snippet"]


def resolve(markdown: str) -> str:
    """The Markdown with every `--8<--` include replaced by what it includes, as the build does."""
    try:
        return "\n".join(_preprocessor(str(project.root())).run(markdown.splitlines())) + "\n"
    except Exception as e:  # pymdownx's SnippetMissingError and the like
        raise GuideError(f"an include cannot be resolved: {e}", "fix the include line or the snippet section") from None


def parts(markdown: str) -> list:
    """The page in order as ("prose", text) and ("code", language, code) parts; includes resolved."""
    text, out, at = resolve(markdown), [], 0
    for m in FENCE.finditer(text):
        out.append(("prose", text[at:m.start()]))
        indent, lang, code = m.group(1), m.group(3), m.group(4)
        code = "".join(line[len(indent):] if line.startswith(indent) else line.lstrip(" \t")
                       for line in code.splitlines(True))
        out.append(("code", lang, code.rstrip("\n") + "\n"))
        at = m.end()
    out.append(("prose", text[at:]))
    return [p for p in out if p[0] == "code" or p[1].strip()]


def page_path(page: str, lang: str = "en"):
    path = i18n.docs() / lang / page
    if not path.exists():
        raise GuideError(f"no page docs/{lang}/{page}", "use a file name from docs/en (python -m guide pages list)")
    return path


def python_blocks(page: str, lang: str = "en") -> list:
    """The page's Python code blocks, in page order, as a reader sees them."""
    return [p[2] for p in parts(i18n.body(page_path(page, lang))) if p[0] == "code" and p[1] == "python"]


def script(page: str, lang: str = "en") -> str:
    """The page's Python code as one program."""
    return "\n\n".join(block.rstrip("\n") for block in python_blocks(page, lang)) + "\n"


def observed(page: str) -> list:
    """(output id, gpu) for each `<!-- observed: ID -->` of the English page, in page order; gpu is
    True for an output only a GPU run records (`<!-- observed: ID gpu -->`)."""
    return [(m.group(1), bool(m.group(2))) for m in OBSERVED.finditer(i18n.body(page_path(page)))]


def commands(page: str) -> list:
    """The commands of the page's shell blocks that run the guide's programs (`python -m snippets...`),
    in page order, as a reader types them."""
    return [line.strip() for p in parts(i18n.body(page_path(page))) if p[0] == "code" and p[1] in ("bash", "sh")
            for line in p[2].splitlines() if re.match(r"\s*python3? -m snippets\b", line)]


def tier(page: str) -> str:
    """cpu or gpu, from the English page's front matter; GuideError if a page with code has none."""
    meta, _ = i18n.split_front(page_path(page).read_text(encoding="utf-8"))
    value = meta.get("program", "")
    if value not in TIERS and python_blocks(page):
        raise GuideError(f"docs/en/{page} shows Python code but its front matter has no `program: cpu` or "
                         f"`program: gpu` (found {value!r})", "add the tier its code needs to the front matter")
    return value or "none"


def programs() -> dict:
    """Page -> tier, for every page that shows Python code."""
    return {page: tier(page) for page in i18n.english_pages() if python_blocks(page)}


def requirements(code: str) -> list:
    """The packages a page's code imports, as pip requirements."""
    found = re.findall(r"^\s*(?:from|import)\s+(\w+)", code, re.M)
    return sorted({PACKAGES[m] for m in found if m in PACKAGES})


def notebook(markdown: str, words: dict, page_tier: str):
    """An nbformat v4 notebook of a page: prose as Markdown cells, Python as code cells, in page
    order; the first cell says what the code needs. Recorded outputs stay in the prose, as shown."""
    import nbformat.v4 as nbf

    pieces = parts(markdown)
    code = "".join(p[2] for p in pieces if p[0] == "code" and p[1] == "python")
    needs = words["needs_gpu"] if page_tier == "gpu" else words["needs_cpu"]
    install = " ".join(requirements(code)) or "torch>=2.5"
    cells = [nbf.new_markdown_cell(f"{needs}\n\n```bash\npip install \"{install}\"\n```")]
    prose = []
    for piece in pieces:
        if piece[0] == "code" and piece[1] == "python":
            if prose:
                cells.append(nbf.new_markdown_cell("".join(prose).strip("\n")))
                prose = []
            cells.append(nbf.new_code_cell(piece[2].rstrip("\n")))
        elif piece[0] == "code":
            prose.append(f"\n```{piece[1]}\n{piece[2]}```\n\n")
        else:
            prose.append(piece[1])
    if "".join(prose).strip():
        cells.append(nbf.new_markdown_cell("".join(prose).strip("\n")))
    for number, cell in enumerate(cells):  # ids by position, not nbformat's random ones: the same page, the same file
        cell["id"] = f"cell-{number}"
    nb = nbf.new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"}})
    return nb


def as_script(nb) -> str:
    """The notebook as a Python script: Markdown cells as comments (jupytext's percent format)."""
    import jupytext

    return jupytext.writes(nb, fmt="py:percent")
