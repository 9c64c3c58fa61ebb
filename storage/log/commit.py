"""The commit protocol: a versioned metadata log with put-if-absent commits.

Version ``N`` of the store's metadata is the file ``log/v{N}.json``. A commit creates
the next version with put-if-absent (storage/blobs/base.py: locally a temporary file, fsynced
and *hard-linked* to its final name; on an object store a put with ``If-None-Match: *``):
it fails if the name exists, so of two writers racing for version ``N+1`` exactly one
wins, and a crash at any point leaves version ``N`` as the newest complete one.
Readers take the newest version and never lock.

Versions stay small (storage/log/delta.py): most hold only the change from their parent
(a *delta*); every :data:`CHECKPOINT_EVERY` versions one holds the whole state (a
*checkpoint*; versions written before deltas existed are checkpoints too). Each version
names its parent's ``commit_id``. ``log/_last_checkpoint.json`` says where the newest
checkpoint is; it is only a hint: a reader checks that the version it names is a
checkpoint, then applies the few later deltas until the next name is free. Without a
usable hint a reader lists the folder once and starts from the newest checkpoint there.

Old versions are deleted behind a retention window (:meth:`Log.prune`), always in
ascending order and never the newest checkpoint nor a later version. So when a reader
finds version ``N+1`` absent and the checkpoint it started from is still the same file,
``N`` was the newest: had ``N+1`` existed and been pruned, its (older) base would have
been deleted first. A writer checks the same after its link, so a writer paused long
enough for its base to be pruned cannot commit into the deleted range unseen: such a
version is taken back and the change is applied again to the newest state.

Every change of durable state is a pure function ``old state -> new state`` applied by
:func:`Log.commit`; nothing else writes metadata. When another writer got in first the
function is applied again to the newer state; it raises :class:`Conflict` when what it
read no longer holds.

Every version begins with the SHA-256 of the rest of its bytes (:func:`encode_version`):
a version whose bytes changed after its commit (one flipped byte in a recorded layer size
or hash) is damaged like an unreadable one, so readers fall back to the version before and
writers refuse to build on it. Versions written before the checksum carry none and are
read as they are.

Every version carries the random ``commit_id`` of the commit that wrote it. A create that
ends ambiguously (``EEXIST`` after a network filesystem retried a link that had in fact
succeeded; a 412 after the S3 client retried a put that had landed; a timeout) is
resolved by reading the version back: if it holds our commit id, the
commit won. Without that, the writer would treat its own version as a rival's, and
clean up files its own committed version references.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from storage import clock, faults
from storage.blobs.resolve import for_path
from storage.errors import Ambiguous, Conflict, CorruptionError, StoreUnreachable
from storage.log import delta as log_delta

_VERSION_RE = re.compile(r"^v(\d{12})\.json$")
CHECKPOINT_EVERY = 16  # a reader applies at most this many deltas after the checkpoint
HINT_NAME = "_last_checkpoint.json"
DEFAULT_RETENTION_SECONDS = 3600.0  # = the default grace period of garbage collection


@dataclass
class _Chain:
    """What a reader found: the state of the newest version and how it got there."""
    version: int
    state: dict | None
    base: int = 0                      # the checkpoint the chain started from
    base_id: tuple | None = None       # that file's identity (inode, mtime, size)
    last_full: int = 0                 # the newest checkpoint in the chain
    from_hint: bool = False
    damaged: list[int] = field(default_factory=list)
    tip_id: tuple | None = None        # the newest version's file identity
    full_id: tuple | None = None       # the newest checkpoint's file identity, once seen after base


_MISSING, _BAD = "missing", "bad"
_CHECKSUM_RE = re.compile(rb'\A\{"sha256":"([0-9a-f]{64})",')


def encode_version(doc: dict) -> bytes:
    """A version's bytes: its JSON, with the SHA-256 of the JSON as the first key."""
    body = json.dumps(doc, separators=(",", ":")).encode()
    return b'{"sha256":"' + hashlib.sha256(body).hexdigest().encode() + b'",' + body[1:]


