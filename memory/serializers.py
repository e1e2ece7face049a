"""Shapes of the memory API. They check types; the services check meaning (stable codes)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.serializers import ErrorSerializer
from memory.facts.remember import MAX_ITEMS
from memory.facts.values import MAX_VALUE_BYTES, MAX_VALUE_DEPTH


class FactCreateSerializer(serializers.Serializer):
    category = serializers.CharField(max_length=100)
    text = serializers.CharField(
        required=False, allow_blank=True, trim_whitespace=False, max_length=100_000, default=None
    )
    value = serializers.JSONField(
        required=False,
        default=None,
        help_text=f"Instead of `text`: a JSON object (at most {MAX_VALUE_BYTES:,} bytes, "
        f"{MAX_VALUE_DEPTH} levels deep), kept and answered exactly as given; its text (one "
        "`path: leaf` line per leaf) is derived for search and the privacy page.",
    )
    ttl_minutes = serializers.FloatField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The fact expires this many minutes after it is written (or read with "
        "`refresh_ttl`), never later than its category's TTL allows.",
    )
    key = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")
    confidence = serializers.FloatField(required=False, min_value=0.0, max_value=1.0, default=1.0)
    # When what it says happened or was said (ISO 8601 with a time zone); default: now.
    occurred_at = serializers.DateTimeField(required=False, default=None)

    def validate(self, attrs: dict) -> dict:
        if attrs.get("text") is None and attrs.get("value") is None:
            raise serializers.ValidationError({"text": ["Give a text or a value."]})
        return attrs


@extend_schema_field(FactCreateSerializer(many=True))
class FactItemsField(serializers.ListField):
    """Checked here only as a list: each item is judged alone, as the single POST judges its
    body, and a bad item is refused in its result rather than failing the batch."""


class FactBatchSerializer(serializers.Serializer):
    facts = FactItemsField(
        min_length=1,
        max_length=MAX_ITEMS,
        help_text=f"1 to {MAX_ITEMS} facts, each like the body of the single POST.",
    )


class FactEditSerializer(serializers.Serializer):
    text = serializers.CharField(allow_blank=True, trim_whitespace=False, max_length=100_000)


class SearchQuerySerializer(serializers.Serializer):
    q = serializers.CharField(max_length=2000)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=50, default=10)


class FactSourceSerializer(serializers.Serializer):
    kind = serializers.CharField()
    session = serializers.CharField(allow_null=True)
    run = serializers.CharField(allow_null=True)
    message_seq = serializers.IntegerField(allow_null=True)


class FactSerializer(serializers.Serializer):
    """A fact as `memory.selectors.fact_json` renders it."""

    id = serializers.UUIDField()
    category = serializers.CharField()
    key = serializers.CharField()
    text = serializers.CharField()
    value = serializers.JSONField(
        allow_null=True, help_text="The JSON object the fact was given as; null: it is its text."
    )
    source = FactSourceSerializer()
    confidence = serializers.FloatField()
    pinned = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    valid_from = serializers.DateTimeField()
    occurred_at = serializers.DateTimeField()
    valid_until = serializers.DateTimeField(allow_null=True)
    superseded_by = serializers.UUIDField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    ttl_minutes = serializers.FloatField(allow_null=True)
    embedded = serializers.BooleanField()
    merged_into = serializers.UUIDField(
        required=False,
        help_text="Only on a write answered 200: the live fact this one was merged into "
        "(the same or a near-duplicate text), which it refreshed instead of adding a fact.",
    )


class FactListSerializer(serializers.Serializer):
    results = FactSerializer(many=True)


class FactListQuerySerializer(serializers.Serializer):
    key = serializers.CharField(required=False, max_length=200, help_text="Only this key's fact.")
    ids = serializers.ListField(
        child=serializers.UUIDField(),
        required=False,
        max_length=100,
        help_text="Only these facts (the parameter repeated).",
    )
    refresh_ttl = serializers.BooleanField(
        default=False,
        help_text="The facts answered that have a TTL of their own expire that long from now "
        "again (as LangGraph's refresh_ttl), never past their category's TTL.",
    )


class NamespacesQuerySerializer(serializers.Serializer):
    prefix = serializers.ListField(
        child=serializers.CharField(max_length=150),
        required=False,
        max_length=10,
        help_text='Labels the namespace starts with, the parameter repeated; "*" matches any.',
    )
    suffix = serializers.ListField(
        child=serializers.CharField(max_length=150),
        required=False,
        max_length=10,
        help_text='Labels the namespace ends with, the parameter repeated; "*" matches any.',
    )
    max_depth = serializers.IntegerField(required=False, min_value=1, max_value=100)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=1000, default=100)
    offset = serializers.IntegerField(required=False, min_value=0, max_value=10**6, default=0)


class NamespacesSerializer(serializers.Serializer):
    namespaces = serializers.ListField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text='["memories", username, category], or cut to max_depth; sorted.',
    )


class FactBatchItemSerializer(serializers.Serializer):
    """One item's answer: `fact` when it was written or refreshed, `error` when refused."""

    index = serializers.IntegerField(help_text="The item's position in `facts`, from 0.")
    status = serializers.IntegerField(
        help_text="201 a new fact (or a new version of its key), 200 the same fact refreshed "
        "(as the single POST answers 200), or the status the single POST would have "
        "refused it with (400, 422)."
    )
    fact = FactSerializer(required=False)
    error = ErrorSerializer(required=False)


class FactBatchResultSerializer(serializers.Serializer):
    created = serializers.IntegerField()
    refreshed = serializers.IntegerField()
    refused = serializers.IntegerField()
    results = FactBatchItemSerializer(many=True, help_text="One per item, in order.")


class ScorePartsSerializer(serializers.Serializer):
    """What a result's score is made of: `(1 - wv)·text + wv·vector` (each 0..1 over the
    person's facts; vector null without embeddings), times the other factors."""

    text = serializers.FloatField(help_text="BM25, divided by the best match's")
    vector = serializers.FloatField(allow_null=True, help_text="cosine, min-max normalized")
    category = serializers.FloatField(help_text="the category's weight")
    recency = serializers.FloatField(help_text="how recently it was learned")
    confidence = serializers.FloatField()
    time = serializers.FloatField(help_text="a question about time: how well it fits")


class SearchHitSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    category = serializers.CharField()
    key = serializers.CharField()
    text = serializers.CharField()
    occurred_at = serializers.DateTimeField(allow_null=True)
    score = serializers.FloatField()
    score_parts = ScorePartsSerializer()


class SearchResultSerializer(serializers.Serializer):
    mode = serializers.CharField()
    results = SearchHitSerializer(many=True)


class DeletedSerializer(serializers.Serializer):
    deleted = serializers.IntegerField()


class PrivacyLinkSerializer(serializers.Serializer):
    url = serializers.CharField()
    expires_in = serializers.IntegerField()


class SubjectLookupQuerySerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)


class SubjectSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()
