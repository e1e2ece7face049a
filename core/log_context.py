"""Structured logs: one JSON object per line, carrying the tenant and run being worked on.

The ids come from context variables: `LogContextMiddleware` sets them for a web request
(the tenant the middleware chose, the `run_id` of the URL), `bind()` for a Celery task;
`extra={"run_id": ...}` on one call wins over both.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator
from typing import Any

from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

_tenant: contextvars.ContextVar[str] = contextvars.ContextVar("log_tenant_id", default="")
_run: contextvars.ContextVar[str] = contextvars.ContextVar("log_run_id", default="")


@contextlib.contextmanager
def bind(*, tenant_id: Any = "", run_id: Any = "") -> Iterator[None]:
    """Log records inside the block carry these ids."""
    tokens = (_tenant.set(str(tenant_id or "")), _run.set(str(run_id or "")))
    try:
        yield
    finally:
        _run.reset(tokens[1])
        _tenant.reset(tokens[0])


class ContextFilter(logging.Filter):
    """Adds `tenant_id` and `run_id` (and `context`, their text form) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        tenant = getattr(record, "tenant_id", None) or _tenant.get()
        run = getattr(record, "run_id", None) or _run.get()
        record.tenant_id, record.run_id = str(tenant), str(run)
        parts = [f"tenant={tenant}" if tenant else "", f"run={run}" if run else ""]
        text = " ".join(p for p in parts if p)
        record.context = f" [{text}]" if text else ""
        return True


class JsonFormatter(_JsonFormatter):
    """timestamp, level, logger, message, tenant_id, run_id, then any `extra` fields."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("timestamp", True)
        kwargs.setdefault("rename_fields", {"levelname": "level", "name": "logger"})
        super().__init__("%(levelname)s %(name)s %(message)s", *args, **kwargs)

    def add_fields(self, log_record: dict, record: logging.LogRecord, message_dict: dict) -> None:
        super().add_fields(log_record, record, message_dict)
        log_record.pop("context", None)
        for key in ("tenant_id", "run_id"):
            value = getattr(record, key, "")
            if value:
                log_record[key] = value
            else:
                log_record.pop(key, None)


class LogContextMiddleware:
    """After the tenant middleware: the request's tenant and the URL's run on its logs."""

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        principal = getattr(request, "principal", None)
        tenant = principal.tenant.pk if principal is not None else ""
        run = ""
        match = getattr(request, "resolver_match", None)
        if match is None:
            with contextlib.suppress(Exception):
                from django.urls import resolve

                match = resolve(request.path_info)
        if match is not None:
            run = match.kwargs.get("run_id", "")
        with bind(tenant_id=tenant, run_id=run):
            return self.get_response(request)
