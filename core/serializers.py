"""Serializer fields and shapes every API shares: named enums, keyset cursors and their
query, strict booleans, JSON objects, and the error body."""

from __future__ import annotations

from typing import Any

from django.db import models
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core import paging

Position = paging.Position  # (created_at, id) of the row a page ended at


class EnumField(serializers.ChoiceField):
    """A choice field documented as one named enum (RunStatusEnum, ...), never a guessed name."""

    def __init__(self, choices: type[models.TextChoices], **kwargs: Any) -> None:
        self.enum_name = f"{choices.__name__}Enum"
        super().__init__(choices=choices.choices, **kwargs)


class EnumFieldSchema(OpenApiSerializerFieldExtension):
    target_class = EnumField

    def get_name(self) -> str:
        return self.target.enum_name

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.target.choices)}


# --- keyset cursors -------------------------------------------------------------------------------


@extend_schema_field(OpenApiTypes.STR)
class CursorField(serializers.Field):
    """`?before=`: the `next` cursor of the previous page, decoded to (created_at, id).
    A list with another key subclasses it and overrides `decode` and `to_representation`."""

    default_error_messages = {"invalid": "Not a cursor from this API."}

    def to_internal_value(self, data: Any) -> Any:
        try:
            return self.decode(data)
        except (ValueError, TypeError, AttributeError):  # uuid.UUID(5): AttributeError
            self.fail("invalid")

    def decode(self, data: Any) -> Position:
        """The position the cursor names; ValueError or TypeError if it names none."""
        return paging.position_decode(str(data))

    def to_representation(self, value: Position) -> str:
        return paging.position_encode(*value)


class PageQuerySerializer(serializers.Serializer):
    before = CursorField(required=False, help_text="The `next` cursor of the previous page.")
    limit = serializers.IntegerField(min_value=1, max_value=100, default=50)


# --- input ----------------------------------------------------------------------------------------


class StrictBooleanField(serializers.BooleanField):
    """JSON true or false only: a string such as "no" is an error, not a guess."""

    default_error_messages = {"invalid": "Must be true or false."}

    def to_internal_value(self, data: Any) -> bool:
        if isinstance(data, bool):
            return data
        self.fail("invalid")


@extend_schema_field({"type": "object", "additionalProperties": True})
class JSONObjectField(serializers.JSONField):
    """A JSON object (a dict), never a list, string or number."""

    default_error_messages = {"not_an_object": "Must be a JSON object."}

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            self.fail("not_an_object")
        return value


# --- output ---------------------------------------------------------------------------------------


class ErrorSerializer(serializers.Serializer):
    """Every error: a stable code, a message, and per-field errors or detail when useful."""

    code = serializers.CharField()
    message = serializers.CharField()
    fields = serializers.DictField(required=False)
    detail = serializers.JSONField(required=False)
