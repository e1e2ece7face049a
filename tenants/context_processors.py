def tenancy(request) -> dict:
    """The acting principal and the tenants the user may switch to, for the layout."""
    return {
        "principal": getattr(request, "principal", None),
        "memberships": getattr(request, "memberships", []),
    }
