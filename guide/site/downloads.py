"""Each page with Python code downloads as a notebook (.ipynb) and a script (.py) in its language,
made from the page as the reader sees it (after the other transformations): prose as Markdown
cells, code as code cells, in page order. The links go under the page's title."""
import functools
import re
from pathlib import Path

from guide import pages, project

ATTRIBUTES = re.compile(r"[ \t]*\{ *[#.][^}\n]*\}")  # attr_list: {#id}, { .class }
ADMONITION = re.compile(r'^( *)(?:!!!|\?\?\?\+?) \w+(?: "([^"]*)")?\n((?:\1    .*\n|[ \t]*\n)*)', re.M)
PAGE_LINK = re.compile(r"\]\((?!https?:|#)([\w-]+)\.md(#[\w-]+)?")


def for_notebook(markdown, site_url, lang_prefix) -> str:
    """The page's Markdown as plain CommonMark for notebook cells: admonitions as quotes, no
    attribute lists, links to other pages as links to the published site."""
    def quote(m):
        indent, title, body = m.group(1), m.group(2), m.group(3)
        lines = [f"**{title}**"] if title else []
        lines += [line[len(indent) + 4:] if line.strip() else "" for line in body.splitlines()]
        return "".join(f"{indent}> {line}".rstrip() + "\n" for line in lines) + "\n"

    def link(m):
        page = "" if m.group(1) == "index" else f"{m.group(1)}/"
        return f"]({site_url}{lang_prefix}{page}{m.group(2) or ''}"
    return PAGE_LINK.sub(link, ATTRIBUTES.sub("", ADMONITION.sub(quote, markdown)))




@functools.lru_cache(maxsize=None)
def made(markdown, words, tier, name) -> tuple:
    """((file name, content), ...) of a page's notebook and script; remembered for the process, as serve's
    rebuilds make the same files again for every page not edited (notebooks have no random cell ids)."""
    import nbformat

    nb = pages.notebook(markdown, dict(words), tier)
    return ((f"{name}.ipynb", nbformat.writes(nb) + "\n"), (f"{name}.py", pages.as_script(nb)))


def transform(markdown, snapshot, lang, src_uri, site_url) -> tuple:
    """(the page with its download links, {file name: content} to write beside the page); src_uri: the
    page's file under docs/ (zh/kernels.md)."""
    name = src_uri.partition("/")[2]
    stem = Path(name).stem
    tier = snapshot.programs.get(name)
    if tier is None:
        return markdown, {}
    words = snapshot.words[lang]["downloads"]
    prefix = project.url_prefix(lang)
    files = dict(made(for_notebook(markdown, site_url, prefix), tuple(words.items()), tier, stem))
    links = (f'<p class="page-downloads">{words["download"]} '
             f'<a href="{stem}.ipynb" download>{words["notebook"]}</a> · '
             f'<a href="{stem}.py" download>{words["script"]}</a></p>\n\n')
    title = re.search(r"^# .*\n", markdown, re.M)
    at = title.end() if title else 0
    return markdown[:at] + "\n" + links + markdown[at:].lstrip("\n"), files


def write(site_dir, url, files) -> None:
    folder = Path(site_dir) / url
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_text(content, encoding="utf-8")
