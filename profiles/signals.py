"""The models whose every create, update and delete is written to the change log (profiles.changes).

The log also sets the configuration version that every replica compares with the one its cached
Catalog was built from (profiles/catalog.py): a change-logged model is configuration the engine reads.
"""

from .changes import change_logged
from .models import GpuModel, LanguageModel, NamespacePolicy, OversubscriptionPolicy, Preset

change_logged(GpuModel)
change_logged(Preset)
change_logged(NamespacePolicy)
change_logged(LanguageModel)
change_logged(OversubscriptionPolicy)
