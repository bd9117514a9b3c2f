"""The admin for configuration: presets, GPU models, namespace policies, the model catalog and the change log.

Django's admin imports `profiles.admin`; importing each module registers its ModelAdmins.
"""

from . import changes, configuration, inventory, language_models, oversubscription  # noqa: F401 - each module registers its ModelAdmins
