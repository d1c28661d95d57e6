"""The built site: strict build, every page in every language, includes and markup as promised."""
import os
import re
from html.parser import HTMLParser

import pytest
import yaml

from tests.helpers import ROOT, python, url_of
from tests.sites import each_site, zensical_site  # noqa: F401 (fixtures)

LANGS = {"en": "en", "zh": "zh", "pt": "pt-BR", "hi": "hi"}
PAGES = sorted(p.name for p in (ROOT / "docs/en").glob("*.md"))
OBSERVED = re.compile(r"<!-- observed: ([\w.]+)( gpu)?(?: picture)? -->")


def html_of(site, lang, page):
    folder = site if lang == "en" else site / lang
    stem = page[:-3]
    return (folder / ("index.html" if stem == "index" else f"{stem}/index.html")).read_text(encoding="utf-8")


def test_nav_lists_every_page():
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))["nav"]
    assert sorted(nav) == PAGES


@pytest.mark.parametrize("path", sorted((ROOT / "docs").rglob("*.md")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_code_written_inline(path):
    fence, body = None, []
    for line in path.read_text(encoding="utf-8").splitlines():
        marker = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence is None and marker:
            fence, body = marker.group(1), []
        elif fence is not None and line.strip().startswith(fence):
            code = [b for b in body if b.strip()]
            assert code and all("--8<--" in b for b in code), f"inline code in {path.name}: {code[:2]}"
            fence = None
        elif fence is not None:
            body.append(line)


def test_every_observed_output_is_produced_by_a_test():
    from guide import records

    recorded = {oid: out["test"] for r in records.all_records().values() for oid, out in r["outputs"].items()}
    tests = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").glob("test_*.py"))
    ids = {m[0] for p in (ROOT / "docs").rglob("*.md") for m in OBSERVED.findall(p.read_text(encoding="utf-8"))}
    # A recorded output names the test that produced it; a pending one must be named in a test.
    missing = sorted(i for i in ids if not (i in recorded and (ROOT / recorded[i].split("::")[0]).exists())
                     and f'"{i}"' not in tests)
    assert not missing, f"pages show outputs no test records: {missing}"


def test_recorded_outputs_are_current(records_in_use):
    """The CPU record must be current (make record); stale GPU entries are reported: the pages say
    that their outputs are not verified for the current code until make verify-gpu runs again."""
    import warnings

    from guide import claims, records

    all_records = records.all_records()
    stale = {name: records.stale(r) for name, r in all_records.items() if not claims.is_gpu(r)}
    assert not any(stale.values()), f"stale entries, re-record them with `make record`: {stale}"
    due = {name: len(records.stale(r)) for name, r in all_records.items() if claims.is_gpu(r)}
    if any(due.values()):
        warnings.warn(f"stale GPU entries, to re-record with `make verify-gpu`: {due}")


def test_a_page_shows_a_current_recorded_output_before_a_stale_one_and_warns_only_for_the_one_it_shows():
    """Two GPU records with the same output, the first stale: the page shows the second's, without a warning;
    with both stale, it shows the first's under the warning."""
    import dataclasses

    from guide.site import observed, snapshot

    real = snapshot.load(ROOT)
    env = {"python": "3.12", "torch": "2.11.0", "compute_capability": "9.0"}
    fake = {name: {"environment": {**env, "gpu": name}, "outputs": {"x.y": {"text": f"printed on {name}"}}}
            for name in ("first-gpu", "second-gpu")}
    for stale, shown, warned in ([("first-gpu", "x.y")], "second-gpu", False), \
            ([("first-gpu", "x.y"), ("second-gpu", "x.y")], "first-gpu", True):
        view = dataclasses.replace(real, records=fake, stale_outputs=frozenset(stale))
        html = observed.render(view, "x.y", "en", gpu=True)
        assert f"printed on {shown}" in html and f"{shown}, sm 9.0" in html, html
        assert html.startswith("!!! warning") is warned, html


@pytest.mark.parametrize("lang", LANGS)
def test_html_lang_and_language_switcher(each_site, lang):
    site = each_site
    from urllib.parse import urljoin

    for page in PAGES:
        html = html_of(site, lang, page)
        assert f'<html lang="{LANGS[lang]}"' in html, (lang, page)
        switcher = dict((code, href) for href, code in
                        re.findall(r'<a href="([^"]*)" hreflang="([\w-]+)" class="md-select__link"', html))
        here = "http://127.0.0.1:8000" + url_of(lang, page)
        assert {code: urljoin(here, href)[len("http://127.0.0.1:8000"):] for code, href in switcher.items()} \
            == {other: url_of(other, page) for other in LANGS}, (lang, page)


def test_translated_pages_are_translated(each_site):
    site = each_site
    assert "FlexAttention 指南" in html_of(site, "zh", "index.md")
    assert "ç" in html_of(site, "pt", "index.md") or "ã" in html_of(site, "pt", "index.md")
    assert re.search("[\u0900-\u097f]{20}", html_of(site, "hi", "index.md").replace(" ", ""))
    names = {"en": "FlexAttention guide", "zh": "FlexAttention 指南", "pt": "Guia do FlexAttention",
             "hi": "FlexAttention गाइड"}
    for lang, name in names.items():  # each language's site name, in every page's title
        assert re.search(rf"<title>[^<]* - {name}</title>", html_of(site, lang, "kernels.md")), lang


def test_outputs_rendered_with_their_stamp(each_site):
    site = each_site
    html = html_of(site, "en", "troubleshooting.md")
    assert "does not support backward on CPU" in html and "Output of a recorded run" in html
    assert "实际运行记录的输出" in html_of(site, "zh", "troubleshooting.md")


class Resources(HTMLParser):
    """Every URL the browser would fetch by itself: scripts, styles, images, fonts, frames."""

    def __init__(self):
        super().__init__()
        self.urls = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("script", "img", "iframe", "source", "audio", "video") and attrs.get("src"):
            self.urls.append(attrs["src"])
        if tag == "link" and attrs.get("href") and attrs.get("rel") not in ("alternate", "canonical"):
            self.urls.append(attrs["href"])


def test_no_request_to_a_third_party_host(each_site):
    site = each_site
    for path in site.rglob("*.html"):
        parser = Resources()
        parser.feed(path.read_text(encoding="utf-8"))
        external = [u for u in parser.urls if re.match(r"(https?:)?//", u)]
        assert not external, f"{path.relative_to(site)} loads {external}"
    for path in site.rglob("*.css"):
        assert not re.search(r"@import|url\((['\"]?)(https?:)?//", path.read_text(encoding="utf-8")), path


def test_each_language_has_its_own_search_index(site):
    """One index per language: its pages only, linked from its folder, searched with its own lunr language."""
    import json

    def index(lang):
        folder = site if lang == "en" else site / lang
        return json.loads((folder / "search/search_index.json").read_text(encoding="utf-8"))

    pages = {lang: {doc["location"].split("#")[0] for doc in index(lang)["docs"]} for lang in LANGS}
    for lang in LANGS:
        assert index(lang)["config"]["lang"] == [lang]
        assert pages[lang] == {url_of(lang, page)[len(url_of(lang, "index")):] for page in PAGES}, lang
    assert "Decodificação com um cache KV" in {doc["title"] for doc in index("pt")["docs"]}
    chinese = " ".join(doc["text"] for doc in index("zh")["docs"])
    assert "\u200b" in chinese, "Chinese text is segmented into words for search"
    html = html_of(site, "zh", "kernels.md")
    config = json.loads(re.search(r'<script id="__config" type="application/json">(.*?)</script>', html, re.S)[1])
    assert config["base"] == "../../zh/", "the Chinese pages load the Chinese index"


def test_a_language_without_search_settings_is_named(tmp_path):
    import json

    from mkdocs.exceptions import PluginError

    from guide.site import search

    (tmp_path / "search").mkdir()
    (tmp_path / "search/search_index.json").write_text(json.dumps({"config": {}, "docs": []}))
    with pytest.raises(PluginError, match=r"^mkdocs.yml: the guide plugin's search option has no settings for hi\. Fix: "):
        search.split(tmp_path, ["en", "hi"], "en", {"en": {"lang": ["en"]}})


def test_snippet_changes_reload_serve():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert "snippets" in config["watch"]


def test_every_internal_link_and_anchor_resolves(each_site):
    site = each_site
    from guide import links

    problems, external = links.check(site)
    assert not problems, "\n".join(problems)
    # External links are listed, never fetched: the PyTorch reference and the theme's credit.
    assert "https://docs.pytorch.org/docs/stable/nn.attention.flex_attention.html" in external


def test_link_checker_finds_a_missing_page_and_a_missing_anchor(tmp_path):
    from guide import links

    (tmp_path / "a").mkdir()
    (tmp_path / "a/index.html").write_text('<h2 id="here">x</h2><a href="#here">ok</a><a href="../b/">b</a>'
                                           '<a href="#gone">c</a><a href="https://example.org/x">ext</a>')
    problems, external = links.check(tmp_path, own="")
    assert problems == ["a/index.html: ../b/ leads to no file", "a/index.html: #gone leads to no anchor #gone"]
    assert external == ["https://example.org/x"]


@pytest.mark.parametrize("name", ["site.yml", "gpu.yml"])
def test_workflows_run_commands_that_exist(name):
    workflow = yaml.safe_load((ROOT / ".github/workflows" / name).read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads the key `on` as true
    assert triggers and workflow["jobs"]
    makefile = (ROOT / "Makefile").read_text()
    commands = [step["run"] for job in workflow["jobs"].values() for step in job.get("steps", []) if "run" in step]
    for target in re.findall(r"\bmake ([\w-]+)", " ".join(commands)):
        assert re.search(rf"^{target}:", makefile, re.M), f"{name} runs `make {target}`, which the Makefile lacks"
    from guide import cli

    for command in re.findall(r"-m guide ([\w-]+(?: [\w-]+)?)", " ".join(commands)):
        args = command.split()
        assert args[0] in cli.parser()._subparsers._group_actions[0].choices, f"{name} runs `guide {command}`"


def test_site_workflow_deploys_only_main():
    workflow = yaml.safe_load((ROOT / ".github/workflows/site.yml").read_text())
    assert workflow["jobs"]["deploy"]["needs"] == "test"
    assert "refs/heads/main" in workflow["jobs"]["deploy"]["if"]


def test_numbers_are_in_the_readers_locale_and_raw_outputs_are_not(each_site):
    """Portuguese pages write a decimal comma and a Portuguese date in what the guide generates (the
    performance page's tables and sentences, the claims page's measured figures, the stamps of
    recorded outputs); program output stays as printed."""
    import datetime

    from guide import bench, records

    site = each_site
    record = next(iter(bench.load_all().values()))
    cudnn = bench.ratios(record, "training", "sdpa_cudnn", "flex", "forward_backward_ms")
    fa2 = bench.ratios(record, "training", "flex", "sdpa_flash", "forward_backward_ms")
    for page, english in (("performance.md", f"{min(cudnn):.2f}–{max(cudnn):.2f}×"),
                          ("performance.md", f"{min(fa2):.2f}×"), ("claims.md", f"{min(fa2):.2f}×")):
        assert english in html_of(site, "en", page), (page, english)
        assert english.replace(".", ",") in html_of(site, "pt", page), (page, english)
        assert english not in html_of(site, "pt", page), (page, english)
    day = datetime.date.fromisoformat(records.load("cpu")["environment"]["date"])
    month = ("janeiro fevereiro março abril maio junho julho agosto setembro outubro novembro dezembro"
             .split()[day.month - 1])
    stamp = re.search(r'class="observed-stamp"><small>(.*?)</small>', html_of(site, "pt", "index.md"))[1]
    assert stamp.endswith(f", {day.day} de {month} de {day.year}") and day.isoformat() not in stamp, stamp
    raw = records.load("cpu")["outputs"]["troubleshooting.string_version"]["text"].splitlines()[0]
    for lang in LANGS:  # the recorded output, character for character (HTML-escaped quotes aside)
        page = html_of(site, lang, "index.md").replace("&#39;", "'").replace("&quot;", '"')
        assert raw.split(" = ")[1].split(" ")[0] in page, lang
    tf32 = next(r["outputs"]["accuracy.tf32"]["text"] for r in records.all_records().values()
                if "accuracy.tf32" in r["outputs"])
    claims = html_of(site, "pt", "claims.md").replace("&#39;", "'")
    assert all(line in claims for line in tf32.splitlines()), "the claims page shows the output as printed"

def test_every_badge_and_the_claims_page_show_where_the_claim_holds(each_site):
    """Each claim's badge is followed by its scope in the page's language, and the claims page gives the scope
    of every claim; the words come from words/<lang>.yaml, numbers in the reader's locale."""
    import re

    site = each_site

    from guide import claims

    registry = {c["id"]: c for c in claims.registry()}
    expected = {"en": ("head dim 64", "1,024 tokens", "PyTorch 2.11"),
                "pt": ("dimensão de head 64", "1.024 tokens", "PyTorch 2.11"),
                "zh": ("头维度 64", "1,024 个 token", "PyTorch 2.11"),
                "hi": ("हेड डायमेंशन 64", "टोकन", "PyTorch 2.11")}
    assert registry["accuracy-dtypes"]["scope"]["head_dims"] == [64]
    assert registry["accuracy-dtypes"]["scope"]["lengths"] == [1024]
    for lang in LANGS:
        page = html_of(site, lang, "accuracy.md")
        badges = len(re.findall(r'class="claim-badge', page))
        scopes = re.findall(r'<span class="claim-scope">([^<]*)</span>', page)
        assert badges and len(scopes) == badges, (lang, badges, len(scopes))
        assert any(all(word in s for word in expected[lang]) for s in scopes), (lang, scopes)
        listing = html_of(site, lang, "claims.md")
        assert listing.count(f"{site_words(lang)}:") >= len([c for c in registry.values() if c.get("page")]), lang


def site_words(lang):
    from guide import i18n

    return i18n.words(lang)["claims"]["scope"]


def test_a_picture_output_becomes_cells_of_its_shades():
    from guide.site import pictures

    caption, rows = pictures.grid("causal: 50.0% skipped\n█▒·\n░·█")
    assert caption == "causal: 50.0% skipped" and rows == [[1.0, 0.65, 0.0], [0.3, 0.0, 1.0]]
    words = {"label": "L", "queries": "Q", "keys": "K", "all": "a", "most": "m", "some": "s", "none": "n"}
    drawn = pictures.svg(rows, words)
    # one rect per cell that is not empty, at its row and column, and the frame
    cells = re.findall(r'<rect x="(\d+)" y="(\d+)" width="8" height="8" fill-opacity="([\d.]+)"/>', drawn)
    m = pictures.MARGIN
    assert cells == [(str(m), str(m), "1.0"), (str(m + 8), str(m), "0.65"), (str(m), str(m + 8), "0.3"),
                     (str(m + 16), str(m + 8), "1.0")]
    assert ">K →</text>" in drawn and ">Q →</text>" in drawn and 'aria-label="L"' in drawn


@pytest.mark.parametrize("text", ["only a caption", "caption\n██\n█", "caption\n█x"])
def test_a_malformed_picture_output_is_named_with_its_fix(text):
    from guide.project import GuideError
    from guide.site import pictures

    with pytest.raises(GuideError, match=r"picture output .* Fix: print the picture"):
        pictures.grid(text)


@pytest.mark.parametrize("lang", LANGS)
def test_gallery_pictures_are_drawn_from_the_recorded_output_in_each_language(each_site, lang):
    from guide import i18n, records

    site = each_site
    page = (ROOT / "docs/en/gallery.md").read_text(encoding="utf-8")
    ids = re.findall(r"<!-- observed: ([\w.]+) picture -->", page)
    assert len(ids) >= 10
    html = html_of(site, lang, "gallery.md")
    figures = re.findall(r'<figure class="mask-figure">(.*?)</figure>', html, re.S)
    assert len(figures) == len(ids)
    words = i18n.words(lang, "picture")
    outputs = records.load("cpu")["outputs"]
    for oid, figure in zip(ids, figures, strict=True):
        caption, *rows = outputs[oid]["text"].splitlines()
        assert f"<code>{caption}</code>" in figure, oid
        assert figure.count("fill-opacity") - 4 == sum(c != "·" for row in rows for c in row), oid  # 4: legend
        assert f">{words['queries']} →</text>" in figure and f">{words['keys']} →</text>" in figure


@pytest.mark.parametrize("lang", LANGS)
def test_the_zensical_site_shows_each_pages_code_and_offers_its_downloads(zensical_site, site, lang):
    """What test_pages checks of the MkDocs site, on the Zensical build: every page's Python code blocks are the
    page's code with its snippets included (pages.python_blocks), and its notebook and script downloads are
    the MkDocs site's files, byte for byte."""
    from guide import pages
    from tests.test_pages import built_python_blocks

    for page in pages.programs():
        want = [block.rstrip("\n") for block in pages.python_blocks(page, lang)]
        assert [block.rstrip("\n") for block in built_python_blocks(zensical_site, lang, page)] == want, page
        folder = url_of(lang, page).lstrip("/")
        for name in (page.replace(".md", ".ipynb"), page.replace(".md", ".py")):
            assert (zensical_site / folder / name).read_bytes() == (site / folder / name).read_bytes(), (lang, name)


def make_site_dry_run(builder):
    """`make -n site BUILDER=...` as a reader's shell runs it: without the flags and directory lines of a calling
    make (under make test)."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    return subprocess.run(["make", "--no-print-directory", "-n", "site", f"BUILDER={builder}"], cwd=ROOT,
                          capture_output=True, text=True, env=env)


@pytest.mark.parametrize("builder, command", [("mkdocs", "-m mkdocs build --strict -d site"),
                                              ("zensical", "-m guide.site zensical site")])
def test_make_site_builds_with_the_builder_named(builder, command):
    result = make_site_dry_run(builder)
    assert result.returncode == 0 and result.stdout.splitlines()[-1].endswith(command), result


def test_make_site_names_an_unknown_builder_and_the_fix():
    result = make_site_dry_run("sphinx")
    assert result.returncode != 0
    assert "BUILDER=sphinx is no builder of this site. Fix: make site BUILDER=mkdocs or BUILDER=zensical" in result.stderr


def test_each_distinct_code_block_is_highlighted_once_with_the_html_pygments_gives(monkeypatch):
    """Two languages' pages with the same code block: Pygments runs once for it and the HTML is what it gives
    uncached (the oracle: pygments.highlight called directly with the lexer and formatter pymdownx passed); a
    block with other formatter options (a highlighted line) or other code is highlighted on its own."""
    import markdown
    import pygments

    from guide.site import highlighting

    calls, real = [], pygments.highlight

    def spy(code, lexer, formatter, outfile=None):
        calls.append((code, lexer, formatter))
        return real(code, lexer, formatter)

    monkeypatch.setattr(highlighting, "_html", {})
    monkeypatch.setattr(highlighting.pygments, "highlight", spy)
    highlighting.install()
    block, marked, other = ("```python\nx = 1  # same\n```\n", '```python hl_lines="1"\nx = 1  # same\n```\n',
                            "```python\ny = 2\n```\n")
    pages = [markdown.markdown(text, extensions=["pymdownx.highlight", "pymdownx.superfences"])
             for text in (block, "Texte.\n\n" + block, marked, other, other)]
    assert len(calls) == 3, [c[0] for c in calls]  # x = 1 once, x = 1 with a marked line, y = 2
    uncached = [real(*c).rstrip("\n") for c in calls]
    assert pages[0] == pages[1].removeprefix("<p>Texte.</p>\n") and uncached[0] in pages[0]
    assert uncached[1] in pages[2] and 'class="hll"' in pages[2] and 'class="hll"' not in pages[0]
    assert uncached[2] in pages[3] and pages[3] == pages[4]


def test_a_pages_search_entries_are_parsed_once_and_are_those_the_search_plugin_makes(monkeypatch):
    """The same page indexed again (the next rebuild) gets the entries Material's own indexer makes for it (the
    oracle: its own method on a fresh index), without parsing its HTML again; a page whose HTML changed
    is parsed anew; an index's entries are its own (changing them does not change what a later build gets)."""
    from types import SimpleNamespace

    from material.plugins.search.plugin import SearchIndex

    from guide.site import search

    parsed, original = [], search._index_page

    def counting(index, page):
        parsed.append(page.url)
        original(index, page)

    monkeypatch.setattr(search, "_entries", {})
    monkeypatch.setattr(search, "_index_page", counting)
    monkeypatch.setattr(SearchIndex, "add_entry_from_context", search._add_entry_from_context)

    def page(html):
        return SimpleNamespace(url="masks/", title="Masks", meta={}, toc=[], content=html)

    html = '<h1 id="masks">Masks</h1><p>A mask_mod.</p><h2 id="causal">Causal</h2><p>q_idx >= kv_idx</p>'
    first, again, changed = SearchIndex(), SearchIndex(), SearchIndex()
    first.add_entry_from_context(page(html))
    first.entries[0]["text"] = "changed after the build"
    again.add_entry_from_context(page(html))
    changed.add_entry_from_context(page(html.replace("Causal", "Sliding window")))
    assert parsed == ["masks/", "masks/"]  # the first build and the changed page; not the rebuild
    want = [SearchIndex(), SearchIndex()]
    original(want[0], page(html))  # Material's own method, saved before remember_entries() replaces it
    original(want[1], page(html.replace("Causal", "Sliding window")))
    assert again.entries == want[0].entries and len(again.entries) == 2
    assert changed.entries == want[1].entries and changed.entries != again.entries


def test_a_pages_downloads_are_made_once_per_process_and_are_the_notebook_of_the_page(monkeypatch):
    """A rebuild of an unchanged page gives the same download files without making the notebook again; the files
    are the notebook and script of the page (the oracle: guide.pages and nbformat called directly); an edited
    page gets new ones."""
    import nbformat

    from guide import pages
    from guide.site import downloads, snapshot

    data = snapshot.load(ROOT)
    made, real = [], pages.notebook

    def counting(*args):
        made.append(args[0])
        return real(*args)

    downloads.made.cache_clear()
    monkeypatch.setattr(pages, "notebook", counting)
    markdown = (ROOT / "docs" / "en" / "kernels.md").read_text(encoding="utf-8").split("---\n", 2)[2]
    site = "https://example.org/"
    first, again = (downloads.transform(markdown, data, "en", "en/kernels.md", site) for _ in range(2))
    edited = downloads.transform(markdown + "\n```python\nprint(1)\n```\n", data, "en", "en/kernels.md", site)
    assert len(made) == 2 and first == again and edited[1] != first[1]
    nb = real(downloads.for_notebook(markdown, site, ""), data.words["en"]["downloads"], "cpu")
    assert first[1] == {"kernels.ipynb": nbformat.writes(nb) + "\n", "kernels.py": pages.as_script(nb)}
    downloads.made.cache_clear()


def test_a_page_is_converted_once_for_the_same_input_and_as_mkdocs_converts_it(tmp_path, monkeypatch, caplog):
    """A page rendered again (the next language's build, a rebuild) with the same Markdown, the same included
    files and the same site gets what MkDocs' own Page.render gives a fresh page (the oracle), without
    converting it again, and the warning of its broken link is logged again; an edited snippet file or
    page is converted anew."""
    import logging

    from mkdocs.config import load_config
    from mkdocs.structure.files import File, Files
    from mkdocs.structure.pages import Page

    from guide.site import rendering

    (tmp_path / "docs").mkdir()
    (tmp_path / "code.py").write_text("# --8<-- [start:part]\nx = 1\n# --8<-- [end:part]\n", encoding="utf-8")
    text = '# Title\n\n## Part {#part}\n\n```text\n--8<-- "code.py:part"\n```\n\nSee [there](missing.md).\n'
    (tmp_path / "docs/a.md").write_text(text, encoding="utf-8")
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: t\nmarkdown_extensions:\n  - attr_list\n  - toc\n  - pymdownx.superfences\n"
        "  - pymdownx.snippets:\n      base_path: ['.']\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    config = load_config(str(tmp_path / "mkdocs.yml"))
    files = Files([File("a.md", config.docs_dir, config.site_dir, config.use_directory_urls)])
    converted, real = [], rendering._render

    def counting(page, config, files):
        converted.append(page.file.src_uri)
        real(page, config, files)

    def page():
        p = Page(None, files.get_file_from_path("a.md"), config)
        p.read_source(config)
        return p

    monkeypatch.setattr(rendering, "_pages", {})
    monkeypatch.setattr(rendering, "_render", counting)
    monkeypatch.setattr(Page, "render", Page.render)  # undone after the test
    rendering.install()
    assert Page.render is rendering.render
    caplog.set_level(logging.INFO, logger="mkdocs")
    first, again, want = page(), page(), page()
    rendering.render(first, config, files)
    rendering.render(again, config, files)
    real(want, config, files)
    assert converted == ["a.md"]
    for got in (first, again):
        assert (got.content, str(got.toc), got.title, got.present_anchor_ids) == \
            (want.content, str(want.toc), want.title, want.present_anchor_ids)
    assert "x = 1" in want.content and "part" in want.present_anchor_ids
    assert sum("missing.md" in r.getMessage() for r in caplog.records) == 3  # each render, cached or not
    (tmp_path / "code.py").write_text("# --8<-- [start:part]\ny = 2\n# --8<-- [end:part]\n", encoding="utf-8")
    edited = page()
    rendering.render(edited, config, files)
    assert converted == ["a.md", "a.md"] and "y = 2" in edited.content and "x = 1" not in edited.content
    other = page()
    other.markdown += "\nMore.\n"
    rendering.render(other, config, files)
    assert len(converted) == 3 and "More." in other.content


SHADOWED = "assets/javascripts/lunr/min/lunr.da.min.js"  # a theme file, and a docs file of the same path


def test_the_themes_files_are_listed_once_and_as_mkdocs_lists_them(tmp_path, monkeypatch):
    """The guide's theme with a folder of this project in front: the files added are those MkDocs' own
    Files.add_files_from_theme adds (the oracle), a docs file still wins over a theme file of the same path,
    the listing is made once for two builds, and a file added to the project's folder is listed anew."""
    from mkdocs.config import load_config
    from mkdocs.structure.files import File, Files

    from guide.site import theme

    listed, real = [], theme._add_files_from_theme

    def counting(files, env, config):
        listed.append(len(files))
        real(files, env, config)

    monkeypatch.setattr(theme, "_listed", {})
    monkeypatch.setattr(theme, "_add_files_from_theme", counting)
    monkeypatch.setattr(Files, "add_files_from_theme", Files.add_files_from_theme)  # undone after the test
    theme.install()
    assert Files.add_files_from_theme is theme.add_files_from_theme
    config = load_config(str(ROOT / "mkdocs.yml"))
    project_folder = tmp_path / "overrides"
    (project_folder / "assets").mkdir(parents=True)
    (project_folder / "assets/extra.css").write_text("p {}\n", encoding="utf-8")
    config.theme.dirs.insert(0, str(project_folder))
    env = config.theme.get_env()

    def listing(add):
        docs_file = File(SHADOWED, config.docs_dir, config.site_dir, config.use_directory_urls)
        files = Files([docs_file])
        add(files, env, config)
        return sorted((f.src_uri, f.abs_src_path, f.dest_uri) for f in files)

    want = listing(real)
    assert listing(Files.add_files_from_theme) == want == listing(Files.add_files_from_theme) and len(listed) == 1
    assert ("assets/extra.css", str(project_folder / "assets/extra.css"), "assets/extra.css") in want
    assert len(want) > 20 and [src for uri, src, _ in want if uri == SHADOWED] == [os.path.join(config.docs_dir, SHADOWED)]
    (project_folder / "assets/more.css").write_text("p {}\n", encoding="utf-8")
    again = listing(Files.add_files_from_theme)
    assert len(listed) == 2 and again == listing(real) and len(again) == len(want) + 1


def test_numbers_are_formatted_once_per_locale_as_babel_formats_them():
    """The oracle: Babel called directly. A number formatted again in the same locale comes from memory; in
    another locale it is formatted for that locale; an int and the equal float are told apart."""
    from babel.numbers import format_decimal

    from guide.site import numbers

    numbers._number.cache_clear()
    try:
        got = []
        for lang in ("en", "pt", "en"):
            numbers.use(lang)
            got.append((numbers.number(16384), numbers.number(1.2345, ".2f"), numbers.number(1), numbers.number(1.0)))
        assert got[0] == (format_decimal(16384, locale="en_US"), "1.23", "1", "1.0") == got[2]
        assert got[1] == (format_decimal(16384, locale="pt_BR"), "1,23", "1", "1.0") and got[1] != got[0]
        assert numbers._number.cache_info().hits == 4
    finally:
        numbers.use("en")


def test_a_rebuild_in_the_same_process_writes_what_a_fresh_build_writes(site, tmp_path):
    """The caches a rebuild uses (highlighting, page conversion, theme files, search entries, downloads,
    numbers) change nothing: the second of two strict builds in one process writes, file for file, what the
    site fixture's fresh process wrote (the oracle)."""
    import subprocess
    import sys

    code = ("import logging, sys\nlogging.disable(logging.WARNING)\n"
            "from mkdocs.commands.build import build\nfrom mkdocs.config import load_config\n"
            "for name in ('one', 'two'):\n"
            "    build(load_config('mkdocs.yml', site_dir=sys.argv[1] + '/' + name, strict=True))\n")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                            env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-2000:]
    fresh = {p.relative_to(site): undated(p) for p in sorted(site.rglob("*")) if p.is_file()}
    rebuilt = {p.relative_to(tmp_path / "two"): undated(p) for p in sorted((tmp_path / "two").rglob("*"))
               if p.is_file()}
    assert sorted(rebuilt) == sorted(fresh)
    assert [str(name) for name in fresh if rebuilt[name] != fresh[name]] == []


def undated(path):
    """A built file's bytes, a sitemap's without the build date it carries (<lastmod>, and the gzip header's
    time), which differs between two builds on either side of midnight."""
    import gzip

    data = path.read_bytes()
    if path.name == "sitemap.xml.gz":
        data = gzip.decompress(data)
    if path.name.startswith("sitemap.xml"):
        data = re.sub(rb"<lastmod>[^<]*</lastmod>", b"<lastmod/>", data)
    return data


def test_staged_pages_are_finished_and_their_files_are_the_built_sites(site, tmp_path):
    """`python -m guide.site stage LANG OUT`, the pages for a builder that runs no MkDocs plugin: every page of
    every language, each at its URL (tests.helpers.url_of), with no marker of the guide left and the snippet
    includes kept for the builder; every file it writes beside them (notebooks, scripts, charts) is,
    byte for byte, the one the MkDocs build wrote at that path; an unknown language stops in one line."""
    from guide.site import stage

    markers = re.compile(r"<!-- (claim|observed|bench): |<!-- translation-status -->|^---\nsource_sha256", re.M)
    for lang in LANGS:
        out = tmp_path / lang
        result = python("-m", "guide.site", "stage", lang, str(out))
        assert result.returncode == 0 and result.stdout == f"staged {len(PAGES)} pages of {lang} in {out}\n", result
        assert sorted(p.name for p in (out / "docs").glob("*.md")) == PAGES
        for page in PAGES:
            assert "/" + stage.url_of(f"{lang}/{page}") == url_of(lang, page)
            text = (out / "docs" / page).read_text(encoding="utf-8")
            assert not markers.search(text), (lang, page, markers.search(text))
            english = (ROOT / "docs" / "en" / page).read_text(encoding="utf-8")
            assert text.count("--8<--") == english.count("--8<--"), (lang, page)
        files = [p for p in (out / "site").rglob("*") if p.is_file()]
        assert any(p.suffix == ".ipynb" for p in files) and (lang != "en" or any(p.suffix == ".svg" for p in files))
        for path in files:
            assert path.read_bytes() == (site / path.relative_to(out / "site")).read_bytes(), path
    result = python("-m", "guide.site", "stage", "xx", str(tmp_path / "xx"))
    assert result.returncode != 0 and result.stderr == "error: unknown language 'xx'. Fix: one of en, zh, pt, hi\n"
