"""The filters of a list page, read from its query string, and how a bad one is answered.

One way to say no, on every list (runs, console, recovered runs, approvals inbox): a bad
value (an unknown status, a broken cursor, a name too long) is not applied, the other
filters still are, and the page answers 400 saying in words what is wrong, next to the
field and in a summary (templates/core/_filters.html, _filter_problems.html). The APIs
answer the same mistakes with their own stable JSON error codes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.core.exceptions import ValidationError

SHOWN_VALUE = 40  # characters of a bad value repeated in a message
LISTED = 10  # valid choices listed in a message


def quoted(value: Any) -> str:
    """A value someone typed, quoted in a message (shortened if long)."""
    text = str(value)
    return f"“{text if len(text) <= SHOWN_VALUE else text[: SHOWN_VALUE - 1] + '…'}”"


def not_one_of(value: Any, noun: str, values: Iterable[str]) -> str:
    """“bogus” is not a status. Choose one of: queued, running, …"""
    choices = [v for v in values if v]
    listed = ", ".join(choices[:LISTED]) + (", …" if len(choices) > LISTED else "")
    return f"{quoted(value)} is not {noun}. Choose one of: {listed}."


class Choice(forms.ChoiceField):
    """A filter among known values; an unknown one is named, with the values there are."""

    def __init__(self, *, noun: str, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)
        self.noun = noun  # "a status": what a valid value is

    def validate(self, value: Any) -> None:
        forms.Field.validate(self, value)
        if value and not self.valid_value(value):
            values = [str(key) for key, _ in self.choices]
            raise ValidationError(not_one_of(value, self.noun, values), code="invalid_choice")


class Text(forms.CharField):
    """A free-text filter with a length limit said in words."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)
        if self.max_length is not None:
            self.error_messages["max_length"] = (
                "At most %(limit_value)d characters (this one has %(show_value)d)."
            )
            self.widget.attrs.setdefault("maxlength", str(self.max_length))


class FilterForm(forms.Form):
    """A list's filters, always bound to the query string (an empty one means no filter).

    `offered` are the fields the page shows as controls (hidden fields, such as the list's
    position, are carried by links instead); `applied()` is what the list uses."""

    def __init__(
        self, data: Mapping[str, Any] | None = None, *, hide: Iterable[str] = (), **kwargs: Any
    ) -> None:
        kwargs.setdefault("auto_id", "filter-%s")
        kwargs.setdefault("label_suffix", "")
        super().__init__(data if data is not None else {}, **kwargs)
        self._init_kwargs = kwargs
        self._hidden = set(hide)
        self._applied: dict[str, Any] | None = None

    @property
    def offered(self) -> list[forms.BoundField]:
        """The fields shown as controls of the filter form, each with `current`: the value
        applied (a select shows it; a text input shows what was typed, to be corrected)."""
        applied = self.applied()
        fields = [f for f in self.visible_fields() if f.name not in self._hidden]
        for field in fields:
            value = applied.get(field.name)
            field.current = "" if value in (None, False) else str(value)  # type: ignore[attr-defined]
        return fields

    @property
    def hidden_names(self) -> set[str]:
        """Fields the page does not offer as controls (a summary names them without a link)."""
        return self._hidden | {f.name for f in self.hidden_fields()}

    def applied(self) -> dict[str, Any]:
        """The filters to apply: the valid ones, and each bad one as if it were not given."""
        if self._applied is None:
            if self.is_valid():
                self._applied = self.cleaned_data
            else:
                again = type(self)(self._query(without=set(self.errors)), **self._init_kwargs)
                if not again.is_valid():  # a rule across fields: none of them applies
                    again = type(self)({}, **self._init_kwargs)
                    again.is_valid()
                self._applied = again.cleaned_data
        return self._applied

    def clear_query(self) -> str:
        """The query string without the bad filters ("" if nothing is left)."""
        bad = set(self.errors) if self.is_bound else set()
        return urlencode(self._query(without=bad))

    def _query(self, *, without: set[str]) -> dict[str, str]:
        data = self.data
        return {
            name: str(data.get(name))
            for name in self.fields
            if name not in without and data.get(name) not in (None, "")
        }
