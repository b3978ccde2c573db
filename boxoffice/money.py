"""Amounts of money in words people read: minor units shown in the
currency's major unit, with as many decimals as ISO 4217 gives it.

Messages name money this way ("138.00 EUR", "5000 JPY", "1.500 KWD");
metadata and the wire keep minor units.
"""

from __future__ import annotations

# ISO 4217 currencies whose minor unit is not a hundredth (exponent 2).
_ZERO = ("BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI", "VND", "VUV", "XAF")
_EXPONENTS = {
    **dict.fromkeys((*_ZERO, "XOF", "XPF"), 0),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
    **dict.fromkeys(("CLF", "UYW"), 4),
}


def exponent(currency: str) -> int:
    """How many decimals the currency's major unit has (2 unless ISO 4217
    says otherwise)."""
    return _EXPONENTS.get(currency.upper(), 2)


def format_money(amount_minor: int, currency: str, *, grouped: bool = False) -> str:
    """``13800, "EUR"`` -> ``"138.00 EUR"``; ``5000, "JPY"`` -> ``"5000 JPY"``;
    with ``grouped`` the thousands are separated for a reader of figures
    (``4500000, "EUR"`` -> ``"45,000.00 EUR"``)."""
    digits = exponent(currency)
    sign = "-" if amount_minor < 0 else ""
    whole, part = divmod(abs(amount_minor), 10**digits)
    units = f"{whole:,}" if grouped else str(whole)
    text = f"{units}.{part:0{digits}d}" if digits else units
    return f"{sign}{text} {currency}"


def format_minor_text(amount_minor: str | None, currency: str | None) -> str:
    """The same for an amount carried as text (error metadata); text that
    is not a whole number is shown as it is."""
    currency = currency or ""
    try:
        value = int(amount_minor or "")
    except ValueError:
        return f"{amount_minor} {currency}".strip()
    return format_money(value, currency).strip()
