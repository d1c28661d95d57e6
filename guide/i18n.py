"""Translations: which pages are missing, outdated or current, and whether each keeps the English structure.

    python -m guide i18n status               # a table: page x language -> current / outdated / missing
    python -m guide i18n check                # structure and prose problems, one line each; exit 1 if any
    python -m guide i18n sync LANG [PAGE...]  # after translating: record the English source it matches

The site's interface words (labels, badges, banners, the performance page's sentences) are in
words/<lang>.yaml, one file per language with the keys and placeholders of words/en.yaml.

A translated page docs/<lang>/<page> starts with front matter naming the hash of the English page
it was translated from (`source_sha256`). When the English page changes, the translation is
"outdated" (the site shows a banner) until it is translated again and synced.
"""
import functools
import hashlib
import re
from pathlib import Path

from guide import project
from guide.project import GuideError

FRONT = re.compile(r"\A---\n(.*?)\n---\n", re.S)


def docs() -> Path:
    return project.path("docs")


def words_folder() -> Path:
    return project.path("words")


def english_pages() -> list:
    return sorted(p.name for p in (docs() / "en").glob("*.md"))


def english_hash(page: str) -> str:
    return hashlib.sha256((docs() / "en" / page).read_bytes()).hexdigest()[:16]


def split_front(text: str) -> tuple:
    """(front matter as a dict of simple `key: value` lines, the Markdown after it)."""
    match = FRONT.match(text)
    if not match:
        return {}, text
    meta = dict(line.split(":", 1) for line in match.group(1).splitlines() if ":" in line)
    return {k.strip(): v.strip() for k, v in meta.items()}, text[match.end():]


def body(path: Path) -> str:
    return split_front(path.read_text(encoding="utf-8"))[1]


def title(lang: str, page: str) -> str:
    """A page's H1 in lang, or in English where the translation is missing."""
    path = docs() / lang / page if (docs() / lang / page).exists() else docs() / "en" / page
    return body(path).splitlines()[0].lstrip("# ")


def state(lang: str, page: str) -> str:
    """missing, outdated or current."""
    path = docs() / lang / page
    if not path.exists():
        return "missing"
    meta, _ = split_front(path.read_text(encoding="utf-8"))
    return "current" if meta.get("source_sha256") == english_hash(page) else "outdated"


def shape(text: str) -> dict:
    """What a translation must keep of its English page; only the prose differs."""
    return {
        "include lines": [line.strip() for line in text.splitlines() if "--8<--" in line],
        "outputs and claims": re.findall(r"<!-- (?:observed|claim|claims|bench|translation-status)[^>]*-->", text),
        "headings": [(len(h), i) for h, i in re.findall(r"^(#+) .*?(?:\{#([\w-]+)\})?$", text, re.M)],
        "tables": [line.count("|") for line in text.splitlines() if line.lstrip().startswith("|")],
        "admonitions": re.findall(r"^\s*(?:!!!|\?\?\?\+?) (\w+)", text, re.M),
        "link targets": re.findall(r"\]\(([^)\s]+)", text),
    }


# Words that mark an English sentence; none of them is a word of Portuguese, Chinese or Hindi.
ENGLISH = set("the and of is are to with that this for it on by be not which when from an or you your "
              "can has have was will does only its their there these those than what into how".split())


def prose(text: str):
    """The sentences of the prose: no code, no markers, no link targets, no front matter."""
    text = re.sub(r"^\s*```.*?^\s*```", " ", text, flags=re.S | re.M)
    text = re.sub(r"`[^`]*`|<!--.*?-->|\]\([^)]*\)|\{#[\w-]+\}|<[^>]+>|https?://\S+", " ", text)
    return [s for s in re.split(r"(?<=[.!?。！？।:：])\s+|\n\s*\n|\|", text) if s.strip()]


def english_left(text: str) -> list:
    """Sentences that read as English: at least 5 Latin words, a fifth of them (and 2) English-only words."""
    found = []
    for sentence in prose(text):
        words = re.findall(r"[A-Za-z']+", sentence)
        if len(words) >= 5 and sum(w.lower() in ENGLISH for w in words) >= max(2, len(words) / 5):
            found.append(" ".join(sentence.split())[:80])
    return found


