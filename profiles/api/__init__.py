"""REST API for presets, GPU models, namespace policies and previews."""
