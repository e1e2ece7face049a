"""Refuse unusable input before any view or query sees it.

A NUL character reaches PostgreSQL from any query parameter or form field and fails there
("A string literal cannot contain NUL characters"): a 500 from a typo in a URL. This
middleware answers 400 instead, naming the field, for:

- the path (a `<str:...>` parameter would carry a NUL to a view);
- query-string keys and values (and bytes that are not UTF-8 in them);
- urlencoded and multipart form fields of browser pages;
- JSON bodies (core.json_input: characters, depth, syntax), parsed once and handed to the
  API's parser, so an endpoint that ignores its body still refuses a bad one.

API paths and JSON clients get {"code", "message", "fields"}; browsers get templates/400.html.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.shortcuts import render

from core import text_input
from core.errors import BadInput
from core.parsers import PARSED_BODY, parse_body

API_PREFIX = "/api/"
JSON_TYPE = "application/json"
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class BadInputMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            text_input.check_text(request.path_info, field="path")
            text_input.check_query_string(request.META.get("QUERY_STRING", ""))
            check_body(request)
        except BadInput as exc:  # django.request logs the 400 like any other
            return refusal(request, exc)
        return self.get_response(request)


def check_body(request: HttpRequest) -> None:
    if _content_length(request) <= 0:
        return
    content_type = request.content_type or ""
    try:
        if content_type == JSON_TYPE:
            value = parse_body(request.body, request.encoding or settings.DEFAULT_CHARSET)
            setattr(request, PARSED_BODY, value)
        elif content_type in FORM_TYPES and not request.path.startswith(API_PREFIX):
            _check_form(request, content_type)
    except RequestDataTooBig:
        # The view refuses it in its own words (the API answers 413); nothing was parsed.
        return
    except LookupError:  # an unknown charset in the Content-Type
        raise BadInput("The charset of the request body is unknown.") from None


def refusal(request: HttpRequest, exc: BadInput) -> HttpResponse:
    if wants_json(request):
        return JsonResponse(exc.as_dict(), status=exc.status)
    context = {"message": exc.message, "fields": exc.fields or {}}
    return render(request, "400.html", context, status=exc.status)


def wants_json(request: HttpRequest) -> bool:
    accept = request.headers.get("Accept", "")
    return (
        request.path.startswith(API_PREFIX)
        or request.content_type == JSON_TYPE
        or (JSON_TYPE in accept and "text/html" not in accept)
    )


# --- helpers --------------------------------------------------------------------------------------


def _check_form(request: HttpRequest, content_type: str) -> None:
    if content_type == FORM_TYPES[0]:
        encoding = request.encoding or settings.DEFAULT_CHARSET
        try:
            text = request.body.decode(encoding)
        except UnicodeDecodeError:
            raise text_input.not_utf8("The form") from None
        text_input.check_query_string(text, what="The form", encoding=encoding)
    elif request.method == "POST":  # Django parses multipart bodies of POST only
        try:
            form, files = request.POST, request.FILES
        except MultiPartParserError:
            raise BadInput("The form could not be read.") from None
        pairs = [(key, value) for key, values in form.lists() for value in values]
        text_input.check_pairs(pairs + [(key, "") for key in files])


def _content_length(request: HttpRequest) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0
