"""Search in the reader's language: one search index per language.

The i18n plugin builds the four languages into one site and stacks their pages into the one index
the theme loads (search/search_index.json), so a reader searching the Portuguese site got Chinese
pages too. At the end of the build, `split` divides that index: each language gets its own
(<lang>/search/search_index.json; the default language's stays at search/), holding only its pages,
with links relative to its folder and its own lunr settings from mkdocs.yml (the guide plugin's
`search` option: the lunr language, for its stemmer, stop words and trimmer, and which of those the
pipeline keeps). Chinese text arrives segmented by jieba (the search plugin does it when jieba is
installed). `point_to_language` makes a translated page's theme configuration (`__config.base`)
name its language's folder: the theme fetches the index from there and resolves results from there.
"""
import copy
import json
import re
from pathlib import Path

from material.plugins.search.plugin import SearchIndex
from mkdocs.exceptions import PluginError

CONFIG = re.compile(r'(<script id="__config" type="application/json">)(.*?)(</script>)', re.S)


def split(site: Path, languages: list, default: str, settings: dict) -> None:
    """Write one search index per language from the site's combined one."""
    path = site / "search" / "search_index.json"
    combined = json.loads(path.read_text(encoding="utf-8"))
    missing = [lang for lang in languages if lang not in settings]
    if missing:
        raise PluginError(f"mkdocs.yml: the guide plugin's search option has no settings for "
                          f"{', '.join(missing)}. Fix: add `{missing[0]}: {{lang: [{missing[0]}]}}` under it")
    others = tuple(f"{lang}/" for lang in languages if lang != default)
    for lang in languages:
        if lang == default:
            docs = [d for d in combined["docs"] if not d["location"].startswith(others)]
            target = path
        else:
            prefix = f"{lang}/"
            docs = [{**d, "location": d["location"][len(prefix):]}
                    for d in combined["docs"] if d["location"].startswith(prefix)]
            target = site / lang / "search" / "search_index.json"
        index = {"config": {**combined["config"], **settings[lang]}, "docs": docs}
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(index, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")


def point_to_language(html: str, lang: str) -> str:
    """The page's theme configuration with its base in the language's folder (../.. -> ../../zh/)."""
    def rebase(match):
        config = json.loads(match.group(2))
        config["base"] = f"{config['base'].rstrip('/')}/{lang}/"
        text = json.dumps(config).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        return match.group(1) + text + match.group(3)
    return CONFIG.sub(rebase, html, count=1)


# The search plugin parses every page's HTML into index entries at every build; `mkdocs serve` rebuilds
# all pages after an edit. remember_entries() makes it reuse the entries of a page whose URL, title,
# metadata, HTML and table of contents it has indexed before in this process.
_entries = {}
_index_page = SearchIndex.add_entry_from_context


def _toc(items) -> list:
    return [(item.id, item.url, item.title, _toc(item.children)) for item in items]


def _add_entry_from_context(index, page):
    key = (page.url, str(page.title), repr(page.meta), page.content, repr(_toc(page.toc)))
    if key not in _entries:
        before = len(index.entries)
        _index_page(index, page)
        _entries[key] = copy.deepcopy(index.entries[before:])
    else:
        index.entries.extend(copy.deepcopy(_entries[key]))


def remember_entries():
    SearchIndex.add_entry_from_context = _add_entry_from_context
