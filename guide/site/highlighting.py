"""Pygments highlighting done once per distinct code block. The i18n plugin builds the site once per
language and the four languages show the same code, and `mkdocs serve` rebuilds every page after an
edit: each build would highlight the same blocks again. install() makes pymdownx's highlighter
reuse the HTML of a block whose source, lexer and formatter options it has highlighted before in
this process; the result is the HTML Pygments gives for them."""
import pygments

import pymdownx.highlight

_html = {}


def highlight(code, lexer, formatter, outfile=None):
    """pygments.highlight, remembered by (code, lexer and its options, formatter and its options)."""
    if outfile is not None:
        return pygments.highlight(code, lexer, formatter, outfile)
    key = (code, type(lexer), repr(sorted(lexer.options.items())), type(formatter),
           repr(sorted(formatter.options.items())))
    if key not in _html:
        _html[key] = pygments.highlight(code, lexer, formatter)
    return _html[key]


def install():
    pymdownx.highlight.highlight = highlight
