"""Overrides Hydra's grammar cannot read bare, answered with the exact form to type.

Hydra reads a value unquoted only if it is made of ASCII letters, digits, spaces and
``_-/\\+.$%*@?|:`` (https://hydra.cc/docs/advanced/override_grammar/basic): a regular expression
(``^``, ``(``, ``<``), a path with ``;`` or ``$(``, or one with a non-ASCII letter (``résultats``)
must be quoted. Its lexer says only ``LexerNoViableAltException: <override>``; this module names
the key, the value and the character, and gives the quoted override as one shell word, having
checked that Hydra's parser reads it back to the same value.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, OverrideParseException

from raycolloc.workload_config import WorkloadConfig, workload_hash_view

__all__ = ["explain_parse_error", "hydra_quote", "override_value", "quoted_override"]

GRAMMAR_URL = "https://hydra.cc/docs/advanced/override_grammar/basic/#quoted-values"
# What Hydra's lexer takes in an unquoted value (OverrideLexer.g4: ID, UNQUOTED_CHAR, COLON, WS,
# numbers); everything else is either grammar ('=', ',', brackets, parentheses) or not read at all.
_BARE = re.compile(r"[^A-Za-z0-9_\-/\\+.$%*@?|: \t]")
_BARE_ELEMENT = re.compile(r"[^A-Za-z0-9_\-/\\+.$%*@?|: \t\[\]{},'\"]")  # in a list or dict: also its grammar


_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def override_value(value: object) -> str:
    """``value`` (a scalar, list, dict or workload composition) as the value of an override Hydra reads
    back unchanged: strings that are not plain identifiers quoted, ``None`` as ``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, WorkloadConfig):
        value = workload_hash_view(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{override_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(override_value(v) for v in value) + "]"
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in ("null", "true", "false", "nan", "inf"):
        return text
    # Hydra: inside quotes, escape the quote and any backslashes preceding a quote or the end.
    text = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    text = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, text)
    return f"'{text}'"


def hydra_quote(value: str) -> str:
    """``value`` as a quoted value of Hydra's grammar, which reads it back unchanged.

    Inside quotes Hydra un-escapes only backslashes that precede a quote of the same kind (or the
    closing one): those are doubled and the quote escaped; every other backslash (``\\d`` of a
    regex) stays as written. Double quotes unless the value holds one and no single quote.
    """
    quote = "'" if '"' in value and "'" not in value else '"'
    body = re.sub(rf"(\\*){quote}", lambda m: m.group(1) * 2 + "\\" + quote, value)
    body = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, body)
    return f"{quote}{body}{quote}"


def _parsed_value(override: str) -> object | None:
    """What Hydra's parser makes of ``override``'s value, or None where it cannot read it."""
    try:
        return OverridesParser.create().parse_override(override).value()
    except HydraException:
        return None


def quoted_override(override: str) -> str | None:
    """``key=value`` with its value quoted, as one shell word (``'key="..."'``); None if the key
    itself is not one Hydra reads or the quoted form would not read back as the value."""
    key, sep, value = override.partition("=")
    if not sep or _parsed_value(f"{key}=x") is None:
        return None
    quoted = f"{key}={hydra_quote(value)}"
    return shlex.quote(quoted) if _parsed_value(quoted) == value else None


def explain_parse_error(exc: OverrideParseException, takes_text: Callable[[str], bool]) -> str:
    """The message for an override Hydra's parser refused: which key and value, which character,
    and (where the key takes text) the quoted override to type.

    Args:
        exc: Hydra's error; ``exc.override`` is the override as the shell passed it.
        takes_text: whether a key (without ``+``/``~``) takes a string, so that quoting is the cure.
    """
    reason = str(exc).splitlines()[0]
    override = exc.override
    key, sep, value = override.partition("=")
    if not sep:
        return f"{reason}; write key=value (see {GRAMMAR_URL.split('/#')[0]})"
    if _parsed_value(f"{key}=x") is None:
        return (
            f"cannot read the key {key!r} ({reason}): a key is ASCII letters, digits, _ and - joined by dots; "
            f"write key=value (see {GRAMMAR_URL.split('/#')[0]})"
        )
    name = key.lstrip("+~").split("@")[0]
    said = "" if reason.startswith("LexerNoViableAlt") else f" ({reason})"  # else Hydra's line is the override
    what = f"cannot read the value of {name}: {value}{said}"
    if value.startswith(("'", '"')):
        return (
            f"{what}: a quoted value ends with the quote it starts with, and a quote of that kind inside it is "
            f"written with a backslash (\\{value[0]}) (see {GRAMMAR_URL})"
        )
    structured = value.startswith(("[", "{"))
    bad = (_BARE_ELEMENT if structured else _BARE).search(value)
    if bad:
        what += f": Hydra's grammar reads {bad.group()!r} only inside quotes"
    suggestion = quoted_override(override) if takes_text(name) and not structured else None
    if suggestion:
        return f"{what}; quote the value, typed as {suggestion} (see {GRAMMAR_URL})"
    if structured:
        return (
            f"{what}; a list or dict closes its brackets, and an element with other characters is quoted: "
            f'[a,"b;c"] (see {GRAMMAR_URL})'
        )
    return f"{what}; write {name}=VALUE with a value it takes (see {GRAMMAR_URL})"
