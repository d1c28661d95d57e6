"""Numbers and dates in the reader's locale, formatted by Babel: 1.21× in English and 1,21× in
Portuguese, 16,384 and 16.384, November 21, 2026 and 21 de novembro de 2026. Only what the guide
generates goes through here (sentences, tables, chart labels, captions); program output on the site
stays exactly as printed. The plugin sets the locale of the page being rendered (`use`)."""
import datetime
import functools
import re
import string

from babel.dates import format_date
from babel.numbers import format_decimal, format_percent

LOCALES = {"en": "en_US", "zh": "zh_Hans_CN", "pt": "pt_BR", "hi": "hi_IN"}
_locale = ["en_US"]


def use(lang: str) -> None:
    """Format what follows for the page's language."""
    _locale[0] = LOCALES.get(lang, "en_US")


def number(value, spec="") -> str:
    """value formatted as Python's format(value, spec) would, in the page's locale: .Nf, .N%, .Ng;
    a whole number without a spec with the locale's grouping."""
    return _number(value, spec, _locale[0])


@functools.lru_cache(maxsize=None, typed=True)  # every build formats the same numbers in each language
def _number(value, spec, locale) -> str:
    match = re.fullmatch(r"\.(\d+)([fg%])", spec)
    if match is None:
        return format_decimal(value, locale=locale) if isinstance(value, int) and not spec else format(value, spec)
    digits, kind = int(match[1]), match[2]
    decimals = "." + "0" * digits if digits else ""
    if kind == "f":
        return format_decimal(value, format="#,##0" + decimals, locale=locale)
    if kind == "%":
        return format_percent(value, format="#,##0" + decimals + "%", locale=locale)
    return format_decimal(value, format="@" + "#" * (digits - 1), locale=locale)


def date(iso: str) -> str:
    """A record's date (2026-11-21) as the page's language writes it."""
    return format_date(datetime.date.fromisoformat(iso), format="long", locale=_locale[0])


class LocaleFormatter(string.Formatter):
    """str.format with the numbers in the page's locale."""

    def format_field(self, value, spec):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return number(value, spec)
        return super().format_field(value, spec)


def say(template, **values) -> str:
    """A sentence of words/<lang>.yaml with its placeholders filled, numbers in the page's locale."""
    return LocaleFormatter().format(template, **values)
