"""Django settings for volcano-injector, configured from the environment.

Every setting has a safe default. Secrets can be given as NAME or NAME_FILE (a file
mounted from a Kubernetes Secret). With no database configured the service runs on
SQLite, the embedded default for trying it out; production and the tests use
PostgreSQL.
"""

import socket
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from injector_site.platform.database import database_from_env, direct_database_from_env, pool_mode_from_env
from injector_site.platform.env import env, env_bool, env_float, env_int, env_list

BASE_DIR = Path(__file__).resolve().parent.parent

# --- core -----------------------------------------------------------------------------
DEBUG = env_bool("DJANGO_DEBUG")
# Dev mode: the local run script and the tests. It allows a generated secret key.
DEV_MODE = env_bool("INJECTOR_DEV_MODE") or DEBUG

SECRET_KEY = env("DJANGO_SECRET_KEY")
if not SECRET_KEY:
    if not DEV_MODE:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY (or DJANGO_SECRET_KEY_FILE) is required; "
            "set INJECTOR_DEV_MODE=true to run with an insecure development key"
        )
    SECRET_KEY = "insecure-dev-key-do-not-use-in-production"  # noqa: S105  (dev mode only, see above)

# The Host names Django answers (the admin, dashboard, API and probes; POST /mutate is answered ahead of
# Django, injector_site/wsgi.py): the Services' DNS names, and the Pod IP the kubelet's probes and
# Prometheus send (deploy/base/deployment.yaml sets them). Outside dev mode there is no default: empty,
# Django answers no host, and gunicorn_conf.py refuses to start the server (commands such as migrate
# and prune_audit serve nothing and need none).
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "*" if DEV_MODE else "")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_prometheus",
    "axes",
    "injector_site",
    "profiles",
    "mutations",
]

MIDDLEWARE = [
    "injector_site.platform.middleware.PrometheusBeforeMiddleware",
    "injector_site.platform.body_limit.BodySizeLimitMiddleware",
    "injector_site.platform.middleware.WebhookPortMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "injector_site.platform.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Who changes configuration, through what (the change log, profiles.changes).
    "profiles.changes.middleware.ChangeContextMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "injector_site.platform.middleware.PrometheusAfterMiddleware",
    # Last, as django-axes asks: it answers a locked-out login with 429.
    "axes.middleware.AxesMiddleware",
]

