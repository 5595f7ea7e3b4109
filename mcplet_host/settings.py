"""Django settings for MCPlet Host, all from the environment (docs/operators.md, "Configuration").

Unset REDIS_URL means the embedded mode: Celery's in-memory broker, a local-memory cache and
the in-memory channel layer, all inside one `runhost` process.
"""

import os
from pathlib import Path
from urllib.parse import urlparse

from django.core.exceptions import ImproperlyConfigured
from dotenv import dotenv_values, load_dotenv

from mcplet_host.config import (
    env_bool,
    env_choice,
    env_database,
    env_int,
    env_list,
    env_str,
    env_url,
    redis_db,
)

BASE_DIR = Path(__file__).resolve().parent.parent
GENERATED_ENV = "generated.env"  # docker/entrypoint.sh writes it
# litellm fetches its model price list at import unless told to use its bundled copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
VAR_DIR = Path(env_str("MCPLET_VAR_DIR", str(BASE_DIR / "var")))

# A local .env (written by `make run`) never overrides the real environment.
load_dotenv(BASE_DIR / ".env", override=False)
# docker compose: the secrets docker/entrypoint.sh generated on the first start, for what the
# environment leaves empty (also in `docker compose exec` and health checks, which skip it).
for _name, _value in dotenv_values(VAR_DIR / "secrets" / GENERATED_ENV).items():
    if not os.environ.get(_name):
        os.environ[_name] = _value or ""

SECRET_KEY = env_str("SECRET_KEY")
# Earlier keys, comma-separated, while rotating: sessions and sealed credentials stay readable.
SECRET_KEY_FALLBACKS = env_list("SECRET_KEY_FALLBACKS", [])
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
CSRF_FAILURE_VIEW = "mcplet_host.views.csrf_failure"  # refused and audited

# No "daphne" app: it only replaces runserver (the host runs with runhost, or daphne itself), and
# it would import Twisted into every manage.py command (bench/startup.py).
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
    "channels",
    "mcplet_host",
    "pools",
    "toolindex",
    "agents",
    "a2a",
    "held",
    "passkey",
    "dashboard",
]

MIDDLEWARE = [
    "mcplet_host.middleware.RefuseUnservedHostMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "mcplet_host.middleware.RefuseNulMiddleware",
    "mcplet_host.config_audit.ConfigChangeMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "mcplet_host.urls"
ASGI_APPLICATION = "mcplet_host.asgi.application"

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
            ],
        },
    },
]

DATABASES = {
    "default": env_database("DATABASE_URL", f"sqlite:///{VAR_DIR / 'mcplet_host.sqlite3'}")
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE transactions serialise writers instead of failing with "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        # WAL: readers do not wait for the writer, and a commit does not wait for a disk sync.
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    # A file, not shared-cache memory: threads then wait for locks instead of failing. One per
    # process, so two test runs never share it (pytest-django deletes it afterwards).
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}

if DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # One test database per process, so concurrent test runs on one server never share it.
    DATABASES["default"]["TEST"] = {"NAME": f"test_{DATABASES['default']['NAME']}_{os.getpid()}"}
    # A kept connection is checked before its first use in each request or task: one the
    # server dropped (a restart, pg_terminate_backend) is replaced, not used to fail the task.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # Values travel apart from the SQL (not quoted into it in Python), and psycopg prepares a
    # statement the Nth time a connection runs it: PostgreSQL then neither parses nor plans it
    # again (bench/binding.py). 0: never, for a pooling proxy that cannot keep them.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        server_side_binding=True,
        prepare_threshold=env_int("DB_PREPARE_THRESHOLD", 5, minimum=0) or None,
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django's model backend, its users and permissions kept while nothing of them changes.
AUTHENTICATION_BACKENDS = ["mcplet_host.backends.ModelBackend"]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # also creates var/ for the SQLite default
# Served by WhiteNoise from the app directories: no collectstatic step to forget.
WHITENOISE_USE_FINDERS = True
# Where `runhost` publishes the origin it serves, for every process of this installation
# (passkey.links): a command builds its links, and hands its calls, to the running host.
MCPLET_HOST_FILE = VAR_DIR / "host.json"

LOGIN_URL = "admin:login"

# --- Redis or embedded -----------------------------------------------------------------------

REDIS_URL = env_url("REDIS_URL", ("redis", "rediss"), None)
EMBEDDED = REDIS_URL is None

# Sessions read from the cache, written to both: a signed-in page or approval does not query
# the session table each time (the database stays the truth when the cache is emptied).
SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"

if EMBEDDED:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CELERY_BROKER_URL = "memory://"
    CELERY_RESULT_BACKEND = None
