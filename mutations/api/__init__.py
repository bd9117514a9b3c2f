"""Read-only REST API over the admission audit."""
