"""Who is acting, for which tenant, allowed to do what."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tenants.models import Membership, Role, Scope, Tenant

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

    @classmethod
    def for_personal_token(cls, key: ApiKey, tenant: Tenant) -> Principal:
        """A person acting through their own MCP token: that person with no role, so only
        their own memories are theirs to reach (tenants/personal_tokens.py)."""
        return cls(tenant=tenant, scopes=frozenset(key.scopes), user=key.user, api_key=key)

    @property
    def personal_token(self) -> bool:
        return self.api_key is not None and self.api_key.user_id is not None

    def can(self, scope: str) -> bool:
        return scope in self.scopes

    @property
    def sees_only_own(self) -> bool:
        """Members (end users) see only their own sessions, runs and memories."""
        return self.role == Role.MEMBER

    @property
    def label(self) -> str:
        if self.personal_token:
            who = getattr(self.user, "username", "")
            return f"{who} (MCP token {self.api_key.prefix}…)"  # type: ignore[union-attr]
        if self.api_key is not None:
            return f"api key {self.api_key.prefix}… ({self.api_key.name})"
        return str(getattr(self.user, "username", "anonymous"))


# --- a signed-in person's principal (the web middleware and the live socket) ----------------------


def member_principal(
    user: User, memberships: Sequence[Membership], wanted_tenant: Any
) -> Principal | None:
    """The principal in the tenant the session chose (`wanted_tenant`, a tenant id as the
    session stores it), else in the first membership; None without memberships."""
    if not memberships:
        return None
    chosen = next((m for m in memberships if str(m.tenant_id) == wanted_tenant), memberships[0])
    return Principal.for_member(tenant=chosen.tenant, user=user, role=chosen.role)
