"""The site built with Zensical, which reads an mkdocs.yml-style config and runs pymdown-extensions but
no MkDocs plugin: one build per language from the pages stage.py finishes, into the URLs of the MkDocs
site (the first language at the root, the others under /<lang>/), with the files stage.py writes beside
them (notebooks, scripts, charts) and a language switcher that keeps the reader on the same page.

What the MkDocs build has and this one does not yet: the guide's search settings per language (lunr's
pipelines and jieba's segmentation, search.py). Zensical indexes each language with its own search, behind
a search dialog; the browser tests (tests/test_browser.py) run against both builds, and with Zensical's
search the glossary's word for decoding in Chinese and Hindi finds the performance page first, not the
decoding page (marked as an expected failure there, with this reason). Zensical's theme needs no sitemap
next to each page (MkDocs' copy_sitemaps).
"""
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from guide import project
from guide.project import GuideError
from guide.site import stage

SWITCHER = re.compile(r'(<a href=")([^"]*)(" hreflang="([\w-]+)" class="md-select__link")')
DOWNLOADS = re.compile(r'<p class="page-downloads">.*?</p>', re.S)


def config(lang: str, docs: Path, site: Path) -> dict:
    """The Zensical config of one language: mkdocs.yml's site, theme, nav and Markdown extensions, with
    the snippet includes read from the checkout, and the language's own name, theme language and URL;
    docs and site: relative to the config's folder."""
    main = project.mkdocs_config()
    entry = next(e for e in project.language_entries() if e["locale"] == lang)
    prefix = project.url_prefix(lang)
    theme_language = entry.get("theme", {}).get("language") or main["theme"].get("language")
    extensions = []
    for extension in main["markdown_extensions"]:
        if isinstance(extension, dict) and "pymdownx.snippets" in extension:
            extension = {"pymdownx.snippets": {**extension["pymdownx.snippets"], "base_path": [str(project.root())]}}
        extensions.append(extension)
    site_url = main.get("site_url", "/")
    return {
        "site_name": entry.get("site_name", main["site_name"]),
        "site_url": site_url + prefix,
        "site_description": main.get("site_description", ""),
        "docs_dir": docs.as_posix(),
        "site_dir": (site / prefix).as_posix() if prefix else site.as_posix(),
        "use_directory_urls": True,
        "theme": {**main["theme"], "language": theme_language},
        "extra_css": main.get("extra_css", []),
        "extra": {"alternate": [{"name": e["name"], "lang": e["locale"], "link": "/" + project.url_prefix(e["locale"])}
                                for e in project.language_entries()]},
        "nav": main["nav"],
        "markdown_extensions": extensions,
    }


def same_page(html: str, url: str, languages: tuple) -> str:
    """The switcher's links, which Zensical points at each language's home, pointed at this page
    (url: its site path, zh/kernels/) in each language, relative to it as the MkDocs site writes them."""
    name = url.split("/", 1)[1] if url.split("/", 1)[0] in languages[1:] else url
    up = "../" * url.count("/")

    def link(m):
        target = project.url_prefix(m.group(4)) + name
        return m.group(1) + (up + target if target != url else "./") + m.group(3)
    return SWITCHER.sub(link, html)


def downloads_beside(html: str) -> str:
    """The page's download links as MkDocs writes them, to the files beside the page (kernels/kernels.py):
    Zensical resolves a raw HTML link from the page's source file, and writes ../kernels.py."""
    return DOWNLOADS.sub(lambda m: m.group(0).replace('href="../', 'href="'), html)


def build(site: Path) -> list:
    """Every language built into site/; returns the languages built. Zensical keeps a build's folders
    inside the folder of its config, so each language is staged and built in one work folder first."""
    try:
        import zensical  # noqa: F401
    except ImportError:
        raise GuideError("zensical is not installed", "make setup (requirements.txt pins it)") from None
    languages = project.languages()
    if site.exists():
        shutil.rmtree(site)
    with tempfile.TemporaryDirectory() as work:
        for lang in languages:
            staged = Path(work) / lang
            stage.language(lang, staged)
            if not (Path(work) / "overrides").exists():  # theme.custom_dir, read from the config's folder
                shutil.copytree(project.path("overrides"), Path(work) / "overrides")
            path = Path(work) / f"zensical-{lang}.yml"
            # paths relative to the config's folder, as Zensical wants them
            path.write_text(yaml.safe_dump(config(lang, Path(lang) / "docs", Path("site")), allow_unicode=True),
                            encoding="utf-8")
            result = subprocess.run([sys.executable, "-m", "zensical", "build", "-f", str(path)], cwd=work,
                                    capture_output=True, text=True)
            if result.returncode != 0:
                lines = (result.stderr or result.stdout).strip().splitlines() or ["no output"]
                raise GuideError(f"zensical build of {lang} failed: {lines[-1]}",
                                 "correct what it names in docs/ or mkdocs.yml, then make site-zensical")
            shutil.copytree(staged / "site", Path(work) / "site", dirs_exist_ok=True)
        shutil.copytree(Path(work) / "site", site)
        for page in site.rglob("index.html"):
            url = "" if page.parent == site else page.parent.relative_to(site).as_posix() + "/"
            html = same_page(page.read_text(encoding="utf-8"), url, languages)
            page.write_text(downloads_beside(html), encoding="utf-8")  # a home page's links have no ../
    return list(languages)
