"""The site without MkDocs:

    python -m guide.site stage LANG OUT [--site-url URL]   a language's finished pages under OUT/docs/ and
                                                           the files beside them under OUT/site/ (stage.py)
    python -m guide.site zensical OUT                      every language built with Zensical into OUT (zensical.py)

A problem is one line naming it and its fix, exit 2."""
import sys
from pathlib import Path

from guide.cli import Parser
from guide.project import GuideError


def main(argv=None) -> int:
    parser = Parser(prog="python -m guide.site", description=__doc__.split("\n")[0].rstrip(":"))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    stage = sub.add_parser("stage", help="a language's finished pages and the files beside them, into a folder")
    stage.add_argument("lang", help="the language, e.g. zh")
    stage.add_argument("out", type=Path, help="the folder: pages under OUT/docs/, their files under OUT/site/")
    stage.add_argument("--site-url", default="",
                       help="the site's URL, for the notebooks' links (default: mkdocs.yml's)")
    zensical = sub.add_parser("zensical", help="every language built with Zensical")
    zensical.add_argument("out", type=Path, help="the site's folder (replaced)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    from guide.site import stage as steps
    from guide.site import zensical as builder

    try:
        if args.command == "stage":
            written = steps.language(args.lang, args.out, args.site_url)
            print(f"staged {len(written)} pages of {args.lang} in {args.out}")
        else:
            print(f"built {', '.join(builder.build(args.out.resolve()))} in {args.out}")
    except GuideError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
