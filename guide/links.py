"""Checks every internal link and anchor of the built site; lists the external links without fetching them.

    python -m guide links SITE_DIR     # e.g. after `make site`: python -m guide links site

Exit 1, with one line per broken link (page, link, problem), when an internal link leads to no
file or to an anchor the target page does not have.
"""
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit


class Page(HTMLParser):
    """The ids and the links (a, link, script, img) of one HTML file."""

    def __init__(self):
        super().__init__()
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and "name" in attrs:
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key) and tag in ("a", "link", "script", "img", "source", "iframe"):
                self.links.append(attrs[key])


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def target_file(site: Path, url_path: str) -> Path:
    path = site / url_path.lstrip("/")
    return path / "index.html" if url_path.endswith("/") or path.is_dir() else path


def site_url() -> str:
    """The published address (mkdocs.yml site_url): links to it are links inside the site."""
    import re

    from guide import project

    config = project.path("mkdocs.yml").read_text(encoding="utf-8")
    match = re.search(r"^site_url: *(\S+)", config, re.M)
    return match.group(1) if match else ""


def check(site: Path, own=None) -> tuple:
    """(problems, external links) of every HTML page of the built site."""
    site, own = site.resolve(), site_url() if own is None else own
    pages = {p: parse(p) for p in sorted(site.rglob("*.html"))}
    problems, external = [], set()
    for path, page in pages.items():
        here = "/" + path.relative_to(site).as_posix()
        for link in page.links:
            if own and link.startswith(own):  # the site's own absolute address
                link = "/" + link[len(own):]
            parts = urlsplit(link)
            if parts.scheme in ("http", "https") or link.startswith("//"):
                if parts.hostname not in ("127.0.0.1", "localhost"):
                    external.add(link)
                continue
            if parts.scheme:  # mailto:, javascript:, data:
                continue
            resolved = urlsplit(urljoin(here, link))
            target = target_file(site, unquote(resolved.path))
            name = path.relative_to(site).as_posix()
            if not target.exists():
                problems.append(f"{name}: {link} leads to no file")
            elif resolved.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else parse(target).ids
                if unquote(resolved.fragment) not in ids:
                    problems.append(f"{name}: {link} leads to no anchor #{resolved.fragment}")
    return problems, sorted(external)


def main(site: Path) -> int:
    problems, external = check(site)
    for link in external:
        print(f"external (not fetched): {link}")
    for problem in problems:
        print(f"error: {problem}")
    print(f"{len(problems)} broken internal links, {len(external)} external links")
    return 1 if problems else 0
