"""Translations: structure, prose, and the outdated / missing states with their banner."""
import shutil

import pytest

from guide import i18n, project
from tests.helpers import ROOT, python


def test_every_translation_keeps_the_english_structure_and_has_no_english_prose():
    problems = i18n.check()
    assert not problems, "\n".join(problems)


def test_every_translation_is_current():
    outdated = {(lang, page): s for page, row in i18n.table().items() for lang, s in row.items() if s != "current"}
    assert not outdated, f"translate these again, then `python -m guide i18n sync LANG PAGE`: {outdated}"


@pytest.fixture
def docs(checkout):
    return checkout / "docs"


def test_a_changed_english_page_makes_its_translations_outdated_until_synced(docs):
    (docs / "en/kernels.md").write_text((docs / "en/kernels.md").read_text() + "\nOne more sentence.\n")
    assert {i18n.state(lang, "kernels.md") for lang in project.translations()} == {"outdated"}
    assert i18n.state("zh", "index.md") == "current"
    i18n.sync("pt", ["kernels.md"])
    assert i18n.state("pt", "kernels.md") == "current" and i18n.state("zh", "kernels.md") == "outdated"


def test_a_translation_synced_after_its_last_review_fails_the_check_until_reviewed(docs):
    (docs / "en/kernels.md").write_text((docs / "en/kernels.md").read_text() + "\nOne more sentence.\n")
    assert not any("reviewed" in p for p in i18n.problems("pt", "kernels.md")), "outdated is not unreviewed"
    i18n.sync("pt", ["kernels.md"])
    found = [p for p in i18n.problems("pt", "kernels.md") if "reviewed" in p]
    synced = i18n.split_front((docs / "pt/kernels.md").read_text())[0]["source_sha256"]
    assert found == [f"docs/pt/kernels.md was synced with the English page {synced} but reviewed against "
                     f"{i18n.reviewed('zh', 'kernels.md')}. Fix: have a native reader review it, then "
                     f"python -m guide i18n reviewed pt kernels.md"]
    i18n.review("pt", ["kernels.md"])
    assert i18n.problems("pt", "kernels.md") == []


def test_outdated_page_shows_a_banner_in_its_language_linking_to_english(docs):
    from guide.site import snapshot, translations

    def banner(lang, url, src):
        return translations.transform("# x\n", snapshot.load(docs.parent), lang, src, url, {})

    assert "!!! warning" not in banner("zh", "zh/kernels/", "zh/kernels.md")
    (docs / "en/kernels.md").write_text((docs / "en/kernels.md").read_text() + "\nOne more sentence.\n")
    text = banner("zh", "zh/kernels/", "zh/kernels.md")
    assert text.startswith('!!! warning "此译文已过时"') and "](../../kernels/)" in text
    (docs / "en/index.md").write_text((docs / "en/index.md").read_text() + "\nMore.\n")
    assert "](../)" in banner("hi", "hi/", "hi/index.md")


@pytest.mark.parametrize("lang, sentence", [
    ("pt", "This sentence was left in English by mistake and is not translated."),
    ("zh", "The cache is not under the home directory, whatever older guides say."),
    ("hi", "Only the backward pass needs a GPU, and this text is still in English."),
])
def test_english_prose_left_in_a_translation_is_found(docs, lang, sentence):
    path = docs / lang / "kernels.md"
    path.write_text(path.read_text() + f"\n{sentence}\n")
    assert any("English prose left" in p and sentence[:40] in p for p in i18n.problems(lang, "kernels.md"))


@pytest.mark.parametrize("lang, sentence", [
    ("zh", '编译后会报错中止，错误信息为 "torch.compile on CPU only supports inference and `return_lse` is not supported yet"。'),
    ("hi", 'PyTorch इस त्रुटि के साथ रुकता है: “the backward pass is not supported on this device and will not run”।'),
])
def test_a_quoted_program_message_is_not_english_prose_but_the_same_words_unquoted_are(docs, lang, sentence):
    path = docs / lang / "kernels.md"
    text = path.read_text()
    path.write_text(text + f"\n{sentence}\n")
    assert not any("English prose left" in p for p in i18n.problems(lang, "kernels.md"))
    path.write_text(text + "\n" + sentence.replace('"', "").replace("“", "").replace("”", "") + "\n")
    assert any("English prose left" in p for p in i18n.problems(lang, "kernels.md"))


def test_structure_differences_are_named(docs):
    path = docs / "pt" / "index.md"
    text = path.read_text()
    path.write_text(text.replace("quickstart.py:causal", "quickstart.py:compiled", 1)
                    .replace("](kernels.md)", "](dispatch.md)", 1).replace("\n## ", "\n### ", 1))
    found = " ".join(i18n.problems("pt", "index.md"))
    for part in ("include lines", "link targets", "headings"):
        assert f"its {part} differ from docs/en/index.md" in found, part
    (docs / "hi" / "accuracy.md").unlink()
    assert any("docs/hi/accuracy.md is missing" in p for p in i18n.check())


