"""A mask's picture, drawn as an SVG heatmap from the text its program printed and a run recorded
(`<!-- observed: ID picture -->`): the output's first line is the caption (kept as printed), each
further line a row of cells, one character per cell: `·` no position of the cell may attend, `░` under
half, `▒` half or more but not all, `█` all. Queries run down, keys across; labels in the page's language."""
from html import escape

from guide.project import GuideError

SHADES = {"·": 0.0, "░": 0.3, "▒": 0.65, "█": 1.0}
CELL = 8          # pixels per cell
MARGIN = 18       # room for the axis labels


def grid(text):
    """(caption, rows of shades) from a picture output; GuideError on anything else."""
    caption, *rows = text.splitlines()
    if not rows or len({len(row) for row in rows}) != 1 or set("".join(rows)) - set(SHADES):
        raise GuideError(f"a picture output has a caption line and then rows of equal length drawn with "
                         f"{''.join(SHADES)} only; got {text[:80]!r}", "print the picture as snippets/gallery.py's "
                         "picture() does")
    return caption, [[SHADES[c] for c in row] for row in rows]


def svg(rows, words):
    height, width = len(rows) * CELL, len(rows[0]) * CELL
    cells = "".join(f'<rect x="{MARGIN + x * CELL}" y="{MARGIN + y * CELL}" width="{CELL}" height="{CELL}" '
                    f'fill-opacity="{share}"/>'
                    for y, row in enumerate(rows) for x, share in enumerate(row) if share)
    label = escape(words["label"])
    return (f'<svg class="mask-picture" role="img" aria-label="{label}" viewBox="0 0 {MARGIN + width + 2} '
            f'{MARGIN + height + 2}" width="{MARGIN + width + 2}" xmlns="http://www.w3.org/2000/svg">'
            f'<title>{label}</title>'
            f'<rect x="{MARGIN}" y="{MARGIN}" width="{width}" height="{height}" class="mask-frame"/>'
            f'<g class="mask-cells">{cells}</g>'
            f'<text x="{MARGIN}" y="{MARGIN - 6}" class="mask-axis">{escape(words["keys"])} →</text>'
            f'<text x="{MARGIN - 6}" y="{MARGIN}" class="mask-axis" text-anchor="end" '
            f'transform="rotate(-90 {MARGIN - 6} {MARGIN})">{escape(words["queries"])} →</text></svg>')


def figure(text, words):
    """The picture and its caption as one HTML block (no blank line inside, so Markdown leaves it as is)."""
    caption, rows = grid(text)
    legend = " ".join(f'<span class="mask-key"><svg width="10" height="10"><rect width="10" height="10" '
                      f'fill-opacity="{share}" class="mask-swatch"/></svg> {escape(words[name])}</span>'
                      for name, share in (("all", 1.0), ("most", 0.65), ("some", 0.3), ("none", 0.0)))
    return (f'<figure class="mask-figure">{svg(rows, words)}'
            f'<figcaption><code>{escape(caption)}</code><br>{legend}</figcaption></figure>\n')
