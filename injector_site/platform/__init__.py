"""What every layer stands on: environment, database, Kubernetes client, TLS, logging, the gunicorn worker and
its request gate, and the small HTTP pieces (middleware, parsers, API errors, admin permissions). It imports
nothing of the project above it (tests/test_conventions.py)."""