else:
    CACHES = {
        "default": {
            "BACKEND": "mcplet_host.cache.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "mcplet",
        }
    }
    CHANNEL_LAYERS = {
        "default": {
            # Redis pub/sub: a group message is one PUBLISH (the sorted-set layer makes two
            # round trips even to an empty group). The dashboard's live view is its only user,
            # and a socket that is not connected has no use for a message kept for it.
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {
                "hosts": [{"address": REDIS_URL}],
                # Redis's channels are server-wide, not per database: the database's number
                # keeps two hosts on one Redis server out of each other's streams.
                "prefix": f"mcplet:channels:{redis_db(REDIS_URL)}",
            },
        }
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT = "mcplet_host.broker:Transport"  # kombu's, a client kept per channel
    CELERY_RESULT_BACKEND = REDIS_URL

CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_EXPIRES = 3600
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
# Keep a worker's database connection across tasks (Celery closes it around every task
# otherwise: a reconnect, 8-12 ms, per A2A message). Takes effect with DB_CONN_MAX_AGE > 0.
CELERY_DB_REUSE_MAX = 1000
CELERY_TIMEZONE = TIME_ZONE

# --- LLM, passkeys, e-mail -------------------------------------------------------------------

MCPLET_LLM_MODEL = env_str("MCPLET_LLM_MODEL", "scripted/reference")
# Where the offline scripted model finds `scripted/<name>` scripts (comma-separated).
MCPLET_SCRIPT_DIRS = env_list("MCPLET_SCRIPT_DIRS", [str(BASE_DIR / "agents" / "scripts")])
# What a script's tool arguments may name as `${NAME}`: only these (never the environment, which
# holds secrets). The reference script fetches from this host's backing service (a second host on
# one machine sets RESTAURANT_API_URL, and its backing service, MCPlets and script follow).
MCPLET_SCRIPT_VARIABLES = {
    "RESTAURANT_API_URL": env_str("RESTAURANT_API_URL", "http://127.0.0.1:5100").rstrip("/")
}

# The port `runhost` serves (its --port, passed on by manage.py): by default the host's own
# address, http://localhost:<port>, is where approvers register passkeys and approve.
MCPLET_PORT = env_int("MCPLET_PORT", 8000, minimum=1)
# How many processes `manage.py serve` (compose's web) serves with. Django runs a process's sync
# views one at a time, so the web tier grows by processes; they share one listening socket, and
# the dashboard's live stream crosses them through the Redis channel layer (docs/operators.md,
# "Sizing").
MCPLET_WEB_PROCESSES = env_int("MCPLET_WEB_PROCESSES", 2, minimum=1)
# The bearer token Prometheus sends to /metrics; unset, the endpoint is off (404). With
# PROMETHEUS_MULTIPROC_DIR, one scrape shows every process counting there (docs/metrics.md).
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
# Traces are configured by the standard OTEL_* variables (docs/tracing.md). Tool arguments and
# results go into spans only if the operator opts in: they may carry what must not leave.
MCPLET_TRACE_CONTENT = env_bool("MCPLET_TRACE_CONTENT", False)
# The dashboard links a run's trace id here ("{trace_id}" is replaced), e.g. Jaeger's page.
MCPLET_TRACE_URL = env_str("MCPLET_TRACE_URL", "")
PASSKEY_MODE = env_choice("PASSKEY_MODE", ("https", "localhost"), "localhost")
PASSKEY_RP_ID = env_str("PASSKEY_RP_ID", "localhost")
PASSKEY_ORIGIN = env_url("PASSKEY_ORIGIN", ("http", "https"), f"http://localhost:{MCPLET_PORT}")
# Where the stdio MCPlets the host launches verify passkey assertions (their MCPLET_VERIFY_URL,
# unless a server sets its own); unset: this host's endpoint at PASSKEY_ORIGIN.
MCPLET_VERIFY_URL = env_url("MCPLET_VERIFY_URL", ("http", "https"), None)
PASSKEY_RP_NAME = env_str("PASSKEY_RP_NAME", "MCPlet Host")
# How long a held tool call waits for a person before it expires (the WebAuthn challenge itself
# lives < 60 s and is fetched only when the approver presses Approve).
MCPLET_APPROVAL_TTL = env_int("MCPLET_APPROVAL_TTL", 900, minimum=10)
# How long one MCP tools/call may take before the gateway answers SERVICE_UNAVAILABLE.
MCPLET_TOOL_TIMEOUT = env_int("MCPLET_TOOL_TIMEOUT", 30, minimum=1)
# The largest tool result (characters of its content) that goes on to an agent, its transcript
# and its model (MGP §16.1: payload size limits); a larger one is X_RESULT_TOO_LARGE.
MCPLET_MAX_RESULT = env_int("MCPLET_MAX_RESULT", 1024 * 1024, minimum=1024)
# The most the host reads of one message from an MCP server over HTTP (a JSON body, an SSE
# event): a result of MCPLET_MAX_RESULT characters travels twice (structured and as text),
# escaped, so keep this well above it (pools/bounded.py).
MCPLET_MAX_MESSAGE_BYTES = env_int("MCPLET_MAX_MESSAGE_BYTES", 16 * 1024 * 1024, minimum=65536)
# A read or prepare its server marks retryable (MGP §14.6) is tried again at most this many
# times, and only when the wait it asks for is at most this long (the worker sleeps through it).
MCPLET_TOOL_RETRIES = env_int("MCPLET_TOOL_RETRIES", 2, minimum=0)
# An agent in the automatic tool mode gets the discovery meta-tools (MGP §16, hybrid) once it
# may see more tools than this; below it, every schema is in context.
MCPLET_TOOL_DISCOVERY_THRESHOLD = env_int("MCPLET_TOOL_DISCOVERY_THRESHOLD", 30, minimum=0)
MCPLET_TOOL_RETRY_MAX_WAIT_MS = env_int("MCPLET_TOOL_RETRY_MAX_WAIT_MS", 5000, minimum=0)
# How long a worker holds an agent run it advances: a killed worker's run is taken up again
# after it (longer than an LLM turn or a tool call can take).
MCPLET_RUN_LEASE = env_int("MCPLET_RUN_LEASE", 300, minimum=5)
# Beat's recovery (agents.recover, mcplet_host.recover_calls) queues again work untouched this
# long whose task was lost: a worker killed, the broker's data lost.
MCPLET_RECOVERY_GRACE = env_int("MCPLET_RECOVERY_GRACE", 60, minimum=1)
# Hand-offs a worker's agent task delivers itself, in a row, after its own run (a chain's next
# hop without the broker); then the broker. 0: every hand-off through the broker.
MCPLET_HAND_OFFS_HERE = env_int("MCPLET_HAND_OFFS_HERE", 8, minimum=0)
# How long a server's form elicitation (`elicitation/create` during a call) waits for a person
# before the host declines it. The worker thread and the server's MCP session wait that long.
MCPLET_ELICITATION_WAIT = env_int("MCPLET_ELICITATION_WAIT", 120, minimum=1)

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")
EMAIL_FILE_PATH = VAR_DIR / "mail"
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "mcplet-host@localhost")

