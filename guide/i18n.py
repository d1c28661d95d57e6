"""Translations: which pages are missing, outdated or current, and whether each keeps the English structure.

    python -m guide i18n status               # a table: page x language -> current / outdated / missing
    python -m guide i18n check                # structure and prose problems, one line each; exit 1 if any
    python -m guide i18n sync LANG [PAGE...]  # after translating: record the English source it matches
    python -m guide i18n reviewed LANG PAGE...  # after a native reader's review: record what was reviewed

The site's interface words (labels, badges, banners, the performance page's sentences) are in
words/<lang>.yaml, one file per language with the keys and placeholders of words/en.yaml.

glossary/<lang>.yaml gives, for each technical term of the guide, the one form that language uses
and the variants it does not (`term: {use: FORM, not: [VARIANT, ...]}`); the check finds a variant
in a page's prose, a claim's text or an interface word and names the file, the line and the form.

A translated page docs/<lang>/<page> starts with front matter naming the hash of the English page
it was translated from (`source_sha256`). When the English page changes, the translation is
"outdated" (the site shows a banner) until it is translated again and synced.

A page read through by a native reader of its language, for calques, stiff phrasing and terms, also
names the English page it was reviewed against (`reviewed_sha256`); the translation status page shows it.
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


def glossary_folder() -> Path:
    return project.path("glossary")


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
    """The sentences of the prose: no code, no markers, no link targets, no front matter, and no
    quotations (a program's message or an older guide's words, kept as written: as NOT_PROSE)."""
    text = re.sub(r"^\s*```.*?^\s*```", " ", text, flags=re.S | re.M)
    text = re.sub(r"`[^`]*`|<!--.*?-->|\]\([^)]*\)|\{#[\w-]+\}|<[^>\n]+>|https?://\S+", " ", text)
    text = re.sub(r'"[^"\n]*"|“[^”\n]*”', " ", text)
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
    elif meta.get("reviewed_sha256") != meta["source_sha256"]:
        found.append(f"docs/{lang}/{page} was synced with the English page {meta['source_sha256']} but reviewed "
                     f"against {meta.get('reviewed_sha256') or 'none'}. Fix: have a native reader review it, then "
                     f"python -m guide i18n reviewed {lang} {page}")
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


# What the glossary does not apply to: code blocks, include lines, inline code, HTML comments (markers),
# link targets, attribute lists and heading ids, HTML tags, addresses, quotations ("…", “…”: an older
# guide's words or a program's message, kept as written) and an English original given in full-width
# brackets after a Chinese term (推测解码（speculative decoding）).
NOT_PROSE = re.compile(r"^\s*```.*?^\s*```|^[^\n]*--8<--[^\n]*$|`[^`\n]*`|<!--.*?-->|\]\([^)]*\)|\{[#.:][^}]*\}"
                       r'|<[^>\n]+>|https?://\S+|"[^"\n]*"|“[^”\n]*”|（[\x20-\x7e]+）', re.S | re.M)


def blank(text: str, pattern=NOT_PROSE) -> str:
    """text with what pattern matches replaced by spaces, so that lines and columns stay put."""
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def page_lines(path: Path):
    """(line number, prose of that line) for a page: front matter, code and markup blanked."""
    text = path.read_text(encoding="utf-8")
    offset = text[:len(text) - len(split_front(text)[1])].count("\n")
    for number, line in enumerate(blank(split_front(text)[1]).splitlines(), start=offset + 1):
        if line.strip():
            yield number, line


def yaml_lines(path: Path, skip=()):
    """(line number, text) of each string in a YAML file, except those under a key in skip;
    placeholders ({gpu}, {lo:.2f}) and inline code blanked."""
    import yaml

    def walk(node):
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value not in skip:
                    yield from walk(value)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                yield from walk(item)
        elif isinstance(node, yaml.ScalarNode):
            yield node.start_mark.line + 1, blank(blank(node.value), PLACEHOLDER)

    yield from walk(yaml.compose(path.read_text(encoding="utf-8")))


# A variant is found as a word of its own: not inside a longer word and not part of an identifier or
# a hyphenated name (mask in BlockMask, mask_mod or torch.mask; attention in flash-attention). Where a
# word starts and ends depends on the script of its first and last letters: Python's \b takes
# Devanagari's vowel signs (ि, ों) for word ends, and Chinese has no spaces between words, so a
# Chinese variant is found anywhere.
LATIN = "A-Za-z0-9_\u00c0-\u024f"
DEVANAGARI = "\u0900-\u097f\ua8e0-\ua8ff\u200c\u200d"


def edge(char: str, before: bool) -> str:
    if re.match(f"[{LATIN}]", char):
        return rf"(?<![{LATIN}.\-])" if before else rf"(?![{LATIN}(\-]|\.\w)"
    if re.match(f"[{DEVANAGARI}]", char):
        return rf"(?<![{DEVANAGARI}])" if before else rf"(?![{DEVANAGARI}])"
    return ""


def variant_pattern(variant: str) -> str:
    return edge(variant[0], True) + re.escape(variant) + edge(variant[-1], False)


def glossary(lang: str) -> dict:
    """glossary/<lang>.yaml: {term: {"use": form, "not": [variants]}}; a malformed file is a GuideError."""
    entries = project.parsed(glossary_folder() / f"{lang}.yaml") or {}
    for term, entry in entries.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("use"), str) and set(entry) <= {"use", "not"}
                and all(isinstance(v, str) and v.strip() for v in entry.get("not") or [])):
            raise GuideError(f"glossary/{lang}.yaml: {term!r} is not `{{use: FORM, not: [VARIANT, ...]}}`",
                             f"write it as `{term}: {{use: ..., not: [...]}}`")
    return entries


def glossary_texts(lang: str):
    """(file, line number, text) of everything the glossary applies to: the pages' prose, the claims'
    own texts (not `said`, which quotes an older guide as it was written) and the interface words."""
    for page in sorted((docs() / lang).glob("*.md")):
        yield from ((f"docs/{lang}/{page.name}", n, line) for n, line in page_lines(page))
    for name, skip in ((f"claims/{lang}.yaml", ("said",)), (f"words/{lang}.yaml", ())):
        if project.path(name).exists():
            yield from ((name, n, text) for n, text in yaml_lines(project.path(name), skip))


def glossary_problems(lang: str) -> list:
    """One line for each non-glossary variant found: the file, the line and the glossary form."""
    entries = glossary(lang)
    variants = {v.lower(): (term, e["use"]) for term, e in entries.items() for v in e.get("not") or []}
    if not variants:
        return []
    # The glossary's own forms are found too, so that a variant inside one is not (attention in the
    # Portuguese "grouped-query attention"); the longest first: "block mask" before "mask".
    words = sorted({*variants, *(e["use"].lower() for e in entries.values())}, key=len, reverse=True)
    pattern = re.compile("|".join(variant_pattern(w) for w in words), re.I)
    found = []
    for file, number, text in glossary_texts(lang):
        for match in pattern.finditer(text):
            if match.group().lower() in variants:
                term, use = variants[match.group().lower()]
                found.append(f'{file}:{number}: "{match.group()}" is not the glossary\'s word for {term}. '
                             f'Fix: write "{use}" (glossary/{lang}.yaml)')
    return found


def check() -> list:
    found = []
    for lang in project.translations():
        found += [f"docs/{lang}/{p.name} has no English page docs/en/{p.name}"
                  for p in sorted((docs() / lang).glob("*.md")) if p.name not in english_pages()]
        for page in english_pages():
            found += problems(lang, page)
        found += words_problems(lang)
        if not (glossary_folder() / f"{lang}.yaml").exists():
            found.append(f"glossary/{lang}.yaml is missing. Fix: write it: one `term: {{use: FORM, not: [...]}}` a line")
        else:
            found += glossary_problems(lang)
    return found


def sync(lang: str, pages: list) -> list:
    """After translating: record the English page each translation now matches."""
    return stamp(lang, pages, "source_sha256")


def review(lang: str, pages: list) -> list:
    """After a native reader's review: record the English page it was reviewed against."""
    for page in pages or english_pages():
        if state(lang, page) == "outdated":
            raise GuideError(f"docs/{lang}/{page} is outdated, so a review of it would not match the English page",
                             f"translate it again and run python -m guide i18n sync {lang} {page} first")
    return stamp(lang, pages, "reviewed_sha256")


def stamp(lang: str, pages: list, key: str) -> list:
    """Write the current English hash into each translation's front matter, under key."""
    done = []
    for page in pages or english_pages():
        path = docs() / lang / page
        if not path.exists():
            raise GuideError(f"docs/{lang}/{page} does not exist", f"translate docs/en/{page} first")
        meta, text = split_front(path.read_text(encoding="utf-8"))
        meta[key] = english_hash(page)
        front = "".join(f"{k}: {v}\n" for k, v in meta.items())
        path.write_text(f"---\n{front}---\n{text}", encoding="utf-8")
        done.append(f"docs/{lang}/{page}")
    return done


def table() -> dict:
    return {page: {lang: state(lang, page) for lang in project.translations()} for page in english_pages()}


def reviewed(lang: str, page: str):
    """The English hash a native reader reviewed this translation against, or None."""
    path = docs() / lang / page
    return split_front(path.read_text(encoding="utf-8"))[0].get("reviewed_sha256") if path.exists() else None


def reviews() -> dict:
    return {page: {lang: reviewed(lang, page) for lang in project.translations()} for page in english_pages()}
