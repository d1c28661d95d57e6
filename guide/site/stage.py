"""The guide's steps on a page, independent of the site builder: from a page's Markdown under docs/<lang>/
and one snapshot of the guide's data, the finished Markdown that a builder converts, in a fixed order:

1. translations: the outdated-translation banner and the translation-status table;
2. claims: the generated claims page (which lists evidence as observed-output and benchmark
   markers) and the claim badges;
3. performance: tables, charts and sentences from the benchmark records (after 2, which adds markers);
4. observed: recorded outputs with their environment stamp (after 2, which adds markers);
5. downloads: the page as a notebook and a script in its language, made from the result of 1-4.

Numbers and dates that these steps generate are in the page's locale (numbers.py). The snippet include
lines (--8<--) stay for the builder's pymdownx.snippets, so the code keeps one source.

`page` is what the MkDocs plugin calls for each page it builds; `language` writes a whole language's
finished pages, with the files they link to, for a builder that runs no MkDocs plugin
(python -m guide.site stage LANG OUT). Bad data raises GuideError, one line naming the problem and the fix.
"""
import shutil
from pathlib import Path

from guide import i18n, project
from guide.project import GuideError
from guide.site import claims_page, downloads, numbers, observed, performance, snapshot, translations


def url_of(src_uri: str) -> str:
    """A page's URL in the site, as the i18n plugin's folder layout gives it: en/index.md -> '',
    en/kernels.md -> kernels/, zh/kernels.md -> zh/kernels/ (the first language at the root)."""
    lang, _, name = src_uri.partition("/")
    return project.url_prefix(lang) + ("" if name == "index.md" else f"{name[:-len('.md')]}/")


def page(markdown, data, lang, src_uri, url, site_url, site_dir) -> tuple:
    """(the page's finished Markdown, {file name: content} to write beside the built page); site_dir
    receives the performance charts the page shows."""
    numbers.use(lang)
    markdown = translations.transform(markdown, data, lang, src_uri, url, project.language_names())
    markdown = claims_page.transform(markdown, data, lang)
    markdown = performance.transform(markdown, data, lang, url, site_dir)
    markdown = observed.transform(markdown, data, lang)
    return downloads.transform(markdown, data, lang, src_uri, site_url)


def language(lang: str, out: Path, site_url: str = "") -> list:
    """Each page of docs/<lang>/ finished, as out/docs/<name>.md (its front matter left out, as MkDocs
    reads it), with the other files of docs/<lang>/ and those of the first language's that it lacks
    (assets/site.css: the i18n plugin falls back to them too); and the files the built site needs
    beside the pages (each page's notebook and script, the charts) under out/site/, at the paths the
    site gives them; site_url: mkdocs.yml's by default. Returns the pages written."""
    data = snapshot.load(project.root())
    if lang not in data.languages:
        raise GuideError(f"unknown language {lang!r}", f"one of {', '.join(data.languages)}")
    site_url = site_url or project.mkdocs_config().get("site_url") or "/"
    for folder in (project.path("docs", data.languages[0]), project.path("docs", lang)):
        for other in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix != ".md"):
            target = out / "docs" / other.relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(other, target)
    written = []
    for source in sorted(project.path("docs", lang).glob("*.md")):
        src_uri = f"{lang}/{source.name}"
        url = url_of(src_uri)
        text = i18n.split_front(source.read_text(encoding="utf-8"))[1].lstrip("\n")
        markdown, files = page(text, data, lang, src_uri, url, site_url, out / "site")
        target = out / "docs" / source.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(markdown, encoding="utf-8")
        downloads.write(out / "site", url, files)
        written.append(target)
    return written
