"""Who is acting, for which tenant, allowed to do what."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tenants.models import Role, Scope, Tenant

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from tenants.models import ApiKey

ROLE_SCOPES: dict[str, frozenset[str]] = {
    Role.ADMIN: frozenset(Scope.values),
    Role.MANAGER: frozenset({Scope.READ, Scope.WRITE, Scope.APPROVE}),
    Role.MEMBER: frozenset({Scope.READ, Scope.WRITE}),
    Role.VIEWER: frozenset({Scope.READ}),
}


@dataclass(frozen=True)
class Principal:
    tenant: Tenant
    scopes: frozenset[str]
    role: str | None = None  # None for API keys
    user: User | None = None
    api_key: ApiKey | None = field(default=None, compare=False)

    @classmethod
    def for_member(cls, *, tenant: Tenant, user: User, role: str) -> Principal:
        return cls(tenant=tenant, scopes=ROLE_SCOPES[role], role=role, user=user)

    @classmethod
    def for_api_key(cls, key: ApiKey, tenant: Tenant) -> Principal:
        return cls(tenant=tenant, scopes=frozenset(key.scopes), api_key=key)

    def can(self, scope: str) -> bool:
        return scope in self.scopes

    @property
    def sees_only_own(self) -> bool:
        """Members (end users) see only their own sessions, runs and memories."""
        return self.role == Role.MEMBER

    @property
    def label(self) -> str:
        if self.api_key is not None:
            return f"api key {self.api_key.prefix}… ({self.api_key.name})"
        return str(getattr(self.user, "username", "anonymous"))
