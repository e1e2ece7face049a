from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from agents import demo_payments
from tenants.api_errors import api_not_found

urlpatterns = [
    path("api/schema/", SpectacularAPIView.as_view(), name="api_schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api_schema"), name="api_docs"),
    path("api/v1/", include("tenants.api_urls")),
    path("api/v1/", include("agents.api_urls")),
    path("api/v1/", include("approvals.api_urls")),
    re_path(r"^api/", api_not_found),
    path("demo/payments/refunds", demo_payments.refunds, name="demo_payments"),
    path("", include("agents.urls")),
    path("", include("approvals.urls")),
    path("", include("tenants.urls")),
]
