"""MkDocs hook: the outdated-translation banner and the generated translation-status table.

A translated page whose recorded English source (front matter `source_sha256`, see
scripts/i18n.py) is not the current English page gets a banner, in its language, pointing to
the English page. `<!-- translation-status -->` becomes the table of every page's state.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts import i18n  # noqa: E402

NAMES = {"zh": "简体中文", "pt": "Português (Brasil)", "hi": "हिन्दी"}


def english_url(page) -> str:
    """The English page's URL, relative to this translated page (zh/kernels/ -> ../../kernels/)."""
    depth = page.url.count("/")
    return "../" * depth + page.url.split("/", 1)[1]


def status_table(lang) -> str:
    words = i18n.words(lang, "translations")
    rows = [f"| {words['page']} | " + " | ".join(NAMES[t] for t in i18n.LANGS) + " |",
            "| --- | " + " | ".join("---" for _ in i18n.LANGS) + " |"]
    for page, states in i18n.table().items():
        rows.append(f"| [{i18n.title(lang, page)}]({page}) | " + " | ".join(words[states[t]] for t in i18n.LANGS) + " |")
    return "\n".join(rows) + "\n"


def on_page_markdown(markdown, page, config, files):
    lang, _, name = page.file.src_uri.partition("/")
    if "<!-- translation-status -->" in markdown:
        markdown = markdown.replace("<!-- translation-status -->", status_table(lang))
    if lang in i18n.LANGS and i18n.state(lang, name) == "outdated":
        words = i18n.words(lang, "translations")
        markdown = (f'!!! warning "{words["title"]}"\n    {words["body"].format(url=english_url(page))}\n\n'
                    + markdown)
    return markdown


def on_post_build(config):
    """The theme maps a page to its translations by reading sitemap.xml next to each alternate URL
    (<link rel="alternate">), which here is the page itself in each language: every page folder
    gets a copy of the one sitemap, so that no reader's browser meets a 404."""
    import shutil

    site = Path(config["site_dir"])
    if (site / "sitemap.xml").exists():
        for index in site.rglob("index.html"):
            if index.parent != site:
                shutil.copyfile(site / "sitemap.xml", index.parent / "sitemap.xml")
