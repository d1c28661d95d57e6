"""The guide's MkDocs plugin: an adapter over guide/site/stage.py, the steps each page goes through
whatever the builder. It loads one snapshot of the data in on_config, hands each page's Markdown to
stage.page (translations, claims, performance, observed outputs, downloads, in that order), writes each
page's notebook and script beside it after it is built, and after the build splits the search index
into one per language (search.py) and copies the sitemap next to each page (translations.py).

Work that gives the same result for the same input is done once per process and reused by the other
languages' builds and by serve's rebuilds: highlighting each code block (highlighting.py), each
page's search entries (search.py), each page's downloads (downloads.py), each page's HTML from its
Markdown (rendering.py), the listing of the theme's static files (theme.py) and each number formatted
for a locale (numbers.py).

Bad data stops the build with a one-line PluginError naming the problem and the fix.
"""
import logging
from pathlib import Path

import jinja2
from mkdocs import plugins
from mkdocs.config import config_options
from mkdocs.exceptions import PluginError
from mkdocs.plugins import BasePlugin

from guide.project import GuideError
from guide.site import downloads, highlighting, rendering, search, snapshot, stage, theme, translations


class SharedBytecodeCache(jinja2.BytecodeCache):
    """The i18n plugin builds the site once per language, each time with a new Jinja environment that
    would compile the same ~140 templates again; this cache, keyed by template name and source
    checksum (an edited template is compiled afresh), is shared by those environments."""

    def __init__(self):
        self.store = {}

    def load_bytecode(self, bucket):
        if bucket.key in self.store:
            bucket.bytecode_from_string(self.store[bucket.key])

    def dump_bytecode(self, bucket):
        self.store[bucket.key] = bucket.bytecode_to_string()


TEMPLATES = SharedBytecodeCache()


class GuidePlugin(BasePlugin):
    # Per language, the lunr settings of its search index: {lang: [code], pipeline: [...]}.
    config_scheme = (("search", config_options.Type(dict, default={})),)
    snapshot = None

    downloads = None  # page URL -> {file name: content}, written in on_post_page

    def on_startup(self, *, command, dirty):
        """A build prints what an author must act on: MkDocs' warnings and errors, not its INFO lines. The
        console handler is raised to WARNING, not the logger (as --quiet does): strict mode counts the
        warnings the logger lets through, so a --quiet build would hide them and pass."""
        if command == "build":
            for handler in logging.getLogger("mkdocs").handlers:
                if handler.get_name() == "MkDocsStreamHandler":
                    handler.setLevel(logging.WARNING)

    def on_config(self, config):
        self.downloads = {}
        highlighting.install()  # each distinct code block highlighted once for all languages and rebuilds
        rendering.install()  # each page's Markdown converted once for the same input, in every rebuild
        theme.install()  # the theme's static files listed once, not in every build
        search.remember_entries()  # each page's search entries parsed once for all rebuilds
        try:
            import jieba  # the search plugin's Chinese segmenter: its dictionary's loading is no news to an author
        except ImportError:
            pass
        else:
            jieba.setLogLevel(logging.WARNING)
        try:
            self.snapshot = snapshot.load(Path(config.config_file_path).resolve().parent)
        except GuideError as e:
            raise PluginError(str(e)) from None
        return config

    def on_env(self, env, config, files):
        env.bytecode_cache = TEMPLATES
        return env

    def on_page_markdown(self, markdown, page, config, files):
        lang = config.plugins["i18n"].current_language
        try:
            markdown, self.downloads[page.url] = stage.page(markdown, self.snapshot, lang, page.file.src_uri, page.url,
                                                            config.get("site_url") or "/", config["site_dir"])
            return markdown
        except GuideError as e:
            raise PluginError(str(e)) from None
        except (KeyError, TypeError, ValueError) as e:
            raise PluginError(f"{page.file.src_uri}: the guide's data has an unexpected shape "
                              f"({type(e).__name__}: {e}). Fix: run `python -m guide claims check` "
                              f"and `python -m guide records status`") from None

    def on_post_page(self, output, page, config):
        downloads.write(config["site_dir"], page.url, self.downloads.pop(page.url, {}))
        i18n = config.plugins["i18n"]
        if i18n.current_language != i18n.default_language:
            return search.point_to_language(output, i18n.current_language)
        return output

    @plugins.event_priority(-150)  # after the i18n plugin, which builds the other languages in its own
    def on_post_build(self, config):
        translations.copy_sitemaps(Path(config["site_dir"]))
        i18n = config.plugins["i18n"]
        if not i18n.building:  # the last language is built and the combined search index written
            search.split(Path(config["site_dir"]), i18n.build_languages, i18n.default_language,
                         self.config["search"])
