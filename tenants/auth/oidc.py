"""The OpenID Connect backend (mozilla-django-oidc), listed only when OIDC_RP_CLIENT_ID is set.

mozilla-django-oidc runs the code flow (state, nonce, PKCE, the id token's signature); this
subclass decides who the person is and what they may enter (tenants/auth/sso.py).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import SuspiciousOperation
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from tenants.auth import sso


class TenantOIDCBackend(OIDCAuthenticationBackend):
    def verify_claims(self, claims: dict[str, Any]) -> bool:
        # The subject is the identity; the email is optional and trusted only when verified.
        return bool(claims.get("sub"))

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]):
        info = super().get_userinfo(access_token, id_token, payload)
        # OpenID Connect Core 5.3.2: userinfo for another subject than the id token's is
        # not to be used (a token substitution).
        if str(info.get("sub", "")) != str(payload.get("sub", "")):
            raise SuspiciousOperation("The userinfo subject differs from the id token's.")
        return info

    def filter_users_by_claims(self, claims: dict[str, Any]):
        return sso.users_for_claims(claims)

    def create_user(self, claims: dict[str, Any]):
        user = sso.sso_user_create(claims)
        sso.sso_sign_in(user=user, claims=claims)
        return user

    def update_user(self, user, claims: dict[str, Any]):
        user = sso.sso_user_update(user, claims)
        sso.sso_sign_in(user=user, claims=claims)
        return user
