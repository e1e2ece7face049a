"""Django settings. Every value comes from the environment; README lists them all."""

from __future__ import annotations

import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config import embedded
from config.env import env_bool, env_float, env_int, env_list, env_str, env_url

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)
DEMO = env_bool("AGENTSTATE_DEMO", False)


def _secret_key() -> str:
    key = env_str("SECRET_KEY")
    if key:
        return key
    if not (DEBUG or DEMO or env_str("DATABASE_URL") is None):
        raise ImproperlyConfigured("SECRET_KEY must be set when running on external servers")
    # Embedded servers, DEBUG or demo: one random key kept under var/ so sessions survive.
    path = embedded.var_dir() / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# --- Services: external when the URL is set, embedded otherwise. ---------------------------
DATABASE_URL = env_url("DATABASE_URL", schemes=("postgres", "postgresql")) or (
    embedded.ensure_postgres()
)
REDIS_URL = env_url("REDIS_URL", schemes=("redis", "rediss", "unix")) or embedded.ensure_redis()
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL,
        conn_max_age=env_int("DB_CONN_MAX_AGE", 60, minimum=0),
        conn_health_checks=True,
    )
}
DATABASES["default"]["TEST"] = {"NAME": env_str("TEST_DATABASE_NAME")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "django_htmx",
    "template_partials",
    "channels",
    "tenants",
    "agents",
    "approvals",
    "memory",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "tenants.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Opens the request's one transaction and sets the row-level-security tenant in it.
    "tenants.middleware.TenantMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "tenants.context_processors.tenancy",
                "approvals.context_processors.approvals_badge",
            ],
        },
    }
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = embedded.var_dir() / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
WHITENOISE_USE_FINDERS = True

# --- Security. CSRF is always on; cookies are secure and HSTS is sent outside DEBUG. ---------
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SESSION_COOKIE_HTTPONLY = True
SECURE_HSTS_SECONDS = 0 if DEBUG else env_int("SECURE_HSTS_SECONDS", 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'self'; form-action 'self'"
)
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("MAX_REQUEST_BYTES", 1_048_576, minimum=1024)

# --- API. ----------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.api_auth.ApiKeyAuthentication",
        "tenants.api_auth.TenantSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["tenants.permissions.IsTenantMember"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "tenants.api_errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "AgentState API",
    "DESCRIPTION": "Durable, tenant-isolated AI agents. Authenticate with `Authorization: Bearer`.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Celery: at-least-once delivery; results live in PostgreSQL, not in a result backend. ----
CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BEAT_SCHEDULE = {
    "recover-runs": {
        "task": "agents.recover_runs",
        "schedule": env_float("AGENTSTATE_RECOVERY_INTERVAL_SECONDS", 5.0, minimum=0.5),
    },
    "expire-idempotency-records": {
        "task": "agents.expire_idempotency_records",
        "schedule": 3600.0,
    },
    # Approval deadlines: auto-reject or escalate within this many seconds of the due time.
    "approval-deadlines": {
        "task": "approvals.sweep_deadlines",
        "schedule": env_float("AGENTSTATE_APPROVAL_SWEEP_SECONDS", 10.0, minimum=1.0),
    },
}
CELERY_TIMEZONE = TIME_ZONE

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # Consumers wait for messages with a 5 s blocking pop; redis-py's default socket
        # timeout is also 5 s, so an idle socket's read timed out and crashed its consumer.
        "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}]},
    }
}

# --- Live progress over websockets (agents/live/). ---------------------------------------------
# Stream the model's tokens to the run page while a step's LLM call runs (never stored).
AGENTSTATE_LIVE_TOKENS = env_bool("AGENTSTATE_LIVE_TOKENS", True)
# At most one token update per run this often (the text so far, so a lost one costs nothing).
AGENTSTATE_LIVE_TOKEN_INTERVAL_SECONDS = env_float(
    "AGENTSTATE_LIVE_TOKEN_INTERVAL_SECONDS", 0.1, minimum=0.0
)

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "agentstate@localhost")
# Only read by the file-based backend (django.core.mail.backends.filebased.EmailBackend).
EMAIL_FILE_PATH = env_str("EMAIL_FILE_PATH", str(embedded.var_dir() / "mail"))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}

# --- Engine. -------------------------------------------------------------------------------
AGENTSTATE_AGENT_MODULES = env_list("AGENTSTATE_AGENT_MODULES", ["agents.demo"])
# A worker holds a run for this long without renewing; a dead worker's run waits this long.
AGENTSTATE_LEASE_SECONDS = env_float("AGENTSTATE_LEASE_SECONDS", 120.0, minimum=1.0)
# How long one task keeps stepping a run before yielding to the queue (fairness).
AGENTSTATE_SLICE_SECONDS = env_float("AGENTSTATE_SLICE_SECONDS", 5.0, minimum=0.0)
AGENTSTATE_REQUEUE_AFTER_SECONDS = env_float("AGENTSTATE_REQUEUE_AFTER_SECONDS", 30.0, minimum=1)
IDEMPOTENCY_KEY_TTL_HOURS = env_int("IDEMPOTENCY_KEY_TTL_HOURS", 24, minimum=1)

LLM_PROVIDER = env_str("LLM_PROVIDER", "scripted")
LLM_BASE_URL = env_str("LLM_BASE_URL", "http://127.0.0.1:11434/v1")
LLM_API_KEY = env_str("LLM_API_KEY", "")
LLM_MODEL = env_str("LLM_MODEL", "gpt-4o-mini")
LLM_TIMEOUT_SECONDS = env_float("LLM_TIMEOUT_SECONDS", 60.0, minimum=0.1)
# Extra seconds the scripted model waits per call (the fault tests kill a worker meanwhile).
LLM_SCRIPTED_DELAY_SECONDS = env_float("LLM_SCRIPTED_DELAY_SECONDS", 0.0, minimum=0.0)

# The demo refund agent's payment provider (served by this app at /demo/payments/).
DEMO_PAYMENTS_URL = env_str(
    "DEMO_PAYMENTS_URL",
    f"http://{env_str('HOST', '127.0.0.1')}:{env_str('WEB_PORT', '8000')}/demo/payments/refunds",
)
DEMO_REFUND_APPROVAL_THRESHOLD = env_float("DEMO_REFUND_APPROVAL_THRESHOLD", 100.0, minimum=0)

# --- Approvals. ----------------------------------------------------------------------------
# Where people open the console: the base of the links in approval emails.
AGENTSTATE_CONSOLE_URL = env_str(
    "AGENTSTATE_CONSOLE_URL",
    f"http://{env_str('HOST', '127.0.0.1')}:{env_str('WEB_PORT', '8000')}",
)