# --- DRF -------------------------------------------------------------------------------------

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_RATES": {"partner": env_str("MCPLET_PARTNER_RATE", "120/min")},
}
SPECTACULAR_SETTINGS = {
    "TITLE": "MCPlet Host A2A API",
    "DESCRIPTION": "The external A2A endpoint for partner agents (MCPlet spec §3.6, §16.4, §18). "
    "Authenticate with 'Authorization: Bearer <partner key>'.",
    "VERSION": "0.1.0",
    "REDOC_DIST": "SIDECAR",  # vendored: the CSP allows no CDN
    "SWAGGER_UI_DIST": "SIDECAR",
    "SERVE_INCLUDE_SCHEMA": False,
    # Bodies documented as application/json; application/a2a+json is read alike.
    "PARSER_WHITELIST": ["a2a.api.LimitedJSONParser"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "a2a.api.task_links",
    ],
}
# Seconds POST /a2a/tasks waits for the task to end before answering 202 with a Location.
MCPLET_A2A_WAIT = env_int("MCPLET_A2A_WAIT", 5, minimum=0)
# A2A push notifications: attempts per delivery, and the first retry's delay (doubling).
MCPLET_A2A_PUSH_ATTEMPTS = env_int("MCPLET_A2A_PUSH_ATTEMPTS", 8, minimum=1)
MCPLET_A2A_PUSH_BACKOFF = env_int("MCPLET_A2A_PUSH_BACKOFF", 2, minimum=1)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"exception_named": {"()": "mcplet_host.logs.ExceptionNamed"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "LiteLLM": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},  # the MCP SDK's client: a line per request otherwise
        "mcplets.restaurant.backend": {"level": "WARNING"},
        "mcp.client.auth.oauth2": {"filters": ["exception_named"]},  # no token in the log
        # A server's unparsable answer: pydantic's error quotes it (the host says what failed).
        "mcp.client.streamable_http": {"filters": ["exception_named"]},
    },
}

# §16.3: localhost mode serves each ceremony's page on its own loopback port, whose origin
# (http://localhost:PORT) WebAuthn accepts only for the rpId `localhost`.
if PASSKEY_MODE == "localhost" and PASSKEY_RP_ID != "localhost":
    raise ImproperlyConfigured(
        f"PASSKEY_RP_ID={PASSKEY_RP_ID!r} must be 'localhost' when PASSKEY_MODE=localhost "
        "(§16.3: the page is served on a loopback port); use PASSKEY_MODE=https for another rpId."
    )
_origin_host = urlparse(PASSKEY_ORIGIN).hostname or ""
if not (_origin_host == PASSKEY_RP_ID or _origin_host.endswith("." + PASSKEY_RP_ID)):
    raise ImproperlyConfigured(
        f"PASSKEY_ORIGIN={PASSKEY_ORIGIN!r} does not match PASSKEY_RP_ID={PASSKEY_RP_ID!r}: "
        "WebAuthn needs the origin's host to be the rpId or one of its subdomains."
    )
# Browsers allow WebAuthn on https:// origins and on http://localhost (a secure context).
if PASSKEY_MODE == "https" and not (
    PASSKEY_ORIGIN.startswith("https://") or _origin_host == "localhost"
):
    raise ImproperlyConfigured(
        f"PASSKEY_ORIGIN={PASSKEY_ORIGIN!r} must be an https:// origin (or http://localhost) "
        "when PASSKEY_MODE=https."
    )
