"""AI Hub jobs that are never lost: every job id is written to the bundle's job book
(``<bundle>/aihub/jobs.json``) the moment AI Hub returns it, before anything waits; Ctrl-C
leaves the jobs running on AI Hub and says how to collect them; ``--resume`` collects them (and
reuses finished ones) instead of submitting again; an earlier run's job still open for the same
request is never silently resubmitted; a failed job's own message is kept as one line.

A request is what a job was asked to do (its kind, device, model and options): two runs that
ask the same thing have the same request key.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit.bundle import now_iso
from edgekit.errors import EdgekitError
from edgekit.manifest import write_json_atomic
from edgekit.runtimes.aihub.client import call, one_line

try:  # POSIX; elsewhere one edgekit process at a time writes a book (as bundles)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]  # None marks the module absent; every use checks for it

BOOK = "aihub/jobs.json"
SCHEMA = "edgekit.aihub-jobs/1"
OPEN, SUCCEEDED, FAILED = "open", "succeeded", "failed"
# Seconds between status polls (the client's own wait() polls every 10 s).
POLL_SECONDS = 10.0


def request_key(request: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class Handle:
    """One job of this run: its book record and the client's ``Job`` object."""

    record: dict[str, Any]
    job: Any
    reused: bool = False  # an earlier run's job, collected with --resume

    @property
    def id(self) -> str:
        return str(self.record["id"])

    @property
    def failed(self) -> str | None:
        """The job's own failure message (one line), or None."""
        return self.record.get("message") if self.record.get("state") == FAILED else None


@dataclass
class JobBook:
    """The job book of one bundle for one command run."""

    root: Path  # the bundle (the book lives in its aihub/ folder)
    command: str  # build | profile | check: said in messages and records
    client: Any
    resume: bool = False
    say: Callable[[str], None] = lambda line: None
    poll_seconds: float | None = None  # None: POLL_SECONDS
    handles: list[Handle] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return self.root / BOOK

    # ---- the file --------------------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[list[dict[str, Any]]]:
        """The book's records, written back atomically after the body (one writer at a time)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.parent / ".jobs.lock", "a+") as lock:
            if fcntl is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            records = self.records()
            yield records
            write_json_atomic(self.path, {"schema": SCHEMA, "jobs": records})

    def records(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            raise EdgekitError(
                f"AI Hub job book {self.path} is unreadable ({exc})",
                hint="the job ids are also on https://workbench.aihub.qualcomm.com/jobs/; "
                "move the file away to start a new book",
            ) from None
        return list(doc.get("jobs") or [])

    def _update(self, job_id: str, **fields: Any) -> dict[str, Any]:
        with self._locked() as records:
            for r in records:
                if r["id"] == job_id:
                    r.update(fields)
                    return dict(r)
        raise EdgekitError(f"AI Hub job {job_id} is missing from {self.path}")

    # ---- submitting --------------------------------------------------------------------------------
    def submit(self, kind: str, label: str, request: Mapping[str, Any], submit: Callable[[], Any]) -> Handle:
        """The job for ``request``: with ``resume`` an earlier run's job for it (open or finished),
        else a new one from ``submit()``, recorded before anything waits. An earlier job still
        open without ``resume`` is an error: it is never silently submitted again."""
        key = request_key(request)
        mine = {h.id for h in self.handles}  # this run's own jobs are not "an earlier run's"
        earlier = [r for r in self.records() if r.get("request") == key and r["id"] not in mine]
        last = earlier[-1] if earlier else None
        if last is not None and self.resume:
            handle = Handle(
                dict(last), call(f"fetching job {last['id']}", self.client.get_job, last["id"]), reused=True
            )
            self.say(f"AI Hub {kind} job {last['id']} ({label}): collected from an earlier run ({last.get('state')})")
            self.handles.append(handle)
            return handle
        if last is not None and last.get("state") == OPEN:
            raise EdgekitError(
                f"AI Hub {kind} job {last['id']} ({label}) from an earlier `edgekit {last.get('command')}` "
                f"is still open in {self.path}: edgekit does not submit it again",
                hint="collect it with the same command and --resume",
            )
        job = call(f"submitting the {kind} job ({label})", submit)
        record = {
            "id": str(job.job_id),
            "kind": kind,
            "label": label,
            "command": self.command,
            "request": key,
            "submitted": now_iso(),
            "state": OPEN,
            "message": None,
            "url": _url(job),
        }
        with self._locked() as records:
            records.append(record)
        self.say(f"AI Hub {kind} job {record['id']} ({label}): submitted, recorded in {self.path}")
        handle = Handle(record, job)
        self.handles.append(handle)
        return handle

    # ---- waiting ------------------------------------------------------------------------------------
    def wait(self, handles: list[Handle]) -> None:
        """Wait for every job, one progress line per job whenever its state changes. Ctrl-C (or a
        lost connection) leaves the jobs running on AI Hub; the book says how to collect them."""
        pending = {h.id: h for h in handles if h.record.get("state") == OPEN}
        for h in handles:
            if h.failed:
                self.say(f"AI Hub {h.record['kind']} job {h.id} ({h.record['label']}): failed: {h.failed}")
        seen: dict[str, str] = {}
        try:
            while pending:
                for job_id, h in list(pending.items()):
                    status = call(f"reading the status of job {job_id}", h.job.get_status)
                    state = str(status.code)
                    if seen.get(job_id) != state:
                        seen[job_id] = state
                        self.say(f"AI Hub {h.record['kind']} job {job_id} ({h.record['label']}): {state}")
                    if status.finished:
                        message = None if status.success else one_line(status.message or state)
                        h.record = self._update(job_id, state=SUCCEEDED if status.success else FAILED, message=message)
                        if message:
                            self.say(f"AI Hub {h.record['kind']} job {job_id} ({h.record['label']}): failed: {message}")
                        del pending[job_id]
                if pending:
                    time.sleep(POLL_SECONDS if self.poll_seconds is None else self.poll_seconds)
        except (KeyboardInterrupt, EdgekitError):
            if pending:
                self.say(
                    f"AI Hub jobs {', '.join(pending)} keep running on AI Hub (recorded in {self.path}); "
                    f"collect them with the same `edgekit {self.command}` command and --resume"
                )
            raise

    def require_success(self, handles: list[Handle]) -> None:
        """One error line for the first failed job (its own message), after all were waited on."""
        for h in handles:
            if h.failed:
                raise EdgekitError(
                    f"AI Hub {h.record['kind']} job {h.id} ({h.record['label']}) failed: {h.failed}",
                    hint=f"see {h.record.get('url') or 'https://workbench.aihub.qualcomm.com/jobs/'}",
                )

    def summary(self) -> list[dict[str, Any]]:
        """This run's jobs for the command's document."""
        return [
            {k: h.record.get(k) for k in ("id", "kind", "label", "state", "message", "url")} | {"reused": h.reused}
            for h in self.handles
        ]


def _url(job: Any) -> str | None:
    try:
        url = job.url
    except Exception:  # noqa: BLE001 - a URL is a convenience; the id is what the book needs
        return None
    return url if isinstance(url, str) else None


def book_path(root: Path | str) -> Path:
    return Path(root) / BOOK


__all__ = ["BOOK", "FAILED", "Handle", "JobBook", "OPEN", "SUCCEEDED", "book_path", "request_key"]