def decode_version(raw: bytes) -> dict | None:
    """The document a version's bytes hold; None when they are damaged (not a JSON object,
    or not what their checksum says). Raises ``ValueError`` for bytes that are no JSON."""
    m = _CHECKSUM_RE.match(raw)
    if m is not None:
        body = b"{" + raw[m.end():]
        if hashlib.sha256(body).hexdigest().encode() != m.group(1):
            return None
        doc = json.loads(body)
    else:
        doc = json.loads(raw)
        if isinstance(doc, dict) and "sha256" in doc:
            return None  # a checksum that is not one (a flipped character in it)
    return doc if isinstance(doc, dict) else None


class Log:
    def __init__(self, root: str, retention_seconds: float | None = None):
        self.blobs = for_path(root)
        self.dir = self.blobs.join(root, "log")
        self.damaged: list[int] = []  # unreadable versions newer than the last one read
        if retention_seconds is None:
            retention_seconds = float(os.environ.get("DDCLI_LOG_RETENTION", DEFAULT_RETENTION_SECONDS))
        self.retention = retention_seconds
        self._chain: _Chain | None = None

    def _versions(self) -> list[int]:
        """Every version name in the folder (a listing: only for rare slow paths)."""
        names = self.blobs.list(self.dir)
        return sorted(int(m.group(1)) for n in names if (m := _VERSION_RE.match(n)))

    def path(self, version: int) -> str:
        return self.blobs.join(self.dir, f"v{version:012d}.json")

    def _hint_path(self) -> str:
        return self.blobs.join(self.dir, HINT_NAME)

    # ------------------------------------------------------------ reading

    def _load(self, version: int):
        """``(doc, identity)``, ``(_MISSING, None)`` or ``(_BAD, None)`` (emptied or damaged)."""
        try:
            raw, ident = self.blobs.get_with_ident(self.path(version))
            doc = decode_version(raw)
        except FileNotFoundError:
            return _MISSING, None
        except (ValueError, OSError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, EISDIR
            return _BAD, None
        return (doc, ident) if doc is not None else (_BAD, None)

    def _ident(self, version: int) -> tuple | None:
        return self.blobs.ident(self.path(version))

    def _read_hint(self) -> dict:
        try:
            hint = json.loads(self.blobs.get(self._hint_path()))
            return hint if isinstance(hint, dict) else {}
        except (OSError, ValueError):
            return {}

    def _chain_from(self, base: int, *, from_hint: bool) -> _Chain | None:
        """The newest state, reached from checkpoint ``base`` by applying the later deltas;
        None when ``base`` is no checkpoint or was pruned meanwhile (start again)."""
        doc, ident = self._load(base)
        if not isinstance(doc, dict) or "delta" in doc or doc.get("version", base) != base:
            return None
        state = log_delta.body(doc)
        state["version"], state["commit_id"] = base, doc.get("commit_id")
        return self._extend(_Chain(base, state, base, ident, base, from_hint, tip_id=ident))

    def _chain_cached(self) -> _Chain | None:
        """The newest state, reached from the one this log read last (its newest version
        still the same file): a read costs a few requests however many deltas the chain
        has. None when there is nothing usable (read from the hint)."""
        c = self._chain
        if c is None or c.state is None or c.damaged or c.tip_id is None or self._ident(c.version) != c.tip_id:
            return None
        chain = self._extend(_Chain(c.version, log_delta.own_copy(c.state), c.base, c.base_id,
                                    c.last_full, c.from_hint, tip_id=c.tip_id, full_id=c.full_id))
        if chain is not None and chain.last_full != chain.base and chain.full_id is not None:
            # a newer checkpoint was committed since: build on it (its writer updates the hint)
            chain.base, chain.base_id, chain.from_hint = chain.last_full, chain.full_id, True
        return chain

    def _extend(self, chain: _Chain) -> _Chain | None:
        """Apply the versions after ``chain.version`` until the next name is free."""
        state, v = chain.state, chain.version + 1
        while True:
            doc, ident = self._load(v)
            if doc is _MISSING:
                break
            if doc is _BAD or doc.get("parent", state["commit_id"]) != state["commit_id"]:
                chain.damaged = self._existing_from(v)
                break
            if "delta" in doc:
                try:
                    state = log_delta.apply(state, doc["delta"])
                except (KeyError, TypeError, ValueError, AttributeError, IndexError):
                    chain.damaged = self._existing_from(v)
                    break
            else:
                state = log_delta.body(doc)
                chain.last_full, chain.full_id = v, ident
            state["version"], state["commit_id"] = v, doc.get("commit_id")
            chain.tip_id = ident
            v += 1
        if self._ident(chain.base) != chain.base_id:  # pruned under us: N+1 may have been deleted too
            return None
        chain.version, chain.state = v - 1, state
        return chain

    def _remember(self, chain: _Chain) -> None:
        """Keep what was read: callers get copies (:meth:`latest`, :meth:`commit`), and a
        newer version is applied to a copy (``storage/log/delta.py: apply``)."""
        self.damaged = chain.damaged
        self._chain = _Chain(chain.version, chain.state,
                             chain.base, chain.base_id, chain.last_full, chain.from_hint, list(chain.damaged),
                             chain.tip_id, chain.full_id)

    def _existing_from(self, v: int) -> list[int]:
        out = []
        while self._ident(v) is not None:
            out.append(v)
            v += 1
        return out

    def _chain_slow(self) -> _Chain | None:
        """Without a usable hint: list the folder once, start from the newest checkpoint."""
        versions = self._versions()
        if not versions:
            return _Chain(0, None)
        for v in reversed(versions):
            doc, _ = self._load(v)
            if isinstance(doc, dict) and "delta" not in doc:
                return self._chain_from(v, from_hint=False)
        if any(self._ident(v) is not None for v in versions):
            raise CorruptionError(f"no metadata version in {self.dir} can be read (the newest, "
                                  f"{self.path(versions[-1])}, is damaged); the store cannot be opened")
        return None  # all pruned while listing: look again

    def _read_chain(self) -> _Chain:
        for attempt in range(100):
            chain = self._chain_cached() if attempt == 0 else None
            if chain is not None:
                self._remember(chain)
                return chain
            hint = self._read_hint()
            if isinstance(hint.get("checkpoint"), int):
                chain = self._chain_from(hint["checkpoint"], from_hint=True)
            if chain is None:
                chain = self._chain_slow()
            if chain is not None:
                self._remember(chain)
                return chain
            time.sleep(0.001 * (attempt + 1))
        raise Conflict(f"cannot read the newest metadata version in {self.dir}; retry")

    def latest(self, *, shared: bool = False) -> tuple[int, dict | None]:
        """The newest committed version and its state (``(0, None)`` for a new store): a
        copy of its own, or with ``shared`` the log's own, which the caller only reads.

        A newest version that is unreadable is damaged (a commit writes it whole before
        it gets its name): the newest intact version before it is returned instead, and
        :attr:`damaged` names the damaged ones (:meth:`commit` then refuses to write).
        """
        chain = self._read_chain()
        if shared or chain.state is None:
            return chain.version, chain.state
        return chain.version, log_delta.copy_state(chain.state)

    def damage_note(self) -> str | None:
        """What to do about damaged newest versions found by the last :meth:`latest`."""
        if not self.damaged:
            return None
        first = self.path(self.damaged[0])
        more = f" and the {len(self.damaged) - 1} newer one(s)" if len(self.damaged) > 1 else ""
        return (f"metadata version {first} is damaged (unreadable, or its bytes are not what its checksum says); reading the previous intact version "
                f"{self.damaged[0] - 1}. To write again, move the damaged file(s) aside after checking them, "
                f"e.g. mv {first} {first}.damaged{more}")

    # ------------------------------------------------------------ writing

    def commit(self, change: Callable[[dict | None], dict], *, retries: int = 20,
               in_place: bool = True) -> tuple[int, dict]:
        """Apply ``change`` to the newest state and commit the result as the next version.

        ``change`` must be pure: it may be called again on a newer state when another
        writer won the race. It raises :class:`Conflict` when it cannot apply any more.
        It gets a copy of the state it may change anywhere, or, unless ``in_place``, one
        it may change at its first two levels only (``storage/log/delta.py: own_copy``).
        """
        self.blobs.make_folder(self.dir)
        for attempt in range(retries):
            chain = self._read_chain()
            version, state = chain.version, chain.state
            if self.damaged:
                raise CorruptionError(f"nothing was written: {self.damage_note()}")
            copy = log_delta.copy_state if in_place else log_delta.own_copy
            new_state = change(copy(state) if state is not None else None)
            commit_id = uuid.uuid4().hex
            parent = state.get("commit_id") if state is not None else None
            full = state is None or not chain.from_hint or version + 1 - chain.last_full >= CHECKPOINT_EVERY
            if full:
                doc = {"checkpoint": True, **log_delta.body(new_state)}
            else:
                doc = {"delta": log_delta.diff(state, new_state)}
            doc.update(version=version + 1, commit_id=commit_id, parent=parent)
            if self._put_if_absent(version + 1, doc):
                if not self._still_current(chain, version + 1, commit_id):
                    self._take_back(version + 1, commit_id)
                    continue
                new_state["version"], new_state["commit_id"] = version + 1, commit_id
                if full:
                    faults.point("log.before_hint")
                    self._write_hint(checkpoint=version + 1)
                    self._prune_quietly()
                elif chain.last_full != chain.base:
                    self._write_hint(checkpoint=chain.last_full)  # the hint was behind: repair it
                return version + 1, new_state
            time.sleep(0.005 * (attempt + 1))
        raise Conflict("the store kept changing under this command; try again")

    def _still_current(self, chain: _Chain, version: int, commit_id: str) -> bool:
        """After linking ``version``: True unless the link landed in the range a pruner
        had already deleted (then it is not in the newest chain and must be taken back)."""
        if chain.state is None or self._ident(chain.base) == chain.base_id:
            return True  # the base is intact, so nothing at or above it was pruned
        nxt, _ = self._load(version + 1)
        if isinstance(nxt, dict):
            return nxt.get("parent") == commit_id
        if nxt is _BAD:
            return False
        versions = self._versions()
        return not versions or versions[-1] == version

    def _take_back(self, version: int, commit_id: str) -> None:
        if self._holds_commit(version, commit_id):
            self.blobs.delete(self.path(version))

    def _put_if_absent(self, version: int, state: dict) -> bool:
        """Create version ``version``; False when another commit holds the name. A write
        that ended ambiguously is resolved by reading the version back (our commit id?)."""
        data = encode_version(state)
        try:
            created = self.blobs.put_if_absent(self.path(version), data)
        except Ambiguous as e:
            try:
                missing = self._load(version)[0] is _MISSING
            except StoreUnreachable:
                raise StoreUnreachable(f"the commit of metadata version {version} ended without an answer ({e}) "
                                       f"and the store cannot be reached to tell whether it landed; run "
                                       f"'ddcli status' once it answers") from None
            if missing:
                raise Conflict(f"the commit of metadata version {version} ended without an answer ({e}) "
                               f"and it is not in the store; nothing was written, retry") from None
            created = False
        if not created and not self._holds_commit(version, state.get("commit_id")):
            return False
        faults.point("log.after_link")
        return True

    def _holds_commit(self, version: int, commit_id: str | None) -> bool:
        """True when version ``version`` on disk was written by the commit ``commit_id``."""
        if commit_id is None:
            return False
        doc, _ = self._load(version)
        return isinstance(doc, dict) and doc.get("commit_id") == commit_id

    def _write_hint(self, **fields) -> None:
        """Update the hint (a plain replace: it is verified by every reader)."""
        hint = self._read_hint()
        for k, v in fields.items():
            if not isinstance(hint.get(k), int) or v > hint[k]:
                hint[k] = v
        try:
            self.blobs.replace_hint(self._hint_path(), json.dumps(hint).encode())
        except OSError:
            pass

    # ------------------------------------------------------------ retention

    def _prune_quietly(self) -> None:
        """Prune after a checkpoint commit; a failure only postpones it (the commit stands)."""
        try:
            self.prune(clock.now() - self.retention)
        except (OSError, ValueError, Conflict, CorruptionError):
            pass

    def _superseded_at(self, version: int) -> float | None:
        """When ``version`` stopped being the newest (the next one's mtime); None if it is."""
        try:
            return self.blobs.stat(self.path(version + 1)).mtime
        except FileNotFoundError:
            return None

    def prune(self, keep_after: float, *, listing: bool = False) -> int:
        """Delete the versions no reader can need: those that stopped being the newest
        before ``keep_after``, except the checkpoint the first kept version is built on.

        Walks up from the floor of the last prune (``listing``: from the oldest file in
        the folder, which also removes stray files below the floor). Deletes in ascending
        order (see the module docstring) and records the new floor in the hint.
        """
        newest = self.latest(shared=True)[0]  # its number only: no copy of its state
        if newest == 0:
            return 0
        hint = self._read_hint()
        lo = hint.get("floor")
        names: list[int] | None = None
        if listing or not isinstance(lo, int):
            names = self._versions()
            lo = names[0] if names else newest
        first_live = max(lo, 1)
        while first_live < newest:
            t = self._superseded_at(first_live)
            if t is not None and t >= keep_after:
                break
            first_live += 1
        floor = first_live
        doc, _ = self._load(floor)
        while floor > lo and not (isinstance(doc, dict) and "delta" not in doc):
            floor -= 1
            doc, _ = self._load(floor)
        if not (isinstance(doc, dict) and "delta" not in doc):
            return 0  # no checkpoint at or below the first kept version: keep everything
        doomed = [v for v in names if v < floor] if names is not None else range(lo, floor)
        faults.point("log.before_prune")
        pruned = 0
        for v in doomed:
            if not self.blobs.delete(self.path(v)):
                continue
            pruned += 1
            if pruned == 1:
                faults.point("log.mid_prune")
        self._write_hint(floor=floor)
        return pruned

    def live_versions(self, since: float) -> list[int]:
        """Versions that were the newest at some moment at or after ``since`` (epoch seconds).

        Version ``v`` was the newest from its own commit until the commit of the next one,
        so it counts when the *next* version was committed at or after ``since``; the
        newest version always counts. A reader that took a version less than a grace
        period ago still finds every file it names.
        """
        versions = self._versions()
        live = []
        for i, v in enumerate(versions):
            if i == len(versions) - 1:
                live.append(v)
                continue
            t = self._superseded_at(v)
            if t is None or t >= since:
                live.append(v)
        return live

    def covers(self, since: float) -> bool:
        """True when every version that was the newest at some moment after ``since`` is
        still in the log (a retention shorter than that window pruned some)."""
        for v in self._versions():
            try:
                st = self.blobs.stat(self.path(v))
            except FileNotFoundError:
                continue
            if st.size == 0:  # emptied by an older ddcli's prune: as good as deleted
                continue
            return v == 1 or st.mtime < since
        return True

    def states(self, versions: list[int] | None = None) -> dict[int, dict]:
        """The states of ``versions`` (default: every version still in the log) that can
        be rebuilt from a checkpoint in the log; for garbage collection and checks."""
        names = self._versions()
        wanted = set(names if versions is None else versions)
        out: dict[int, dict] = {}
        state = None
        for v in names:
            doc, _ = self._load(v)
            if not isinstance(doc, dict):
                state = None
                continue
            if "delta" not in doc:
                state = log_delta.body(doc)
            elif state is None or doc.get("parent") != state.get("commit_id") or state.get("version") != v - 1:
                state = None
                continue
            else:
                try:
                    state = log_delta.apply(state, doc["delta"])
                except (KeyError, TypeError, ValueError, AttributeError, IndexError):
                    state = None
                    continue
            state["version"], state["commit_id"] = v, doc.get("commit_id")
            if v in wanted:
                out[v] = log_delta.copy_state(state)
        return out

    def newest(self, n: int) -> list[tuple[int, float | None, dict]]:
        """The newest ``n`` versions still in the log that can be rebuilt, oldest first:
        ``(version, when it was committed (epoch seconds; None: unknown), state)``."""
        versions = self._versions()[-n:] if n > 0 else []
        out = []
        for v, state in sorted(self.states(versions).items()):
            try:
                when = self.blobs.stat(self.path(v)).mtime
            except FileNotFoundError:  # pruned meanwhile
                when = None
            out.append((v, when, state))
        return out

    def recent_states(self, newer_than: float) -> list[dict]:
        """States of the versions that were the newest at some moment after ``newer_than``
        (for garbage collection: a reader may still be reading any of them)."""
        return list(self.states(self.live_versions(newer_than)).values())

    def stray_tmp_files(self) -> list[str]:
        return [self.blobs.join(self.dir, n) for n in self.blobs.list(self.dir) if n.startswith(".tmp-")]

