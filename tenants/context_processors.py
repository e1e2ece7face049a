from django.conf import settings


def tenancy(request) -> dict:
    """The acting principal and the tenants the user may switch to, for the layout; whether
    single sign-on is on, for the sign-in pages."""
    return {
        "principal": getattr(request, "principal", None),
        "memberships": getattr(request, "memberships", []),
        "sso_enabled": settings.OIDC_ENABLED,
    }
