"""Claim badges and the generated "Verified claims" page.

`<!-- claim: ID -->` after a statement becomes a badge with the claim's verdict, linked to its
entry on the claims page; `<!-- claims -->` on claims.md becomes the list of every claim with its
verdict per recorded environment. The claims page lists evidence as `<!-- observed: ID -->` and
`<!-- bench: NAME -->` markers (a claim's recorded outputs and measured figures), so it runs before
the performance sentences and the recorded outputs are rendered (plugin.py); its own numbers are in
the page's locale (numbers.py).
"""
import re

from guide import claims, i18n, scope
from guide.project import GuideError
from guide.site import numbers

ICON = {"passed": "✓", "failed": "✗", "stale": "⚠", "pending": "…", "skipped": "", "not-run": ""}


def env_name(env: dict) -> str:
    return env.get("gpu") if "compute_capability" in env else "CPU"


# The order in which a scope is told, and how each key's values read.
ORDER = ("devices", "torch", "dtypes", "head_dims", "lengths", "batch", "heads", "backends", "modes", "passes",
         "diffusers", "transformers", "flash_attn_4", "simpletuner")
SHORT = {"float64": "fp64", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16",
         "triton": "Triton", "flash": "FLASH", "cudnn": "cuDNN", "fa2": "FA2", "efficient": "efficient", "math": "math"}


def scope_text(claim_scope, words) -> str:
    """A claim's scope in the reader's language: "H100, H200 · PyTorch 2.11 · bf16, fp16 · head dim 64, 128"."""
    said = []
    for key in ORDER:
        if key not in claim_scope:
            continue
        value = claim_scope[key]
        if isinstance(value, dict):
            shown = numbers.say(words["range"], low=value["from"], high=value["to"])
        else:
            parts = []
            for v in scope.values(value):
                if key in ("modes", "passes"):
                    parts.append(words[v])
                elif key in scope.NUMBERS:
                    parts.append(numbers.number(v))
                else:
                    parts.append(SHORT.get(v, str(v)))
            shown = words["separator"].join(parts)
        if key == "torch" and "since" in claim_scope:
            said.append(numbers.say(words["since"], since=claim_scope["since"], values=shown))
        elif isinstance(words.get(key), str):
            said.append(numbers.say(words[key], values=shown))
        else:
            said.append(shown)
    return " · ".join(said)


def badge(snapshot, cid, lang):
    claim = snapshot.claim(cid)
    if claim is None:
        raise GuideError(f"unknown claim {cid!r}. Fix: add it to claims/registry.yaml")
    words = snapshot.words[lang]["claims"]
    by_env = snapshot.verdicts[cid]
    state = claims.overall(by_env)
    title = "; ".join(f"{env_name(snapshot.records[n]['environment'])}: {words[v]}"
                      for n, v in by_env.items() if v != "not-run")
    where = scope_text(claim.get("scope") or {}, snapshot.words[lang]["scope"])
    return (f'[{ICON[state]} {words[state]}](claims.md#claim-{cid} "{title}")'
            f'{{ .claim-badge .claim-{state} }}' + (f' <span class="claim-scope">{where}</span>' if where else ""))