def test_interface_words_keep_the_english_keys_and_placeholders(checkout):
    import yaml

    from guide.project import GuideError

    assert i18n.words_problems("pt") == []
    path = checkout / "words" / "pt.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    del data["claims"]["tests"]
    data["performance"]["seed-fa2"] = data["performance"]["seed-fa2"].replace("{hi:.2f}", "{alto:.2f}")
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    found = i18n.words_problems("pt")
    assert any("claims.tests is missing" in p for p in found)
    assert any("performance.seed-fa2 has placeholders" in p for p in found)
    with pytest.raises(GuideError, match="^words/pt.yaml: claims.tests is missing"):
        i18n.words("pt", "claims")
    (checkout / "words" / "hi.yaml").unlink()
    assert i18n.words_problems("hi") == ["words/hi.yaml is missing. Fix: translate words/en.yaml into it"]


def test_tables_and_admonitions_are_compared(docs):
    path = docs / "zh" / "troubleshooting.md"
    lines = path.read_text().splitlines(True)
    row = next(i for i, line in enumerate(lines) if line.startswith("| `AttributeError"))
    path.write_text("".join(lines[:row] + lines[row + 1:]) + '\n!!! note "x"\n    y\n')
    found = " ".join(i18n.problems("zh", "troubleshooting.md"))
    assert "its tables differ" in found and "its admonitions differ" in found


def test_cli():
    status = python("-m guide i18n status", cwd=ROOT)
    assert status.returncode == 0 and "kernels.md" in status.stdout and "current" in status.stdout
    check = python("-m guide i18n check", cwd=ROOT)
    assert check.returncode == 0 and check.stdout.strip().endswith("0 problems"), check.stdout
    for args in ("sync xx", "sync zh nowhere.md", "frobnicate"):
        result = python(f"-m guide i18n {args}", cwd=ROOT)
        assert result.returncode == 2 and result.stderr.count("\n") == 1 and result.stderr.startswith("error:"), args


@pytest.fixture
def glossaries(checkout):
    """The checkout's copy with the glossaries too."""
    shutil.copytree(ROOT / "glossary", checkout / "glossary")
    return checkout


def glossary_lines(lang):
    return [p for p in i18n.check() if f"(glossary/{lang}.yaml)" in p]


def plant(path, prefix, text) -> int:
    """text put at the start of the first line of path that starts with prefix (at its end if None);
    the number of that line."""
    lines = path.read_text(encoding="utf-8").splitlines(True)
    if prefix is None:
        lines.append(text + "\n")
        number = len(lines)
    else:
        number = next(i for i, line in enumerate(lines, 1) if line.startswith(prefix))
        lines[number - 1] = lines[number - 1].replace(prefix, prefix + text, 1)
    path.write_text("".join(lines), encoding="utf-8")
    return number


# Where a variant is planted: the file, the start of its line, the language, the variant, its term, the form.
PLANTED = {
    "page": ("docs/zh/masks.md", None, "zh", "遮罩", "mask", "掩码"),
    "claim": ("claims/pt.yaml", '  claim: "', "pt", "masks ", "mask", "máscara"),
    "words": ("words/zh.yaml", "  passed: ", "zh", "kernel ", "kernel", "内核"),
    "Hindi page": ("docs/hi/decoding.md", None, "hi", "decoding", "decoding", "डिकोडिंग"),
    "Hindi words": ("words/hi.yaml", "  seen: ", "hi", "output ", "output", "आउटपुट"),
}


@pytest.mark.parametrize("where", PLANTED)
def test_a_non_glossary_variant_fails_the_check_with_one_line(glossaries, where):
    """A variant in a page, a claim text or an interface word: one line naming the file, the line and
    the glossary's form; the same variant in a claim's quotation of an older guide (`said`) is kept."""
    file, prefix, lang, variant, term, use = PLANTED[where]
    line = plant(glossaries / file, prefix, variant if prefix else
                 f"हर {variant} चरण।" if lang == "hi" else f"每个{variant}都是一个函数。")
    if where == "claim":
        plant(glossaries / file, '  said: "', variant)
    assert glossary_lines(lang) == [f'{file}:{line}: "{variant.strip()}" is not the glossary\'s word for {term}. '
                                    f'Fix: write "{use}" (glossary/{lang}.yaml)']


def test_code_identifiers_quotations_and_longer_words_are_not_flagged(glossaries):
    path = glossaries / "docs/pt/masks.md"
    path.write_text(path.read_text(encoding="utf-8") + (
        "\nUse `mask` ou a `BlockMask`, `create_block_mask`, BlockMask, mask_mod, and_masks, block_mask.shape,"
        " torch.mask, flash-attention, unmasked, [máscaras](masks.md#mask), <!-- mask -->,"
        ' o antigo "mask is a function" e a grouped-query attention.\n'
        "\n```python\n--8<-- \"snippets/masks.py:mask_mods\"\n```\n"), encoding="utf-8")
    assert glossary_lines("pt") == []
    path.write_text(path.read_text(encoding="utf-8") + "\nA attention mask.\n", encoding="utf-8")
    assert [p.split(": ", 1)[1][:13] for p in glossary_lines("pt")] == ['"attention" i', '"mask" is not']


