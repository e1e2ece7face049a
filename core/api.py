"""The base of every REST endpoint, and what their OpenAPI descriptions share."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import PayloadTooLarge
from core.parsers import JSONParser
from core.serializers import ErrorSerializer


class ApiView(APIView):
    """Base of the API endpoints: JSON only, the body size checked before it is read."""

    parser_classes = [JSONParser]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        _refuse_large_body(request)
        super().initial(request, *args, **kwargs)

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, RequestDataTooBig):
            exc = _too_large()
        return super().handle_exception(exc)


def error_responses(*codes: int) -> dict[int, OpenApiResponse]:
    """The OpenAPI responses for these error statuses, each with the error body."""
    return {code: OpenApiResponse(ErrorSerializer) for code in codes}


def validated(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    """`data` validated by `serializer_class`; a 400 naming the fields otherwise."""
    form = serializer_class(data=data)
    form.is_valid(raise_exception=True)
    return dict(form.validated_data)


# --- helpers --------------------------------------------------------------------------------------


def _too_large() -> PayloadTooLarge:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return PayloadTooLarge(
        f"The request body is larger than {limit} bytes.", detail={"limit": limit}
    )


def _refuse_large_body(request: Request) -> None:
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        raise _too_large()
    if request.method not in SAFE_METHODS:
        # Reading through Django checks the real size too (a chunked body has no length),
        # raising RequestDataTooBig, which handle_exception turns into 413.
        request._request.body  # noqa: B018