def quoted(text):
    """A quotation as written: underscores outside `code` are literal (torch.__version__), not emphasis."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") else p.replace("_", r"\_") for p in parts)


def cell(verdict, words):
    return f"{ICON[verdict]} {words[verdict]}".strip()


def evidence_markers(snapshot, claim):
    """The claim's recorded outputs (`evidence`) and the sentences of the performance page that give
    its measured figures (`figures`), as markers that the later steps render."""
    recorded = {oid for r in snapshot.records.values() for oid in r["outputs"]}
    return ([f"<!-- observed: {oid}{'' if oid in recorded else ' gpu'} -->" for oid in claim.get("evidence", [])]
            + [f"<!-- bench: {name} -->" for name in claim.get("figures", [])])


def claims_page(snapshot, lang):
    words, text = snapshot.words[lang]["claims"], snapshot.texts[lang]
    registry = snapshot.registry
    missing = [c["id"] for c in registry if c["id"] not in text]
    if missing:
        raise GuideError(f"claims/{lang}.yaml has no text for {', '.join(missing)}. "
                         f"Fix: translate them from claims/en.yaml (python -m guide claims check)")
    envs = {name: env_name(r["environment"]) for name, r in snapshot.records.items()}
    pages = [p for p in dict.fromkeys(c["page"] for c in registry if c.get("page"))]
    out = [numbers.say(words["summary"], n=len(registry), p=len(pages),
                       c=sum(c.get("seed") == "corrected" for c in registry), envs=", ".join(envs.values())), ""]
    sections, missing_pages, missing_sections = claims.placed(lang, registry)
    if missing_pages:
        page, ids = next(iter(missing_pages.items()))
        raise GuideError(f"claims/registry.yaml places {', '.join(ids)} on docs/{lang}/{page}, which does not exist. "
                         f"Fix: write the page, or correct the claims' page (python -m guide claims check)")
    if missing_sections:
        claim = missing_sections[0]
        raise GuideError(f"claim {claim['id']!r}: docs/{lang}/{claim['page']} has no section {{#{claim['section']}}}. "
                         f"Fix: give the section that heading anchor, or correct the claim's section")

    def where(claim):
        title = sections[claim["page"]][claim["section"]][0]
        return f"[{title}]({claim['page']}#{claim['section']})"

    out += [f"## {words['corrections']} {{#corrections}}", ""]
    for claim in registry:
        if claim.get("seed") != "corrected":
            continue
        t = text[claim["id"]]
        verdicts = snapshot.verdicts[claim["id"]]
        out += [f"!!! quote \"{words['said']}\"", f"    {quoted(t['said'])}", "",
                f"**{words['observed']}:** {t['claim']} ({where(claim)}, [#](#claim-{claim['id']}))", ""]
        out += [m for marker in evidence_markers(snapshot, claim) for m in (marker, "")]
        out += [" · ".join(f"{envs[n]}: {cell(v, words)}" for n, v in verdicts.items() if v != "not-run"), "", "---", ""]

    out += [f"## {words['other-quantity']} {{#other-quantity}}", ""]
    for claim in registry:
        if claim.get("seed") == "other-quantity":
            t = text[claim["id"]]
            out += [f"!!! quote \"{words['said']}\"", f"    {quoted(t['said'])}", "",
                    f"**{words['observed']}:** {t['claim']} ({where(claim)}, [#](#claim-{claim['id']}))", ""]
            out += [m for marker in evidence_markers(snapshot, claim) for m in (marker, "")] + ["---", ""]

    out += [f"## {words['by-page']} {{#by-page}}", ""]
    for page in pages:
        out += [f"### {i18n.title(lang, page)} {{#page-{page[:-3].replace('_', '-')}}}", "",
                f"| {words['claim']} | " + " | ".join(envs.values()) + " |",
                "| --- | " + " | ".join("---" for _ in envs) + " |"]
        for claim in (c for c in registry if c.get("page") == page):
            verdicts = snapshot.verdicts[claim["id"]]
            tests = "<br>".join(f"<code>{t}</code>" for t in claim["tests"])
            held = scope_text(claim.get("scope") or {}, snapshot.words[lang]["scope"])
            out.append(f"| <span id=\"claim-{claim['id']}\"></span>{text[claim['id']]['claim']} "
                       f"({where(claim)})<br><small>{words['scope']}: {held}</small>"
                       f"<br><small>{words['tests']}: {tests}</small> | "
                       + " | ".join(cell(verdicts[n], words) for n in envs) + " |")
        out.append("")

    out += [f"## {words['not-verified']} {{#not-verified}}", ""]
    for claim in registry:
        if claim.get("seed") == "not-verified":
            t = text[claim["id"]]
            out += [f"!!! quote \"{words['said']}\"", f"    {quoted(t['said'])}", "", t["why"], ""]
    return "\n".join(out)


def transform(markdown, snapshot, lang):
    if "<!-- claims -->" in markdown:
        markdown = markdown.replace("<!-- claims -->", claims_page(snapshot, lang))
    return claims.MARKER.sub(lambda m: badge(snapshot, m.group(1), lang), markdown)
