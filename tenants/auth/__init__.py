"""Signing in, apart from tenancy: invitations and their links, passwords and their reset,
the sign-in lockout, single sign-on (what an SSO sign-in means, `sso.py`; the OpenID Connect
backend, `oidc.py`) and their pages (`views.py`). The models stay in tenants/models.py."""
