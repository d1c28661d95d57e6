"""The outdated-translation banner and the translation-status table.

A translated page whose recorded English source (front matter `source_sha256`, see guide/i18n.py)
is not the current English page gets a banner, in its language, pointing to the English page.
`<!-- translation-status -->` becomes the table of every page's state: the English page's hash, and
for each translation whether it is current and which English hash a native reader reviewed it against.
"""
import shutil
from pathlib import Path

from guide import i18n


def english_url(url) -> str:
    """The English page's URL, relative to this translated page's URL (zh/kernels/ -> ../../kernels/)."""
    return "../" * url.count("/") + url.split("/", 1)[1]


def status_table(snapshot, lang, names) -> str:
    words = snapshot.words[lang]["translations"]
    langs = snapshot.languages[1:]
    rows = [f"| {words['page']} | {words['english']} | " + " | ".join(names[t] for t in langs) + " |",
            "| --- | --- | " + " | ".join("---" for _ in langs) + " |"]

    def cell(page, t):
        state, review = snapshot.translation_table[page][t], snapshot.translation_reviews[page][t]
        return words[state] + (f" · {words['reviewed'].format(hash=f'`{review}`')}" if review else "")

    for page in snapshot.translation_table:
        rows.append(f"| [{i18n.title(lang, page)}]({page}) | `{i18n.english_hash(page)}` | "
                    + " | ".join(cell(page, t) for t in langs) + " |")
    return "\n".join(rows) + "\n"


def transform(markdown, snapshot, lang, src_uri, url, names):
    """The status table where the page asks for it; the banner on a translation older than its English page.
    src_uri: the page's file under docs/ (zh/kernels.md); url: its URL in the site (zh/kernels/)."""
    if "<!-- translation-status -->" in markdown:
        markdown = markdown.replace("<!-- translation-status -->", status_table(snapshot, lang, names))
    name = src_uri.partition("/")[2]
    if lang != snapshot.languages[0] and snapshot.translation_table.get(name, {}).get(lang) == "outdated":
        words = snapshot.words[lang]["translations"]
        markdown = (f'!!! warning "{words["title"]}"\n    {words["body"].format(url=english_url(url))}\n\n'
                    + markdown)
    return markdown


def copy_sitemaps(site: Path):
    """The theme maps a page to its translations by reading sitemap.xml next to each alternate URL
    (<link rel="alternate">), which here is the page itself in each language: every page folder
    gets a copy of the one sitemap, so that no reader's browser meets a 404."""
    if (site / "sitemap.xml").exists():
        for index in site.rglob("index.html"):
            if index.parent != site:
                shutil.copyfile(site / "sitemap.xml", index.parent / "sitemap.xml")
