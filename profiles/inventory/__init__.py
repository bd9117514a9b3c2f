"""The cluster's GPU nodes: read through the Kubernetes API (read.py), kept in the database (store.py) for the
engine's shape checks, the admin, the API and the dashboard. `manage.py sync_gpu_inventory` runs both."""
