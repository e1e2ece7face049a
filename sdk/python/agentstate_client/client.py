"""The REST API with an API key: JSON in and out, errors as `AgentStateError` with the API's
stable code, an Idempotency-Key on every write so a retried request changes nothing twice."""

from __future__ import annotations

import uuid
from typing import Any

import httpx


class AgentStateError(Exception):
    """An answer of the API that is not a success: its `code`, `status` and message."""

    def __init__(self, code: str, message: str, status: int, detail: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.detail = detail


class Client:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/api/v1/",
            headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"},
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def get(self, path: str, **params: Any) -> Any:
        return self._send("GET", path, params=params)

    def post(self, path: str, body: dict[str, Any], *, idempotency_key: bool = True) -> Any:
        """POST `body`; with a fresh Idempotency-Key unless the call is idempotent by itself."""
        return self._send("POST", path, json=body, write=idempotency_key)

    def delete(self, path: str) -> Any:
        return self._send("DELETE", path, write=True)

    def _send(self, method: str, path: str, *, write: bool = False, **kwargs: Any) -> Any:
        headers = {"Idempotency-Key": str(uuid.uuid4())} if write else {}
        try:
            response = self._http.request(method, path, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise AgentStateError("unavailable", str(exc), 0) from exc
        if response.is_success and (response.status_code == 204 or not response.content):
            return None
        try:
            body = response.json()
        except ValueError:
            body = {"code": "unexpected_answer", "message": response.text[:200]}
        if not response.is_success:
            raise AgentStateError(
                str(body.get("code", "error")),
                str(body.get("message", response.reason_phrase)),
                response.status_code,
                body.get("detail"),
            )
        return body
