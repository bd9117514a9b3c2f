"""Where sizing reads the model a serving Pod serves when its command does not name it, and what it says
when nothing names it: the volcano-injector.io/model pin, KServe's storageUri (env STORAGE_URI, else the
annotation KServe's controller sets for its storage-initializer), KServe's --model_name, and the namespace
policy's unknown_model choice. Pure: the Pod's dicts in, text out.
"""

from __future__ import annotations

from typing import NamedTuple

from .annotations import ANN_MODEL, ANN_PRESET, ANN_VGPU_MEMORY
from .commands import env_values
from .denial import Denial
from .groups import ServingGroup
from .pod import Container
from .serving import KSERVE, Launch, ServingCommand
from .specs import GroupLeader, JsonObject, UnknownModel

# Where KServe's controller puts an InferenceService's storageUri on the predictor Pod (kserve
# pkg/constants: StorageInitializerSourceUriInternalAnnotationKey); its storage-initializer downloads it.
KSERVE_STORAGE_URI = "internal.serving.kserve.io/storage-initializer-sourceuri"
KSERVE_LABEL = "serving.kserve.io/inferenceservice"
# Local paths where a model is mounted, which name no model.
_MOUNT_PATHS = ("/mnt/models", "/models", "/model", "/data", "/mnt/model")


class ServingPod(NamedTuple):
    """What sizing from the serving command knows of the Pod around its containers (all plain data). A named
    tuple, not a frozen dataclass: one is built per GPU Pod on the admission path, and this is cheaper to build."""

    # volcano-injector.io/model: the model the Pod serves, when its command does not name it.
    pinned_model: str | None = None
    # A serving group worker's leader grant, as the webhook read it (MutationContext.group_leader).
    leader: GroupLeader | None = None
    unknown_model: UnknownModel = UnknownModel.WARN
    policy: str = "*"
    # The Pod's metadata (last: what the memo keys on is the fields before it, this dict is not hashable).
    metadata: JsonObject = {}  # shared default: never written, only read


# A Pod that says nothing beyond its containers (callers that size containers alone).
NO_POD = ServingPod()


def kserve_predictor(container: Container, metadata: JsonObject) -> bool:
    labels = metadata.get("labels")
    return container.name == "kserve-container" or (isinstance(labels, dict) and KSERVE_LABEL in labels)


def unread_reason(launch: Launch, group: ServingGroup | None, leader: GroupLeader | None, container: Container,
                   pod: ServingPod) -> str:
    if leader is not None:
        return f"a group worker; leader {leader.pod}'s grant not read: {leader.source}"
    if group is not None and group.leader:
        return f"{group.kind} worker without a server; leader {group.leader}'s grant not read"
    if launch.ray == "worker":
        return "a Ray worker (ray start --address) runs no server command"
    if launch.ray == "head":
        return "a Ray head runs no server command (the model is in the Ray Serve config)"
    if kserve_predictor(container, pod.metadata):
        return "a KServe predictor with no model id or storageUri the webhook can read"
    return "the Pod's serving group runs no server command in this Pod"


def unknown_model_said(container: Container, why: str, pod: ServingPod, warnings: list[str]) -> JsonObject:
    """A serving container whose model is not known: denied under unknown_model: deny; else said in a warning,
    and the explanation the audit row keeps is returned."""
    who = f"container {container.name!r}"
    pin = f"set {ANN_MODEL} to a catalog name or Hugging Face id"
    if pod.unknown_model is UnknownModel.DENY:
        raise Denial(
            f"metadata.annotations[{ANN_MODEL}]",
            f"{who}: the model it serves could not be read ({why}); namespace policy {pod.policy!r} denies serving "
            f"Pods whose model is not known (unknown_model: deny); {pin}, or size it with {ANN_VGPU_MEMORY} or "
            f"{ANN_PRESET}", rule="policy.unknown_model", policy=pod.policy,
            fix=f"{pin}, or set {ANN_VGPU_MEMORY} or {ANN_PRESET}")
    # The fix first: kubectl shows at most 240 characters of a warning (admission.MAX_WARNING_CHARS).
    warnings.append(f"{who}: model not read; set {ANN_MODEL} (catalog name or Hub id); namespace default used. "
                    f"Why: {why}")
    return {"engine": None, "model": None, "matched": None, "method": f"model not read: {why}", "per_card_mib": None}


def kserve_model(container: Container, metadata: JsonObject) -> str | None:
    """The model a KServe predictor serves, from its storageUri (env STORAGE_URI, else the annotation KServe's
    controller sets for its storage-initializer): hf://org/name, else the URI's last path part."""
    env = env_values(container.body.get("env"), metadata)
    uri = env.get("STORAGE_URI")
    annotations = metadata.get("annotations")
    if not uri and isinstance(annotations, dict):
        uri = annotations.get(KSERVE_STORAGE_URI)
    if not isinstance(uri, str) or "://" not in uri:
        return None
    scheme, _, path = uri.partition("://")
    path = path.strip("/")
    if scheme == "hf":
        return path.split(":", 1)[0] or None
    return path.rsplit("/", 1)[-1] or None


def model_named(command: ServingCommand, container: Container, pod: ServingPod) -> tuple[str | None, str]:
    """The model the server serves and where that was read: the pinned annotation, the command, a NIM's image,
    KServe's storageUri (for a mounted path), else KServe's --model_name (the name it is served under)."""
    if pod.pinned_model:
        return pod.pinned_model, f"annotation {ANN_MODEL}"
    model = command.model
    if model and model.rstrip("/") not in _MOUNT_PATHS:
        return model, ""
    if command.nim is not None:
        # Before the storageUri: a NIM's storage is its cache (NIM_CACHE_PATH), not its model.
        if command.nim.serves_own_model:
            return command.nim.model_name, command.nim.describe()
        return None, ""
    stored = kserve_model(container, pod.metadata)
    if stored:
        return stored, "KServe storageUri"
    if command.engine == KSERVE:
        served = _flag(container, "model_name")
        if served:
            return served, "KServe --model_name, the name it is served under"
    return model, ""


def _flag(container: Container, name: str) -> str | None:
    words = [w for key in ("command", "args") for w in (container.body.get(key) or []) if isinstance(w, str)]
    for index, word in enumerate(words):
        if word.lstrip("-").replace("-", "_").split("=", 1)[0] == name and word.startswith("-"):
            if "=" in word:
                return word.split("=", 1)[1] or None
            return words[index + 1] if index + 1 < len(words) else None
    return None
