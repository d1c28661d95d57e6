"""MkDocs hook: claim badges on the pages and the generated "Verified claims" page.

`<!-- claim: ID -->` after a statement becomes a badge with the claim's verdict, linked to its
entry on the claims page; `<!-- claims -->` on claims.md becomes the list of every claim with its
verdict per recorded environment (scripts/claims.py). Runs before hooks/observed.py, which
renders the evidence outputs this hook lists.
"""
import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts import claims, i18n, records  # noqa: E402

WORDS = {
    "en": {"passed": "verified", "stale": "not verified for the current code", "failed": "fails",
           "pending": "to be verified on a GPU", "skipped": "skipped (needs a GPU)", "not-run": "—",
           "claim": "Claim", "corrections": "Corrections to older guides", "by-page": "Every claim, by page",
           "not-verified": "Statements of older guides not verified here", "said": "Older guides said",
           "observed": "What the tests observe", "tests": "Tests",
           "summary": "{n} claims on {p} pages, {c} of them corrections of older guides; "
                      "recorded environments: {envs}."},
    "zh": {"passed": "已验证", "stale": "尚未针对当前代码验证", "failed": "未通过",
           "pending": "待在 GPU 上验证", "skipped": "已跳过（需要 GPU）", "not-run": "—",
           "claim": "陈述", "corrections": "对旧指南的更正", "by-page": "按页面列出的全部陈述",
           "not-verified": "此处未验证的旧指南陈述", "said": "旧指南的说法",
           "observed": "测试实际观察到的结果", "tests": "测试",
           "summary": "共 {n} 条陈述，分布在 {p} 个页面上，其中 {c} 条是对旧指南的更正；已记录的环境：{envs}。"},
    "pt": {"passed": "verificado", "stale": "não verificado para o código atual", "failed": "falha",
           "pending": "a verificar em uma GPU", "skipped": "pulado (precisa de GPU)", "not-run": "—",
           "claim": "Afirmação", "corrections": "Correções a guias antigos", "by-page": "Todas as afirmações, por página",
           "not-verified": "Afirmações de guias antigos não verificadas aqui", "said": "Guias antigos diziam",
           "observed": "O que os testes observam", "tests": "Testes",
           "summary": "{n} afirmações em {p} páginas, {c} delas correções de guias antigos; "
                      "ambientes registrados: {envs}."},
    "hi": {"passed": "सत्यापित", "stale": "मौजूदा कोड के लिए सत्यापित नहीं", "failed": "विफल",
           "pending": "GPU पर सत्यापन बाकी", "skipped": "छोड़ा गया (GPU चाहिए)", "not-run": "—",
           "claim": "दावा", "corrections": "पुरानी गाइडों में सुधार", "by-page": "सभी दावे, पेज के अनुसार",
           "not-verified": "पुरानी गाइडों के वे कथन जो यहाँ सत्यापित नहीं हैं", "said": "पुरानी गाइडों में लिखा था",
           "observed": "टेस्ट में क्या दिखा", "tests": "टेस्ट",
           "summary": "{p} पेजों पर {n} दावे, जिनमें से {c} पुरानी गाइडों में सुधार हैं; दर्ज किए गए वातावरण: {envs}।"},
}
ICON = {"passed": "✓", "failed": "✗", "stale": "⚠", "pending": "…", "skipped": "", "not-run": ""}


def env_name(env: dict) -> str:
    return env.get("gpu") if "compute_capability" in env else "CPU"


def by_id():
    return {c["id"]: c for c in claims.registry()}


def badge(cid, lang, all_records):
    claim = by_id().get(cid)
    if claim is None:
        raise PluginError(f"unknown claim {cid!r}. Fix: add it to claims/registry.yaml")
    words = WORDS[lang]
    by_env = claims.verdicts(claim, all_records)
    state = claims.overall(by_env)
    title = "; ".join(f"{env_name(all_records[n]['environment'])}: {words[v]}"
                      for n, v in by_env.items() if v != "not-run")
    return (f'[{ICON[state]} {words[state]}](claims.md#claim-{cid} "{title}")'
            f'{{ .claim-badge .claim-{state} }}')


def quoted(text):
    """A quotation as written: underscores outside `code` are literal (torch.__version__), not emphasis."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") else p.replace("_", r"\_") for p in parts)


def cell(verdict, words):
    return f"{ICON[verdict]} {words[verdict]}".strip()


def evidence_markers(claim, all_records):
    recorded = {oid for r in all_records.values() for oid in r["outputs"]}
    return [f"<!-- observed: {oid}{'' if oid in recorded else ' gpu'} -->" for oid in claim.get("evidence", [])]


def claims_page(lang, all_records):
    words, text = WORDS[lang], claims.texts(lang)
    missing = [c["id"] for c in claims.registry() if c["id"] not in text]
    if missing:
        raise PluginError(f"claims/{lang}.yaml has no text for {', '.join(missing)}. "
                          f"Fix: translate them from claims/en.yaml (python scripts/claims.py check)")
    envs = {name: env_name(r["environment"]) for name, r in all_records.items()}
    registry = claims.registry()
    pages = [p for p in dict.fromkeys(c["page"] for c in registry if c.get("page"))]
    out = [words["summary"].format(n=len(registry), p=len(pages),
                                   c=sum(c.get("seed") == "corrected" for c in registry),
                                   envs=", ".join(envs.values())), ""]

    def where(claim):
        title = claims.sections(lang, claim["page"])[claim["section"]][0]
        return f"[{title}]({claim['page']}#{claim['section']})"

    out += [f"## {words['corrections']} {{#corrections}}", ""]
    for claim in registry:
        if claim.get("seed") != "corrected":
            continue
        t = text[claim["id"]]
        verdicts = claims.verdicts(claim, all_records)
        out += [f"!!! quote \"{words['said']}\"", f"    {quoted(t['said'])}", "",
                f"**{words['observed']}:** {t['claim']} ({where(claim)}, [#](#claim-{claim['id']}))", ""]
        out += [m for marker in evidence_markers(claim, all_records) for m in (marker, "")]
        out += [" · ".join(f"{envs[n]}: {cell(v, words)}" for n, v in verdicts.items() if v != "not-run"), "", "---", ""]

    out += [f"## {words['by-page']} {{#by-page}}", ""]
    for page in pages:
        out += [f"### {i18n.title(lang, page)} {{#page-{page[:-3].replace('_', '-')}}}", "",
                f"| {words['claim']} | " + " | ".join(envs.values()) + " |",
                "| --- | " + " | ".join("---" for _ in envs) + " |"]
        for claim in (c for c in registry if c.get("page") == page):
            verdicts = claims.verdicts(claim, all_records)
            tests = "<br>".join(f"<code>{t}</code>" for t in claim["tests"])
            out.append(f"| <span id=\"claim-{claim['id']}\"></span>{text[claim['id']]['claim']} "
                       f"({where(claim)})<br><small>{words['tests']}: {tests}</small> | "
                       + " | ".join(cell(verdicts[n], words) for n in envs) + " |")
        out.append("")

    out += [f"## {words['not-verified']} {{#not-verified}}", ""]
    for claim in registry:
        if claim.get("seed") == "not-verified":
            t = text[claim["id"]]
            out += [f"!!! quote \"{words['said']}\"", f"    {quoted(t['said'])}", "", t["why"], ""]
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files):
    lang = config.plugins["i18n"].current_language
    all_records = records.all_records()
    if "<!-- claims -->" in markdown:
        markdown = markdown.replace("<!-- claims -->", claims_page(lang, all_records))
    return claims.MARKER.sub(lambda m: badge(m.group(1), lang, all_records), markdown)
