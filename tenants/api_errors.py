"""One JSON error shape for the whole API: {"code", "message", "detail"?, "fields"?}."""

from __future__ import annotations

import logging
import math

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import connection, transaction
from django.http import Http404, JsonResponse
from rest_framework import exceptions
from rest_framework.response import Response

from core.errors import AppError

logger = logging.getLogger(__name__)

_CODES = {
    exceptions.ParseError: ("malformed_request", "The request body is not valid JSON."),
    exceptions.AuthenticationFailed: ("unauthenticated", None),
    exceptions.NotAuthenticated: ("unauthenticated", "Authentication is required."),
    exceptions.PermissionDenied: ("permission_denied", "Your role does not allow this."),
    exceptions.NotFound: ("not_found", "Not found."),
    exceptions.MethodNotAllowed: ("method_not_allowed", None),
    exceptions.UnsupportedMediaType: ("unsupported_media_type", None),
    exceptions.Throttled: ("rate_limited", None),
    exceptions.NotAcceptable: ("not_acceptable", None),
}


def _rollback() -> None:
    # The request is one transaction; an error answer must leave nothing written.
    if connection.in_atomic_block:
        transaction.set_rollback(True)


def exception_handler(exc, context) -> Response | None:
    _rollback()
    if isinstance(exc, AppError):
        return Response(exc.as_dict(), status=exc.status)
    if isinstance(exc, Http404):
        return Response({"code": "not_found", "message": "Not found."}, status=404)
    if isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, exceptions.ValidationError):
        fields = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        body = {"code": "invalid", "message": "Some fields are invalid.", "fields": fields}
        return Response(body, status=400)
    if isinstance(exc, exceptions.APIException):
        code, message = _CODES.get(type(exc), (exc.default_code, None))
        response = Response(
            {"code": code, "message": message or str(exc.detail)}, status=exc.status_code
        )
        if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
            response["WWW-Authenticate"] = 'Bearer realm="api"'
        if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
            response["Retry-After"] = str(max(1, math.ceil(exc.wait)))
        return response
    return None


def api_not_found(request, exception=None) -> JsonResponse:
    return JsonResponse({"code": "not_found", "message": "No such API endpoint."}, status=404)
