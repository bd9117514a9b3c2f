"""Doing what a denial's fix says, as a Pod author would: from its words, with no engine code. Engine and /mutate
tests apply each offered fix with it and decide the Pod again (issue 31: a fix is offered only if it works)."""

from __future__ import annotations

import copy
import re

GPU = "nvidia.com/gpu"
_CONTEXT = re.compile(r"^(--[\w-]+|-c) (\d+) fits\b")
_SPLIT = re.compile(r"^(--[\w-]+) (\d+) and nvidia\.com/gpu: (\d+)")
_QUANTIZE = re.compile(r"^(--quantization) (\w+) ")
_GPUS = re.compile(r"^ask for nvidia\.com/gpu: (\d+)")
_ANNOTATION = re.compile(r"^(?:set|serve a quantized checkpoint:) (volcano-injector\.io/[\w-]+): ([\w.-]+)")
_REMOVE = re.compile(r" and remove (volcano-injector\.io/[\w-]+)")


def fix_apply(pod: dict, fix: str) -> dict:
    """A copy of `pod` changed as `fix` says; AssertionError for a fix these words do not cover."""
    pod = copy.deepcopy(pod)
    if found := _CONTEXT.match(fix):
        flag_set(gpu_container(pod), found[1], found[2])
    elif found := _SPLIT.match(fix):
        flag_set(gpu_container(pod), found[1], found[2])
        gpus_set(gpu_container(pod), found[3])
    elif found := _QUANTIZE.match(fix):
        flag_set(gpu_container(pod), found[1], found[2])
    elif found := _GPUS.match(fix):
        gpus_set(gpu_container(pod), found[1])
    elif found := _ANNOTATION.match(fix):
        annotations = pod["metadata"].setdefault("annotations", {})
        annotations[found[1]] = found[2]
        for removed in _REMOVE.findall(fix):
            annotations.pop(removed, None)
    else:
        raise AssertionError(f"a fix a Pod author cannot apply from its words: {fix!r}")
    return pod


def gpu_container(pod: dict) -> dict:
    return next(c for c in pod["spec"]["containers"] if GPU in ((c.get("resources") or {}).get("limits") or {}))


def gpus_set(container: dict, gpus: str) -> None:
    for part in ("limits", "requests"):
        if GPU in (container["resources"].get(part) or {}):
            container["resources"][part][GPU] = gpus


def flag_set(container: dict, flag: str, value: str) -> None:
    """`flag value` in the container's words: replaced where written (`--flag N`, `--flag=N`, in a script),
    else added at the end of its arguments (or of its script)."""
    pattern = re.compile(rf"(?<![\w-]){re.escape(flag)}([ =])\w+")
    for key in ("command", "args"):
        words = container.get(key) or []
        for index, word in enumerate(words):
            if word == flag and index + 1 < len(words):
                words[index + 1] = value
                return
            if pattern.search(word):
                words[index] = pattern.sub(lambda m: f"{flag}{m[1]}{value}", word)
                return
    key = "args" if container.get("args") or not container.get("command") else "command"
    words = container.setdefault(key, [])
    if words and " " in words[-1]:
        words[-1] = f"{words[-1]} {flag} {value}"
    else:
        words.extend([flag, value])
