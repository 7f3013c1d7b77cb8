"""Unit strings a contract may declare for a numeric column: SI, with its prefixes, and the units
accepted for use with SI; money in ISO 4217 codes.

Grammar: terms joined by ``.``, ``*`` or ``·``, optionally divided by more with ``/``; a term is a
number (``100`` in ``EUR/100``: cents of a euro, ``1e-3``) or a symbol with an optional integer
exponent (``m^2``, ``s^-1``, ``m2``). ``1`` is dimensionless (a count, a ratio). Symbols:
SI base and derived units (prefixable: ``km``, ``ms``, ``µs``/``us``, ``kWh``), accepted non-SI
units (``min h d deg L t ha eV``), ``%``, ``ppm``, bytes and bits with decimal or binary prefixes,
and currencies as three capital letters (not SI, but money has no SI unit; seed 001's
SCHEMA.UNITS_DECLARED asks that the unit be explicit, which a currency is).
"""

from __future__ import annotations

import re

_PREFIXABLE = {"m", "g", "s", "A", "K", "mol", "cd", "Hz", "N", "Pa", "J", "W", "C", "V", "F", "Ω", "ohm",
               "S", "Wb", "T", "H", "lm", "lx", "Bq", "Gy", "Sv", "kat", "L", "l", "eV", "Wh", "t", "B", "bit"}
_PLAIN = {"1", "%", "ppm", "rad", "sr", "degC", "°C", "min", "h", "d", "deg", "°", "ha", "au", "Da", "Np",
          "arcmin", "arcsec", "byte"}
_PREFIXES = ("da", "Y", "Z", "E", "P", "T", "G", "M", "k", "h", "d", "c", "m", "µ", "u", "n", "p", "f", "a",
             "z", "y", "Ki", "Mi", "Gi", "Ti", "Pi")
_TERM = re.compile(r"^(?P<sym>[A-Za-zµΩ°%]+|1)(\^?(?P<exp>-?\d+))?$")
_NUMBER = re.compile(r"^\d+(\.\d+)?([eE]-?\d+)?$")
_CURRENCY = re.compile(r"^[A-Z]{3}$")


def _symbol_ok(sym: str) -> bool:
    if sym in _PLAIN or sym in _PREFIXABLE or _CURRENCY.match(sym):
        return True
    return any(sym.startswith(p) and sym[len(p):] in _PREFIXABLE for p in _PREFIXES)


def unit_problem(unit: str) -> str | None:
    """None when ``unit`` is accepted, else what is wrong with it (naming the bad term)."""
    text = unit.strip()
    if not text:
        return "is empty"
    parts = text.split("/")
    for part in parts:
        terms = [t for t in re.split(r"[.*·]", part.strip())]
        if not part.strip() or any(not t.strip() for t in terms):
            return "has an empty term"
        for term in terms:
            term = term.strip()
            if _NUMBER.match(term):
                continue
            m = _TERM.match(term)
            if not m or not _symbol_ok(m.group("sym")):
                return (f"term {term!r} is not an SI unit, a unit accepted with SI, or a currency code "
                        "(e.g. m, km/h, kWh, s, ms, degC, deg, 1, %, EUR/100)")
    return None
