"""What a customer's message asks of the demo refund desk, read as people write it.

The offline scripted model (agents/demo/scripted_desk.py) and the runs' names
(refund_desk.summarize_refund) read a message through `read()`, so both understand the same
things. Deterministic, no model:

- **The order**: a letter, an optional dash and three or more digits, anywhere, any case:
  "A-1002", "a-1002", "order #A1002" → A-1002; after the word "order" a space may stand for
  the dash ("order a 1002", "order number A 1002").
- **The amount**: the first of, in this order, a number with a currency sign or code before
  or after it ("$40", "40$", "US$ 40", "USD 40", "40 usd", "40 dollars", "€12.50",
  "12.50 eur"), a number after "refund (of)" ("refund 40"), a number with cents ("40.00"), or
  the message's only other number. Thousands may be grouped ("1,234.50"); a comma before two
  last digits is a decimal comma ("12,50"). Numbers inside the
  order id, dates, times of day and counts ("2 times") are not amounts.
- **A refund is asked** when the message says refund, money back, reimburse, an amount
  "back" ("can I get 40 back", "have my 40 dollars back"), charged twice or two times (also
  with the amount between: "charged $40 twice"), double charged or duplicate charge.
- **The reason**: "duplicate charge" when it says twice, duplicate or double; otherwise
  "customer request".

`missing` names what a refund request lacks ("the order number", "the amount"), for a reply
that says exactly that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

_ORDER = re.compile(r"(?<![\w-])([A-Za-z])-?(\d{3,})(?![\w-])")
_ORDER_SPACED = re.compile(
    r"\border\s+(?:(?:number|no\.?|id)\s+)?#?([A-Za-z])\s(\d{3,})(?![\w-])", re.I
)
# Grouped thousands ("1,250.50"), a decimal comma ("12,50"), or plain ("40", "40.5", "40.00").
_NUMBER = r"(\d{1,3}(?:,\d{3})+(?:\.\d{1,2})?(?!\d)|\d+,\d{2}(?!\d)|\d+(?:\.\d{1,2})?)"
_CURRENCY_BEFORE = r"(?:US\s?\$|\$|€|£|\b(?:usd|eur|gbp)\s?)"
_CURRENCY_AFTER = r"(?:\s?(?:\$|€|£)|\s?(?:usd|eur|gbp|dollars?|bucks|euros?|pounds?)\b)"
_WITH_CURRENCY = re.compile(
    rf"{_CURRENCY_BEFORE}\s?{_NUMBER}(?!\d)|(?<![\w.,]){_NUMBER}{_CURRENCY_AFTER}", re.I
)
_AFTER_REFUND = re.compile(
    rf"\brefund(?:ed)?\s+(?:of\s+|for\s+)?{_NUMBER}(?![\d.,]*\s*[-/:])", re.I
)
_WITH_CENTS = re.compile(r"(?<![\w.,/:-])(\d{1,3}(?:,\d{3})+\.\d{2}|\d+[.,]\d{2})(?![\d/:-])")
_BARE = re.compile(rf"(?<![\w.,/:-]){_NUMBER}(?![\w/:-])")
_DATE_OR_TIME = re.compile(r"\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}|\d{1,2}:\d{2}|\b\d+\s+times\b")
_ASKS = re.compile(
    r"\brefund|\bmoney back\b|\breimburse|\bdouble[- ]charged\b|\bduplicate (?:charge|payment)\b"
    # charged twice, charged me two times, charged $40 twice
    r"|\bcharged\b(?:\W+[\w.,]+){0,3}?\W+(?:twice|(?:two|2) times)\b"
    # get 40 back, have my 40 dollars back, want my $40.00 back
    r"|\b(?:get|have|want|need)\s+(?:my\s+|the\s+)?(?:[$€£]\s?)?\d[\d.,]*"
    r"(?:\s*(?:usd|eur|gbp|dollars?|bucks|euros?|pounds?))?\s+back\b",
    re.I,
)
_DUPLICATE = re.compile(r"\btwice\b|\bduplicate\b|\bdouble\b|\b(?:two|2) times\b", re.I)
CENTS = Decimal("0.01")
# More than any bill has: such an amount is read, and then matches no order.
LARGEST = Decimal("999999999.99")


@dataclass(frozen=True)
class RefundRequest:
    asks_refund: bool
    amount: Decimal | None
    order: str | None
    reason: str
    missing: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.asks_refund and not self.missing


def read(message: str) -> RefundRequest:
    text = str(message or "")
    order_match = _ORDER.search(text) or _ORDER_SPACED.search(text)
    order = f"{order_match[1].upper()}-{order_match[2]}" if order_match else None
    without_ids = _ORDER.sub(" ", _ORDER_SPACED.sub(" ", text))
    amount = _amount(_DATE_OR_TIME.sub(" ", without_ids))
    asks = bool(_ASKS.search(text))
    missing = []
    if asks and order is None:
        missing.append("the order number")
    if asks and amount is None:
        missing.append("the amount")
    reason = "duplicate charge" if _DUPLICATE.search(text) else "customer request"
    return RefundRequest(asks, amount, order, reason, missing)


def _amount(text: str) -> Decimal | None:
    for pattern in (_WITH_CURRENCY, _AFTER_REFUND, _WITH_CENTS):
        found = pattern.search(text)
        if found:
            return _decimal(next(g for g in found.groups() if g))
    bare = _BARE.findall(text)
    return _decimal(bare[0]) if len(bare) == 1 else None


def _decimal(number: str) -> Decimal | None:
    if re.fullmatch(r"\d+,\d{2}", number):  # a decimal comma: 12,50
        number = number.replace(",", ".")
    try:
        value = Decimal(number.replace(",", ""))
    except InvalidOperation:
        return None
    if not value.is_finite() or value <= 0 or value > LARGEST:
        return None
    return value.quantize(CENTS)