# django-axes first: it refuses a locked-out user name and address before any password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# After this many wrong passwords for one user name from one address, that pair is locked out for
# AXES_COOLOFF_TIME (hours); a right password meanwhile is refused too. A success resets the count.
AXES_FAILURE_LIMIT = env_int("INJECTOR_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = env_float("INJECTOR_LOGIN_LOCKOUT_MINUTES", 15, minimum=1) / 60
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# The client address is the TCP peer's: gunicorn terminates TLS itself, so X-Forwarded-For would be the
# client's own claim.
AXES_IPWARE_META_PRECEDENCE_ORDER = ["REMOTE_ADDR"]
AXES_VERBOSE = False

ROOT_URLCONF = "injector_site.urls"
WSGI_APPLICATION = "injector_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "injector_site" / "templates"],
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


# --- database -------------------------------------------------------------------------
# DATABASE_URL (several hosts and libpq parameters allowed), or DB_*, or the embedded SQLite default;
# DATABASE_DIRECT_URL and DB_POOL_MODE for a connection pooler: injector_site/platform/database.py.
DATABASES = {"default": database_from_env(BASE_DIR)}
DB_POOL_MODE = pool_mode_from_env()
if (direct_database := direct_database_from_env()) is not None:
    DATABASES["direct"] = direct_database
if DB_POOL_MODE == "transaction":
    # Django's .iterator() declares a cursor WITH HOLD outside a transaction, a session object the next
    # statement may not find behind a transaction pooler (docs/database-pooling.md).
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
# The audit's covering index (INCLUDE columns, for the dashboard's index-only aggregates) is a
# PostgreSQL feature; on the SQLite trial database it is a plain index, which is fine there.
SILENCED_SYSTEM_CHECKS = ["models.W040"] if DATABASES["default"]["ENGINE"].endswith("sqlite3") else []
# HSTS preload lists are for public domains; the UI's name is cluster-internal and cannot be preloaded.
SILENCED_SYSTEM_CHECKS.append("security.W021")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = env("DJANGO_STATIC_ROOT", str(BASE_DIR / "staticfiles"))
# Collected at image build time and served by whitenoise, gzip-compressed at collect time.
# (Not the manifest storage: a template naming a file that was not collected would be a 500.)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# In dev mode (scripts/dev, tests) files are found in the apps directly, without collectstatic.
WHITENOISE_USE_FINDERS = DEV_MODE
WHITENOISE_AUTOREFRESH = DEV_MODE

LOGIN_URL = "admin:login"

# Caches: per-process memory. Configuration (presets, policies) is cached in-process and
# revalidated against a version counter in the database (see profiles/catalog.py).
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- REST framework ---------------------------------------------------------------------
REST_FRAMEWORK = {
    # Token for scripts and CI pipelines, session for the browser (and the browsable admin).
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "profiles.api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # ASCII JSON (\uXXXX escapes): a lone surrogate echoed from a request (JSON allows "\ud800")
    # cannot be encoded as UTF-8 and made the answer a 500 (tests/test_fuzz.py).
    "UNICODE_JSON": False,
    # DRF's JSON parser, refusing NUL characters and too-deep nesting with a 400 (tests/test_fuzz.py).
    "DEFAULT_PARSER_CLASSES": ["injector_site.platform.parsers.StrictJSONParser"],
    # Bodies nested deeper than Python's parser recurses are a 400, not a 500 (tests/test_fuzz.py).
    "EXCEPTION_HANDLER": "injector_site.platform.api_errors.api_exception_handler",
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
        "rest_framework.filters.SearchFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "volcano-injector API",
    "DESCRIPTION": "Presets, GPU models, namespace policies, previews and the admission audit of volcano-injector.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI from local static files: clusters are often offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- the webhook ------------------------------------------------------------------------
# What an unexpected internal error answers: "Ignore" admits the Pod unchanged (fail-open),
# "Fail" denies it. Keep it equal to failurePolicy in deploy/ (see deploy/README.md).
INJECTOR_FAILURE_POLICY = env("INJECTOR_FAILURE_POLICY", "Ignore")
if INJECTOR_FAILURE_POLICY not in ("Ignore", "Fail"):
    raise ImproperlyConfigured(
        f"INJECTOR_FAILURE_POLICY={INJECTOR_FAILURE_POLICY!r} is not valid: use Ignore or Fail"
    )
# The API server caps request bodies at 3 MiB; anything larger is not from it.
INJECTOR_MAX_BODY_BYTES = env_int("INJECTOR_MAX_BODY_BYTES", 3 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = INJECTOR_MAX_BODY_BYTES
# Whether each admission is written to the audit table (switch off only to measure its cost).
INJECTOR_AUDIT_ENABLED = env_bool("INJECTOR_AUDIT_ENABLED", True)
# Where answered-but-unwritten audit rows wait, durably, until PostgreSQL takes them.
INJECTOR_AUDIT_SPOOL_DIR = env("INJECTOR_AUDIT_SPOOL_DIR", str(BASE_DIR / "var" / "spool"))
# The audit writer (mutations/audit/writer.py): how often each process writes its spooled rows (seconds),
# how often it looks for segments left by ended processes, the longest wait between retries while
# PostgreSQL is down, and how often it then logs a warning. gunicorn starts the writer in each
# worker; elsewhere (runserver, shell) the first audited admission starts it unless autostart is off.
# The flush default: a cycle costs a segment rotation and an fdatasync, so much shorter cycles cost
# throughput, and longer ones gained nothing measurable (scripts/bench: docs/benchmarks.md).
INJECTOR_AUDIT_FLUSH_SECONDS = env_float("INJECTOR_AUDIT_FLUSH_SECONDS", 0.25)
INJECTOR_AUDIT_ADOPT_SECONDS = env_float("INJECTOR_AUDIT_ADOPT_SECONDS", 2.0)
# How often each audit writer makes sure the audit table's day partitions exist a week ahead
# (mutations/audit/partitions.py); a row of a day without one goes to the DEFAULT partition.
INJECTOR_AUDIT_PARTITION_CHECK_SECONDS = env_float("INJECTOR_AUDIT_PARTITION_CHECK_SECONDS", 600.0)
INJECTOR_AUDIT_RETRY_MAX_SECONDS = env_float("INJECTOR_AUDIT_RETRY_MAX_SECONDS", 2.0)
INJECTOR_AUDIT_WARN_SECONDS = env_float("INJECTOR_AUDIT_WARN_SECONDS", 10.0)
INJECTOR_AUDIT_WRITER_AUTOSTART = env_bool("INJECTOR_AUDIT_WRITER_AUTOSTART", True)
# A serving group's worker Pod that runs no server (a LeaderWorkerSet's `ray start --address`) gets its
# leader's grant as this webhook decided it when it admitted the leader: from the process's memo, else the
# audit store (mutations/webhook/groups.py). The leader's row reaches PostgreSQL up to a writer cycle after
# its admission on any replica: a worker that finds none waits for it this long at most (0: not at all).
INJECTOR_GROUP_LEADER_WAIT_SECONDS = env_float("INJECTOR_GROUP_LEADER_WAIT_SECONDS",
                                               2 * INJECTOR_AUDIT_FLUSH_SECONDS + 0.25, minimum=0)
# Last, read the leader Pod through the Kubernetes API. Off by default: it needs `get` on Pods, which the
# base deployment does not grant (deploy/components/serving-groups).
INJECTOR_GROUP_LEADER_LOOKUP = env_bool("INJECTOR_GROUP_LEADER_LOOKUP", False)
# How often a replica checks the configuration version (seconds); 0 checks on every admission.
INJECTOR_CONFIG_RECHECK_SECONDS = env_float("INJECTOR_CONFIG_RECHECK_SECONDS", 1.0)
# Which routes this process serves (injector_site/platform/roles.py): "webhook" (/mutate and the probes only: the
# Deployment the API server calls), "operator" (the admin, dashboard and API, and the probes: no operator
# request can take a webhook worker), or "all" (one process serves both: development and the tests).
INJECTOR_ROLE = env("INJECTOR_ROLE", "all") or "all"
if INJECTOR_ROLE not in ("all", "webhook", "operator"):
    raise ImproperlyConfigured(f"INJECTOR_ROLE={INJECTOR_ROLE!r} is not valid: use webhook, operator or all")
# Heavy operator requests (the impact replay, the CSV export, the model pages: injector_site/platform/heavy.py):
# how many run at once per replica (every worker process of the Pod together) and per user, the Retry-After
# of the 429 past them, and the time budget of an impact replay's child processes (killed past it).
INJECTOR_HEAVY_PER_REPLICA = env_int("INJECTOR_HEAVY_PER_REPLICA", 2, minimum=1)
INJECTOR_HEAVY_PER_USER = env_int("INJECTOR_HEAVY_PER_USER", 1, minimum=1)
INJECTOR_HEAVY_RETRY_AFTER_SECONDS = env_int("INJECTOR_HEAVY_RETRY_AFTER_SECONDS", 10, minimum=1)
INJECTOR_HEAVY_SLOTS_DIR = env("INJECTOR_HEAVY_SLOTS_DIR", "") or ""
INJECTOR_IMPACT_BUDGET_SECONDS = env_float("INJECTOR_IMPACT_BUDGET_SECONDS", 60.0, minimum=0.1)
# The CSV export's time budget: past it the file ends with a line saying where it stopped.
INJECTOR_EXPORT_BUDGET_SECONDS = env_float("INJECTOR_EXPORT_BUDGET_SECONDS", 60.0, minimum=0.1)
# The GPU inventory (manage.py sync_gpu_inventory): whether admissions are checked against the node pools it
# synced (off: against the declared GPU models only), and the vGPU device plugin's per-node ConfigMap it reads.
INJECTOR_GPU_INVENTORY = env_bool("INJECTOR_GPU_INVENTORY", True)
INJECTOR_GPU_NODE_CONFIG_NAMESPACE = env("INJECTOR_GPU_NODE_CONFIG_NAMESPACE", "kube-system")
INJECTOR_GPU_NODE_CONFIG_NAME = env("INJECTOR_GPU_NODE_CONFIG_NAME", "volcano-vgpu-node-config")
# Listening ports that serve only /mutate and the probes (the Deployment's webhook port, 8443);
# the admin, dashboard and API are then reached on the UI port alone. Empty: every port serves all.
INJECTOR_WEBHOOK_ONLY_PORTS = [int(p) for p in env_list("INJECTOR_WEBHOOK_ONLY_PORTS")]
# mTLS: with TLS_CLIENT_CA_FILE set (read as injector_site/gunicorn_conf.py reads it, which verifies any
# client certificate presented against those CAs), POST /mutate answers only connections that presented one;
# the probes, /metrics and the UI port do not need one (the kubelet and browsers have none).
INJECTOR_MUTATE_REQUIRES_CLIENT_CERT = bool(env_list("TLS_CLIENT_CA_FILE"))
# Which replica answered, recorded in each audit row.
INJECTOR_REPLICA = env("POD_NAME") or socket.gethostname()
# Bearer token that /metrics requires when set.
METRICS_TOKEN = env("METRICS_TOKEN", "") or ""
# The most namespaces one process labels the vGPU-granted metrics with; later ones are counted as
# namespace="_other". 0 drops the label's values (every namespace is "_all"), for very large clusters.
INJECTOR_METRICS_MAX_NAMESPACES = env_int("INJECTOR_METRICS_MAX_NAMESPACES", 500, minimum=0)
# REST API tokens (manage.py issue_token): how long a new one is valid, and how many bad tokens one
# address may send per minute (per process) before it gets 429.
INJECTOR_API_TOKEN_DAYS = env_int("INJECTOR_API_TOKEN_DAYS", 90, minimum=1)
INJECTOR_API_BAD_TOKENS_PER_MINUTE = env_int("INJECTOR_API_BAD_TOKENS_PER_MINUTE", 20, minimum=1)
# Audit rows older than this are removed by `manage.py prune_audit` without --older-than.
AUDIT_RETENTION_DAYS = env_int("AUDIT_RETENTION_DAYS", 90)

# Right-sizing (manage.py recommend_sizes, /api/v1/recommendations/): where the observed use is read. Never on
# the /mutate path. Optional bearer token and CA files (a mounted Secret and ConfigMap); a query timeout.
PROMETHEUS_URL = env("PROMETHEUS_URL", "")
PROMETHEUS_TOKEN_FILE = env("PROMETHEUS_TOKEN_FILE", "")
PROMETHEUS_CA_FILE = env("PROMETHEUS_CA_FILE", "")
PROMETHEUS_TIMEOUT_SECONDS = env_float("PROMETHEUS_TIMEOUT_SECONDS", 10.0, minimum=0.1)
# Headroom over the high percentile, which percentile, and the least data a recommendation is made from.
RIGHT_SIZING_HEADROOM_PERCENT = env_float("RIGHT_SIZING_HEADROOM_PERCENT", 15.0, minimum=0)
RIGHT_SIZING_QUANTILE = env_float("RIGHT_SIZING_QUANTILE", 0.99, minimum=0.5)
RIGHT_SIZING_MIN_HOURS = env_int("RIGHT_SIZING_MIN_HOURS", 24, minimum=1)
RIGHT_SIZING_MIN_PODS = env_int("RIGHT_SIZING_MIN_PODS", 2, minimum=1)
RIGHT_SIZING_DAYS = env_int("RIGHT_SIZING_DAYS", 7, minimum=1)
# Automatic mode (a namespace policy's right_sizing "apply"): the most a right-sized size moves in a week.
RIGHT_SIZING_STEP_PERCENT = env_float("RIGHT_SIZING_STEP_PERCENT", 25.0, minimum=1)

# --- logging: one JSON line per event on stdout -------------------------------------------
LOG_LEVEL = (env("LOG_LEVEL", "INFO") or "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "injector_site.platform.logging.JsonFormatter"}},
    "handlers": {"stdout": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"handlers": ["stdout"], "level": "WARNING"},
    "loggers": {
        "django": {"handlers": ["stdout"], "level": "WARNING", "propagate": False},
        "volcano_injector": {"handlers": ["stdout"], "level": LOG_LEVEL, "propagate": False},
    },
}

# --- security (production) ----------------------------------------------------------------
SESSION_COOKIE_SECURE = not DEV_MODE
CSRF_COOKIE_SECURE = not DEV_MODE
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# TLS terminates in gunicorn itself; HSTS tells browsers to stay on HTTPS for the UI.
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 0 if DEV_MODE else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEV_MODE
SECURE_HSTS_PRELOAD = False
# Browsers are sent to HTTPS for the UI outside dev mode. The API server, the kubelet and Prometheus
# call /mutate, the probes and /metrics directly and never follow a redirect, so those are exempt
# (with TLS in gunicorn every request is HTTPS anyway; this guards a plain-HTTP misconfiguration).
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", not DEV_MODE)
SECURE_REDIRECT_EXEMPT = [r"^mutate$", r"^healthz$", r"^readyz$", r"^metrics$"]
