"""`python -m snippets` lists the modules; `python -m snippets doctor` checks this machine."""
import pkgutil
import sys

import snippets


def modules():
    return [m.name for m in pkgutil.iter_modules(snippets.__path__) if not m.name.startswith("_")]


def main(argv) -> int:
    if argv and argv[0] == "doctor":
        from snippets import doctor
        from snippets._cli import run

        return run(doctor.main, argv[1:])
    if argv:
        print(f"error: unknown command {argv[0]!r}. Fix: run 'python -m snippets' to list what there is",
              file=sys.stderr)
        return 2
    for name in modules():
        doc = (__import__(f"snippets.{name}", fromlist=["_"]).__doc__ or "").strip().splitlines()
        print(f"python -m snippets.{name:15} {doc[0] if doc else ''}")
    print("python -m snippets doctor          checks this machine for FlexAttention")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
