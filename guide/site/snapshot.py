"""One immutable view of the guide's data for a build: records, benchmark records, claims and their
verdicts, interface words, translation states. Built once per version of the files it reads, so the
four language builds share it and `mkdocs serve` rebuilds it only when one of them changed."""
import dataclasses
from pathlib import Path
from types import MappingProxyType

from guide import bench, claims, i18n, pages, project, records
from guide.project import GuideError

# What the snapshot reads: a change to any of these files makes a new snapshot.
WATCHED = ("records", "claims", "words", "docs", "snippets", "tests", "mkdocs.yml")


@dataclasses.dataclass(frozen=True)
class Snapshot:
    languages: tuple
    records: MappingProxyType        # name -> record
    bench: MappingProxyType          # GPU name -> benchmark record
    registry: tuple                  # the claims, in registry order
    verdicts: MappingProxyType       # claim id -> {record name: verdict}
    texts: MappingProxyType          # lang -> claim id -> texts
    words: MappingProxyType          # lang -> part -> key -> text
    stale_outputs: frozenset         # (record name, output id) whose sources changed since that record
    translation_table: MappingProxyType  # page -> lang -> current / outdated / missing
    translation_reviews: MappingProxyType  # page -> lang -> English hash reviewed against, or None
    programs: MappingProxyType       # page with Python code -> its tier (cpu or gpu)

    def claim(self, cid):
        for claim in self.registry:
            if claim["id"] == cid:
                return claim
        return None

    def output(self, output_id):
        """(environment, output, stale) of the first record whose output is current, else of the first
        record that has it at all; None if no record has it."""
        having = [name for name, record in self.records.items() if output_id in record["outputs"]]
        if not having:
            return None
        name = next((n for n in having if (n, output_id) not in self.stale_outputs), having[0])
        record = self.records[name]
        return record["environment"], record["outputs"][output_id], (name, output_id) in self.stale_outputs


def version_key(root: Path) -> tuple:
    """Names and modification times of every file the snapshot reads."""
    found = []
    for name in WATCHED:
        path = root / name
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        found += [(str(p), p.stat().st_mtime_ns) for p in files]
    return tuple(found)


_cache = {}


def load(root: Path) -> Snapshot:
    """The snapshot of the checkout at root, made anew only when one of its files changed."""
    project.set_root(root)
    key = version_key(project.root())
    if _cache.get("key") != key:
        _cache.update(key=key, snapshot=build())
    return _cache["snapshot"]


def build() -> Snapshot:
    langs = project.languages()
    all_records = records.all_records()
    registry = tuple(claims.registry())
    if not all(isinstance(c, dict) and "id" in c for c in registry):
        raise GuideError("claims/registry.yaml has an entry without an id", "give every claim an id")
    words = {lang: MappingProxyType(i18n.words(lang)) for lang in langs}
    return Snapshot(
        languages=langs,
        records=MappingProxyType(all_records),
        bench=MappingProxyType(bench.load_all()),
        registry=registry,
        verdicts=MappingProxyType({c["id"]: claims.verdicts(c, all_records) for c in registry}),
        texts=MappingProxyType({lang: claims.texts(lang) for lang in langs}),
        words=MappingProxyType(words),
        stale_outputs=frozenset((name, key) for name, r in all_records.items() for key in records.stale(r)
                                if key in r["outputs"]),
        translation_table=MappingProxyType(i18n.table()),
        translation_reviews=MappingProxyType(i18n.reviews()),
        programs=MappingProxyType(pages.programs()),
    )
