"""Each page's Markdown converted once per process for the same input. The i18n plugin builds the site once
per language and `mkdocs serve` rebuilds every page after any edit; a page whose Markdown (after the
guide's transformations), included snippet files, place in the site and site files are all as before
converts to the same HTML. install() makes MkDocs' Page.render reuse that HTML, the table of contents,
the anchors and the warnings it logged (logged again, so that a strict build still counts them)."""
import copy
import hashlib
import logging
import re
from pathlib import Path

from mkdocs.structure.pages import Page

INCLUDE = re.compile(r'--8<--\s+"([^"\n]+)"')  # pymdownx.snippets: "path" or "path:section"
_render = Page.render
_pages = {}
_files = [None, ()]  # the last build's Files, what of them a page's links can depend on


class _Caught(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def _site_files(files) -> tuple:
    if _files[0] is not files:
        _files[:] = [files, tuple(sorted((f.src_uri, f.url) for f in files))]
    return _files[1]


def key(page, config, files) -> tuple:
    """Everything the HTML of a page depends on: its Markdown, the files it includes (read now), where it
    is, the site's files and the Markdown configuration."""
    root = Path(config.config_file_path).parent
    included = []
    for name in sorted(set(INCLUDE.findall(page.markdown))):
        path = root / name.split(":")[0]
        included.append((name, hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None))
    return (page.markdown, tuple(included), page.file.src_uri, page.file.url, _site_files(files),
            repr(config["markdown_extensions"]), repr(config["mdx_configs"]), repr(config.validation),
            config.use_directory_urls)


def render(page, config, files):
    """Page.render, remembered by key()."""
    found = key(page, config, files)
    if found not in _pages:
        caught, logger = _Caught(), logging.getLogger("mkdocs")
        logger.addHandler(caught)
        try:
            _render(page, config, files)
        finally:
            logger.removeHandler(caught)
        links = getattr(page, "links_to_anchors", None)  # {File linked to: {anchor: link}}, by path here
        _pages[found] = (page.content, copy.deepcopy(page.toc), page._title_from_render,
                         set(page.present_anchor_ids),
                         None if links is None else {f.src_uri: dict(a) for f, a in links.items()}, caught.records)
        return
    content, toc, title, anchors, links, logged = _pages[found]
    page.content, page.toc, page._title_from_render = content, copy.deepcopy(toc), title
    page.present_anchor_ids = set(anchors)
    if links is not None:  # the files of this build, whose pages the anchors are checked against
        page.links_to_anchors = {files.get_file_from_path(uri): dict(a) for uri, a in links.items()}
    for record in logged:  # the warnings of this page's links, as the first render logged them
        logging.getLogger(record.name).handle(record)


def install():
    Page.render = render
