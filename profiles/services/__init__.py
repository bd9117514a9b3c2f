"""Functions that change configuration state, and the rules a change must keep (HackSoft's services).

The API's serializers, the admin's forms, drafts and restores all judge a row with the same
`*_validate` functions here, and save or delete it through the same services. Public names are
re-exported here.
"""

from .configuration import (
    ConfigurationInUse,
    gpu_model_delete,
    gpu_model_save,
    namespace_policy_delete,
    namespace_policy_save,
    oversubscription_policy_delete,
    oversubscription_policy_save,
    preset_delete,
    preset_save,
)
from .drafts import DRAFTABLE, Draft, DraftError, draft_catalog, draft_delete, draft_stored
from .language_models import language_model_delete, language_model_save, language_model_validate
from .model_import import (
    LanguageModelImportError,
    language_model_import,
    model_file_header,
    model_file_json,
    model_upload_header,
    model_upload_json,
)
from .pod_documents import PodDocumentError, pod_document_check, pod_document_parse
from .tokens import TOKEN_PREFIX, api_token_digest, api_token_issue
from .validation import (
    gpu_model_validate,
    kube_name_problem,
    namespace_policy_validate,
    oversubscription_policy_validate,
    preset_validate,
)

__all__ = [
    "DRAFTABLE", "TOKEN_PREFIX",
    "ConfigurationInUse", "Draft", "DraftError", "LanguageModelImportError", "PodDocumentError",
    "api_token_digest", "api_token_issue", "draft_catalog", "draft_delete", "draft_stored",
    "gpu_model_delete", "gpu_model_save", "gpu_model_validate", "kube_name_problem",
    "language_model_delete", "language_model_import", "language_model_save", "language_model_validate",
    "model_file_header", "model_file_json", "model_upload_header", "model_upload_json",
    "namespace_policy_delete", "namespace_policy_save", "namespace_policy_validate",
    "oversubscription_policy_delete", "oversubscription_policy_save", "oversubscription_policy_validate",
    "pod_document_check", "pod_document_parse", "preset_delete", "preset_save", "preset_validate",
]
