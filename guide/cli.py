"""The guide's command line: `python -m guide COMMAND ...` (or the `guide` console script).

    python -m guide records status            every recorded test and output: current or STALE
    python -m guide claims check|status       the claims registry's problems; each claim's verdicts
    python -m guide i18n status|check|sync|reviewed    translations: state, structure, record the English source
    python -m guide bench record|report       benchmark records (record needs a CUDA GPU)
    python -m guide pages list|script PAGE [LANG]   each page's tier; a page's code as one program
    python -m guide links SITE_DIR            internal links and anchors of the built site
    python -m guide setup [--gpu]             the Python environment, in one line
    python -m guide build-bench [--runs N]    time the strict build and the serve rebuild

Every problem is one line naming it and its fix; exit 2 for a wrong command, 1 for problems found.
"""
import argparse
import os
import sys
from pathlib import Path

from guide.project import GuideError


class Parser(argparse.ArgumentParser):
    """argparse, with its usage errors as one line and exit code 2."""

    def error(self, message):
        self.exit(2, f"error: {message}. Fix: see '{self.prog} --help'\n")


def parser() -> argparse.ArgumentParser:
    main = Parser(prog="python -m guide", description=__doc__.split("\n\n")[0],
                  formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    sub = main.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    records = sub.add_parser("records", help="verification records")
    records.add_argument("action", choices=["status"])
    claims = sub.add_parser("claims", help="the claims registry")
    claims.add_argument("action", choices=["check", "status"])
    i18n = sub.add_parser("i18n", help="translations")
    i18n.add_argument("action", choices=["status", "check", "sync", "reviewed"])
    i18n.add_argument("lang", nargs="?", help="with sync or reviewed: the language")
    i18n.add_argument("pages", nargs="*", help="with sync or reviewed: the pages (default: all)")
    bench = sub.add_parser("bench", help="benchmark records")
    bench.add_argument("action", choices=["record", "report"])
    bench.add_argument("--quick", action="store_true", help="with record: one shape per group")
    bench.add_argument("--out", help="with record: write the record here (default: records/bench/<gpu>.json)")
    pages = sub.add_parser("pages", help="pages as programs")
    pages.add_argument("action", choices=["list", "script"])
    pages.add_argument("page", nargs="?", help="with script: the page, e.g. kernels.md")
    pages.add_argument("lang", nargs="?", default="en", help="with script: the language (default: en)")
    links = sub.add_parser("links", help="check the built site's links")
    links.add_argument("site", type=Path)
    setup = sub.add_parser("setup", help="check the Python environment")
    setup.add_argument("--gpu", action="store_true", help="the GPU tier's environment")
    build = sub.add_parser("build-bench", help="time the strict build and the serve rebuild")
    build.add_argument("--runs", type=int, default=5)
    return main


def dispatch(args) -> int:
    if args.command == "records":
        from guide import records

        return records.status()
    if args.command == "claims":
        from guide import claims

        if args.action == "status":
            return claims.status()
        problems = claims.check() + claims.scope_problems()
        for problem in problems:
            print(f"error: {problem}")
        print(f"{len(claims.registry())} claims, {len(problems)} problems")
        return 1 if problems else 0
    if args.command == "i18n":
        return i18n_command(args)
    if args.command == "bench":
        from guide import bench

        return bench.record(args.quick, args.out) if args.action == "record" else bench.report()
    if args.command == "pages":
        from guide import pages

        if args.action == "list":
            for page, tier in pages.programs().items():
                print(f"{page:20} {tier}  {len(pages.python_blocks(page))} Python blocks")
            return 0
        if not args.page:
            raise GuideError("`pages script` needs a page", "python -m guide pages script kernels.md")
        print(pages.script(args.page, args.lang), end="")
        return 0
    if args.command == "links":
        from guide import links

        if not args.site.is_dir():
            raise GuideError(f"{args.site} is not a folder", "make site && python -m guide links site")
        return links.main(args.site)
    if args.command == "setup":
        from guide import setup_check

        print(setup_check.check(args.gpu))
        return 0
    from guide import build_bench

    return build_bench.main(args.runs)


def i18n_command(args) -> int:
    from guide import i18n, project

    if args.action not in ("sync", "reviewed") and (args.lang or args.pages):
        raise GuideError(f"`i18n {args.action}` takes no arguments", f"python -m guide i18n {args.action}")
    if args.action == "status":
        rows, reviews = i18n.table(), i18n.reviews()
        print(f"{'page':24} " + " ".join(f"{lang:30}" for lang in project.translations()))
        for page, states in rows.items():
            cells = [states[lang] + (f", reviewed {reviews[page][lang]}" if reviews[page][lang] else "")
                     for lang in project.translations()]
            print(f"{page:24} " + " ".join(f"{cell:30}" for cell in cells))
        return 0
    if args.action == "check":
        found = i18n.check()
        for problem in found:
            print(f"error: {problem}")
        print(f"{len(i18n.english_pages())} pages x {len(project.translations())} translations, {len(found)} problems")
        return 1 if found else 0
    if args.lang not in project.translations():
        raise GuideError(f"unknown language {args.lang!r}", f"one of {', '.join(project.translations())}")
    unknown = [p for p in args.pages if p not in i18n.english_pages()]
    if unknown:
        raise GuideError(f"no English page {unknown[0]!r}", f"one of {', '.join(i18n.english_pages())}")
    record, verb = (i18n.review, "reviewed") if args.action == "reviewed" else (i18n.sync, "synced")
    for path in record(args.lang, args.pages):
        print(f"{verb} {path}")
    return 0


def main(argv=None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return dispatch(args)
    except GuideError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader's pager or `head` stopped reading: nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
