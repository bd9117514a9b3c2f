"""Heavy operator requests (an impact replay, a CSV export, a model page): a few at a time per replica and
per user, a 429 with Retry-After past that.

The limits hold across the Pod's worker processes: a request holds an exclusive `flock` on one of
INJECTOR_HEAVY_PER_REPLICA slot files and one of INJECTOR_HEAVY_PER_USER files of its user, in one
directory of the Pod (/tmp, an emptyDir). The kernel drops a lock when its file is closed, so a slot is
never lost to a crashed worker. docs/availability.md explains the design and its limits.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from functools import wraps
from typing import IO

from django.conf import settings
from django.http import HttpResponse, JsonResponse


class HeavyBusy(Exception):
    """No slot free: the message says which limit, and when to try again."""

    def __init__(self, message: str, retry_after_seconds: int):
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class HeavySlot:
    """The slot files a running heavy request holds locked; release() unlocks them (also when collected)."""

    def __init__(self, files: list[IO[bytes]]):
        self._files = files

    def release(self) -> None:
        files, self._files = self._files, []
        for file in files:
            file.close()  # closing the file drops its flock


def _slots_dir() -> str:
    directory = settings.INJECTOR_HEAVY_SLOTS_DIR or os.path.join(tempfile.gettempdir(), "volcano-injector-heavy")
    os.makedirs(directory, exist_ok=True)
    return directory


def _lock_one(paths: list[str]) -> IO[bytes] | None:
    """The first of `paths` this call can lock exclusively (the file stays open, locked); None if all are held."""
    for path in paths:
        file = open(path, "a+b")  # noqa: SIM115 - stays open while the slot is held
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.close()
            continue
        return file
    return None


def heavy_slot_take(*, user_key: str, per_replica: int, per_user: int) -> HeavySlot:
    """A slot for one heavy request of `user_key` on this replica; HeavyBusy when the user's or the replica's
    are all taken."""
    directory = _slots_dir()
    retry = settings.INJECTOR_HEAVY_RETRY_AFTER_SECONDS
    user = hashlib.sha256(user_key.encode()).hexdigest()[:16]
    mine = _lock_one([os.path.join(directory, f"user-{user}-{n}.lock") for n in range(per_user)])
    if mine is None:
        raise HeavyBusy(f"you already run {per_user} heavy request(s) (impact replay, CSV export, model page) "
                        f"on this replica, the most one user may (INJECTOR_HEAVY_PER_USER): wait for it to "
                        f"finish, then try again", retry)
    replica = _lock_one([os.path.join(directory, f"replica-{n}.lock") for n in range(per_replica)])
    if replica is None:
        mine.close()
        raise HeavyBusy(f"this replica already runs {per_replica} heavy requests (impact replay, CSV export, model "
                        f"page), its limit (INJECTOR_HEAVY_PER_REPLICA): try again in {retry} s", retry)
    return HeavySlot([mine, replica])


class _ReleasedAfter:
    """A streamed body that releases its slot when it ends or is closed (a client gone mid-stream)."""

    def __init__(self, content: Iterator, slot: HeavySlot):
        self._content, self._slot = iter(content), slot

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self._content)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        close = getattr(self._content, "close", None)
        try:
            if close is not None:
                close()
        finally:
            self._slot.release()


def heavy_request(*, api: bool = False) -> Callable:
    """Decorate a view (after its login and permission checks) to run within the heavy request limits: past
    them the answer is 429 with Retry-After and a message naming the limit (JSON `detail` when `api`)."""

    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def limited(*args, **kwargs):
            request = args[1] if api else args[0]  # an APIView method gets (self, request)
            try:
                slot = heavy_slot_take(user_key=f"user:{request.user.pk}",
                                       per_replica=settings.INJECTOR_HEAVY_PER_REPLICA,
                                       per_user=settings.INJECTOR_HEAVY_PER_USER)
            except HeavyBusy as exc:
                answer: HttpResponse = (JsonResponse({"detail": str(exc)}, status=429) if api else
                                        HttpResponse(f"{exc}\n", status=429, content_type="text/plain"))
                answer["Retry-After"] = str(exc.retry_after_seconds)
                return answer
            try:
                response = view(*args, **kwargs)
            except BaseException:
                slot.release()
                raise
            if getattr(response, "streaming", False):
                response.streaming_content = _ReleasedAfter(response.streaming_content, slot)
            else:
                slot.release()
            return response

        return limited

    return decorate
