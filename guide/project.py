"""Where the guide's checkout is, its languages, and its data files parsed once per version.

The package is installed (also non-editable, into site-packages), so it finds the checkout it
works on rather than assuming its own location: GUIDE_ROOT, else the nearest folder at or above
the working directory that holds mkdocs.yml and claims/registry.yaml.
"""
import functools
import json
import os
from pathlib import Path


class GuideError(Exception):
    """A problem the user can fix; str() is one line naming the problem and the fix."""

    def __init__(self, problem: str, fix: str = ""):
        super().__init__(f"{problem}. Fix: {fix}" if fix else problem)


_root = None


def root() -> Path:
    """The checkout the guide works on."""
    global _root
    if _root is None:
        _root = find_root(Path.cwd())
    return _root


def set_root(path) -> None:
    """Work on the checkout at path (the MkDocs plugin passes its config's folder)."""
    global _root
    _root = Path(path).resolve()


def find_root(start: Path) -> Path:
    if os.environ.get("GUIDE_ROOT"):
        return Path(os.environ["GUIDE_ROOT"]).resolve()
    for folder in (start.resolve(), *start.resolve().parents):
        if (folder / "mkdocs.yml").is_file() and (folder / "claims" / "registry.yaml").is_file():
            return folder
    raise GuideError(f"no guide checkout at or above {start}",
                     "run this command inside the repository, or set GUIDE_ROOT to it")


def path(*parts) -> Path:
    return root().joinpath(*parts)


def relative(p: Path) -> str:
    return Path(p).resolve().relative_to(root()).as_posix()


@functools.lru_cache(maxsize=None)
def _parsed(file: str, mtime_ns: int):
    text = Path(file).read_text(encoding="utf-8")
    try:
        if file.endswith(".json"):
            return json.loads(text)
        import yaml

        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except ValueError as e:  # json.JSONDecodeError and yaml.YAMLError's subclasses
        raise GuideError(f"{file} is not valid: {str(e).splitlines()[0]}", "correct the file or restore it from git") from None
    except Exception as e:
        if type(e).__module__.startswith("yaml"):
            raise GuideError(f"{file} is not valid YAML: {' '.join(str(e).split())[:160]}",
                             "correct the file or restore it from git") from None
        raise


def parsed(file: Path):
    """A JSON or YAML file, parsed once per version (mtime) of it; shared: read it, never change it."""
    file = Path(file)
    return _parsed(str(file), file.stat().st_mtime_ns)


def mkdocs_config() -> dict:
    """mkdocs.yml, parsed once per version; tags such as !!python/name read as None."""
    return _mkdocs_config(str(path("mkdocs.yml")), path("mkdocs.yml").stat().st_mtime_ns)


@functools.lru_cache(maxsize=None)
def _mkdocs_config(file: str, mtime_ns: int) -> dict:
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)  # !!python/name tags and the like
    return yaml.load(Path(file).read_text(encoding="utf-8"), Loader=Loader)


def language_entries() -> list:
    """mkdocs.yml's i18n plugin's language entries (locale, name, site_name, theme, ...), as it lists them."""
    for plugin in mkdocs_config().get("plugins", []):
        if isinstance(plugin, dict) and "i18n" in plugin:
            return plugin["i18n"]["languages"]
    raise GuideError(f"{path('mkdocs.yml')} configures no i18n languages", "list them under plugins: - i18n: languages:")


def languages() -> tuple:
    """The site's languages, English first, as mkdocs.yml's i18n plugin lists them."""
    langs = [entry["locale"] for entry in language_entries()]
    default = [entry["locale"] for entry in language_entries() if entry.get("default")]
    return tuple(default + [lang for lang in langs if lang not in default])


def language_names() -> dict:
    """{locale: the name the language switcher shows}, as mkdocs.yml's i18n plugin gives them."""
    return {entry["locale"]: entry["name"] for entry in language_entries()}


def url_prefix(lang: str) -> str:
    """Where a language's pages are in the site: the first language at the root, the others under lang/."""
    return "" if lang == languages()[0] else f"{lang}/"


def translations() -> tuple:
    """The languages other than English."""
    return languages()[1:]