def test_word_ends_in_devanagari_and_chinese():
    """Python's \\b takes Devanagari vowel signs for word ends (मास्क in मास्कों); Chinese has no spaces."""
    import re

    assert re.search(r"\bमास्क\b", "तीन मास्कों से")  # the trap: \b stops before the vowel sign ो
    assert not re.search(i18n.variant_pattern("मास्क"), "तीन मास्कों से")
    assert not re.search(i18n.variant_pattern("मास्क"), "एकमास्क")
    assert re.search(i18n.variant_pattern("मास्क"), "एक मास्क, और")
    assert re.search(i18n.variant_pattern("mask"), "一个mask的")  # Latin inside Chinese text
    assert re.search(i18n.variant_pattern("遮罩"), "一个遮罩的")
    assert not re.search(i18n.variant_pattern("mask"), "a mask_mod and BlockMask")


def test_a_malformed_or_missing_glossary_is_named(glossaries):
    from guide.project import GuideError

    (glossaries / "glossary/hi.yaml").unlink()
    assert "glossary/hi.yaml is missing. Fix: write it: one `term: {use: FORM, not: [...]}` a line" in i18n.check()
    (glossaries / "glossary/pt.yaml").write_text("mask: máscara\n", encoding="utf-8")
    with pytest.raises(GuideError, match=r"^glossary/pt.yaml: 'mask' is not `\{use: FORM, not: \[VARIANT, \.\.\.\]\}`\. Fix: "):
        i18n.check()


def test_hindi_writes_each_glossary_term_in_one_script():
    """In the Hindi pages, claim texts and interface words, each term of glossary/hi.yaml is written in
    Latin letters or in Devanagari, never both. Its Latin forms are the English term itself (and its
    plural) besides the glossary's; quotations of older guides are kept as written."""
    import re

    from tests.helpers import ROOT

    def script(word):
        return "Devanagari" if re.search("[\u0900-\u097f]", word) else "Latin"

    def found(form, text):
        if script(form) == "Devanagari":
            return form in text
        return re.search(rf"(?<![A-Za-z0-9_.\-]){re.escape(form)}(?:e?s)?(?![A-Za-z0-9_(\-])", text, re.I)

    texts = [line for page in sorted((ROOT / "docs/hi").glob("*.md")) for _, line in i18n.page_lines(page)]
    texts += [text for _, text in i18n.yaml_lines(ROOT / "words/hi.yaml")]
    texts += [text for _, text in i18n.yaml_lines(ROOT / "claims/hi.yaml", skip=("said",))]
    # Library names stay in Latin letters, as the glossary's header says: "Transformers", Hugging Face's
    # library, is not the term transformer (ट्रांसफ़ॉर्मर)
    prose = re.sub(r"(?<![A-Za-z])Transformers(?![A-Za-z])", " ", "\n".join(texts))
    mixed = {}
    for term, entry in i18n.glossary("hi").items():
        forms = {term, entry["use"], *entry.get("not", [])}
        scripts = {script(form) for form in forms if found(form, prose)}
        if len(scripts) > 1:
            mixed[term] = sorted(form for form in forms if found(form, prose))
    assert not mixed, f"written in two scripts: {mixed}"


def test_a_review_is_recorded_against_the_english_page_and_shown_on_the_status_page(docs):
    import hashlib

    from guide.site import snapshot, translations
    from guide.project import GuideError

    originals = {lang: (docs / lang / "kernels.md").read_text() for lang in project.translations()}
    for lang, text in originals.items():  # start from no reviews at all
        (docs / lang / "kernels.md").write_text("".join(line for line in text.splitlines(keepends=True)
                                                        if not line.startswith("reviewed_sha256:")))
    assert {i18n.reviewed(lang, "kernels.md") for lang in project.translations()} == {None}
    english = hashlib.sha256((docs / "en/kernels.md").read_bytes()).hexdigest()[:16]
    i18n.review("pt", ["kernels.md"])
    assert i18n.reviewed("pt", "kernels.md") == english and i18n.state("pt", "kernels.md") == "current"
    table = translations.status_table(snapshot.load(docs.parent), "pt", {t: t for t in project.translations()})
    row = next(line for line in table.splitlines() if "(kernels.md)" in line)
    assert row.split("|")[2].strip() == f"`{english}`"
    assert f"revisada em relação a `{english}`" in row.split("|")[4]  # the pt column, after zh
    assert "revisada" not in row.split("|")[3]
    (docs / "en/kernels.md").write_text((docs / "en/kernels.md").read_text() + "\nOne more sentence.\n")
    with pytest.raises(GuideError, match="outdated"):
        i18n.review("zh", ["kernels.md"])
    (docs / "en/kernels.md").write_text((docs / "en/kernels.md").read_text().removesuffix("\nOne more sentence.\n"))
    for lang, text in originals.items():
        (docs / lang / "kernels.md").write_text(text)
