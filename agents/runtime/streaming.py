"""`ctx.llm`: the configured chat model, with its call and tokens shown live on the run page.

Tokens are not stored: the reply is part of the step and lands with its checkpoint. While
the call runs, the text so far is sent at most every AGENTSTATE_LIVE_TOKEN_INTERVAL_SECONDS.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings

from agents.runtime.llm import ChatModel, ChatResult, TokenCallback
from agents.runtime.progress import publish_live

TAIL_CHARS = 4000  # the page shows the end of a long reply while it streams


class LiveModel:
    def __init__(self, model: ChatModel, *, ctx: Any, after: int) -> None:
        self._model = model
        self._ctx = ctx
        self._after = after

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        on_token: TokenCallback | None = None,
    ) -> ChatResult:
        """The model's `chat`, announced live, with its tokens streamed to the page."""
        if not settings.AGENTSTATE_LIVE_TOKENS:
            return self._answered(self._model.chat(messages, tools=tools, on_token=on_token))
        stream = _Stream(self._ctx, self._after, on_token)
        stream.send("llm.started", text="")
        try:
            result = self._model.chat(messages, tools=tools, on_token=stream.token)
        except BaseException:
            stream.send("llm.finished", text=stream.text(), ok=False)
            raise
        stream.send("llm.finished", text=result.content[-TAIL_CHARS:], ok=True)
        return self._answered(result)

    def _answered(self, result: ChatResult) -> ChatResult:
        """Note on the step which provider and model really answered (the reply says)."""
        calls = getattr(self._ctx, "_llm_calls", None)
        if calls is not None:
            # A model class that names no provider is named by its class.
            provider = result.provider or getattr(self._model, "provider", "")
            provider = provider or type(self._model).__name__
            model = result.model or getattr(self._model, "model", "")
            calls.append({"provider": str(provider)[:100], "model": str(model)[:200]})
        return result


class _Stream:
    def __init__(self, ctx: Any, after: int, on_token: TokenCallback | None) -> None:
        self.ctx = ctx
        self.after = after
        self.on_token = on_token
        self.parts: list[str] = []
        self.interval = settings.AGENTSTATE_LIVE_TOKEN_INTERVAL_SECONDS
        self.last = 0.0

    def token(self, text: str) -> None:
        self.parts.append(text)
        if self.on_token is not None:
            self.on_token(text)
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            self.send("llm.token", text=self.text())

    def text(self) -> str:
        return "".join(self.parts)[-TAIL_CHARS:]

    def send(self, kind: str, **data: Any) -> None:
        publish_live(
            tenant_id=self.ctx.tenant_id,
            run_id=self.ctx.run_id,
            kind=kind,
            after=self.after,
            **data,
        )
