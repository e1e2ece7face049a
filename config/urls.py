from django.conf import settings
from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularSwaggerSplitView

from agents.demo import payments as demo_payments
from config import ops
from config.schema import SchemaView
from tenants.api_errors import api_not_found

urlpatterns = [
    path("healthz", ops.healthz, name="healthz"),
    path("readyz", ops.readyz, name="readyz"),
    path("metrics", ops.metrics, name="metrics"),
    path("django-admin/", admin.site.urls),
    path("console/", include("agents.console.urls")),
    path("api/schema/", SchemaView.as_view(), name="api_schema"),
    # The split view serves its init script from a URL of its own; our template has no inline
    # <style>: the page works under the strict CSP (core/csp.py).
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(
            url_name="api_schema", template_name="api/swagger_ui.html"
        ),
        name="api_docs",
    ),
    path("api/v1/", include("tenants.api_urls")),
    path("api/v1/", include("agents.web.api_urls")),
    path("api/v1/", include("approvals.api_urls")),
    path("api/v1/", include("memory.api_urls")),
    re_path(r"^api/", api_not_found),
    # The demo's stand-in payment provider exists only while the demo is on.
    *(
        [path("demo/payments/refunds", demo_payments.refunds, name="demo_payments")]
        if settings.DEMO
        else []
    ),
    # OpenID Connect sign-in exists only when it is configured (OIDC_RP_CLIENT_ID).
    *([path("oidc/", include("mozilla_django_oidc.urls"))] if settings.OIDC_ENABLED else []),
    path("", include("agents.web.urls")),
    path("", include("approvals.urls")),
    path("", include("memory.urls")),  # before tenants: /memory/ replaces its placeholder
    path("", include("tenants.urls")),
]