def problems(lang: str, page: str) -> list:
    path = docs() / lang / page
    if not path.exists():
        return [f"docs/{lang}/{page} is missing. Fix: translate docs/en/{page}, then "
                f"python -m guide i18n sync {lang} {page}"]
    meta, text = split_front(path.read_text(encoding="utf-8"))
    found = []
    if "source_sha256" not in meta:
        found.append(f"docs/{lang}/{page} has no source_sha256 front matter. Fix: python -m guide i18n sync {lang} {page}")
    english = shape(body(docs() / "en" / page))
    for part, value in shape(text).items():
        if value != english[part]:
            found.append(f"docs/{lang}/{page}: its {part} differ from docs/en/{page}")
    found += [f"docs/{lang}/{page}: English prose left: {s!r}" for s in english_left(text)]
    return found


def words(lang: str, part: str = None) -> dict:
    """words/<lang>.yaml, or one part of it: {key: text}; shared, so read it and do not change it.
    A file that lacks a key of words/en.yaml stops the build with a one-line error."""
    path = words_folder() / f"{lang}.yaml"
    versions = tuple(p.stat().st_mtime_ns if p.exists() else 0 for p in (words_folder() / "en.yaml", path))
    found = _checked_words(str(words_folder()), lang, versions)
    if found:
        raise GuideError(found[0])
    parsed = project.parsed(path)
    return parsed if part is None else parsed[part]


@functools.lru_cache(maxsize=None)
def _checked_words(folder: str, lang: str, versions: tuple) -> list:
    return words_problems(lang) if lang != "en" else []


PLACEHOLDER = re.compile(r"{[^{}]*}")


def words_problems(lang: str) -> list:
    """A words file with other parts, keys or placeholders than words/en.yaml."""
    path = words_folder() / f"{lang}.yaml"
    if not path.exists():
        return [f"words/{lang}.yaml is missing. Fix: translate words/en.yaml into it"]
    english, translated = project.parsed(words_folder() / "en.yaml"), project.parsed(path)
    found = []
    for part, keys in english.items():
        have = translated.get(part) or {}
        found += [f"words/{lang}.yaml: {part}.{k} is missing. Fix: translate it from words/en.yaml"
                  for k in keys if k not in have]
        found += [f"words/{lang}.yaml: {part}.{k} is not in words/en.yaml. Fix: remove it"
                  for k in have if k not in keys]
        found += [f"words/{lang}.yaml: {part}.{k} has placeholders {sorted(set(PLACEHOLDER.findall(have[k])))}, "
                  f"English has {sorted(set(PLACEHOLDER.findall(v)))}. Fix: keep English's placeholders"
                  for k, v in keys.items() if k in have
                  and set(PLACEHOLDER.findall(str(have[k]))) != set(PLACEHOLDER.findall(str(v)))]
    return found


def check() -> list:
    found = []
    for lang in project.translations():
        found += [f"docs/{lang}/{p.name} has no English page docs/en/{p.name}"
                  for p in sorted((docs() / lang).glob("*.md")) if p.name not in english_pages()]
        for page in english_pages():
            found += problems(lang, page)
        found += words_problems(lang)
    return found


def sync(lang: str, pages: list) -> list:
    """Write the current English hash into each translation's front matter."""
    done = []
    for page in pages or english_pages():
        path = docs() / lang / page
        if not path.exists():
            raise GuideError(f"docs/{lang}/{page} does not exist", f"translate docs/en/{page} first")
        meta, text = split_front(path.read_text(encoding="utf-8"))
        meta["source_sha256"] = english_hash(page)
        front = "".join(f"{k}: {v}\n" for k, v in meta.items())
        path.write_text(f"---\n{front}---\n{text}", encoding="utf-8")
        done.append(f"docs/{lang}/{page}")
    return done


def table() -> dict:
    return {page: {lang: state(lang, page) for lang in project.translations()} for page in english_pages()}
