"""A store on S3-compatible object storage: ``s3://bucket/prefix``.

Endpoint, region and credentials come from the usual AWS environment variables
(``AWS_ENDPOINT_URL``, ``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``), so any S3-compatible service works.

* Write once: a layer file is one ``PutObject`` of the whole file under its unique name
  (an object appears whole or not at all; there is no temporary name to rename).
* Put-if-absent: ``PutObject`` with ``If-None-Match: *``; the service refuses (412) when
  the name exists, so of two writers racing for a version exactly one wins. A request
  that ends ambiguously (a timeout or a dropped connection after it was sent, or
  botocore's own retry of a put that had in fact landed) is :class:`Ambiguous`: the log
  reads the version back and compares the commit id.
* Ages are the service's ``LastModified``; folders do not exist (listing is by prefix
  with delimiter ``/``).
* Readers in this process (queries, merges) read a layer through a local copy: one
  ``GetObject`` per layer file and process, hashed as it arrives (the hash every read
  checks, storage/integrity.py), then DuckDB and pyarrow read the copy at local speed,
  DuckDB skipping row groups by their statistics (:meth:`S3Blobs.local_copy`). Spark
  tasks, maybe on other hosts, read the objects through pyarrow's S3 filesystem (and
  DuckDB in a task through an fsspec wrapper of it): no DuckDB extension and no Hadoop
  jars are needed.

Errors the user can cause (a missing bucket, refused or missing credentials, a malformed
``AWS_ENDPOINT_URL``, an endpoint that does not answer) are one-line
:class:`StoreUnreachable`. ``DDCLI_S3_TIMEOUT`` (seconds, default 5) bounds connecting,
sending and every wait for bytes, ``AWS_MAX_ATTEMPTS`` (default 3) the attempts of a
request; once a request found the endpoint silent through all its attempts, every later
request of the command fails at once for as long again, so a command against an endpoint
that accepts connections and never answers ends within about timeout x attempts. A
client is built from the environment of the command that asks for it: its endpoint,
region, credentials, timeout and attempts (storage/blobs/resolve.py keeps one per bucket
and settings); what it learnt of its endpoint ends with the command
(:meth:`S3Blobs.new_command`).
"""

from __future__ import annotations

import atexit
import hashlib
import io
import os
import shutil
import tempfile
import threading
import time
import urllib.parse

from storage import faults
from storage.blobs.base import Blobs, Stat
from storage.blobs.checksums import bytes_checksums
from storage.errors import Ambiguous, ObjectChanged, StoreUnreachable

_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
_TAKEN = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}
_AUTH = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403", "InvalidToken",
         "ExpiredToken", "AuthorizationHeaderMalformed"}


def bucket_of(location: str) -> str:
    return location[len("s3://"):].split("/", 1)[0]


def _split(path: str) -> tuple[str, str]:
    bucket, _, key = path[len("s3://"):].partition("/")
    return bucket, key


class S3Blobs(Blobs):
    spark_reads_files = False  # pyspark has no S3 jars here: tasks read through pyarrow
    counts_requests = True

    def __init__(self, location: str):
        self.bucket = bucket_of(location)
        if not self.bucket:
            raise StoreUnreachable(f"store {location!r}: no bucket named (write s3://bucket/prefix)")
        self.endpoint = _endpoint()
        self.region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        self.timeout = _setting("DDCLI_S3_TIMEOUT", 5.0, float)
        self.attempts = _setting("AWS_MAX_ATTEMPTS", 3, int)
        self.silent: str | None = None  # why the endpoint is given up on (it did not answer)
        self._silent_until = 0.0  # (time.monotonic) when a request may try it again
        self.requests = 0
        self._count_lock = threading.Lock()
        self._client = None
        self._arrow_fs = None
        self._checked = False

    # ------------------------------------------------------------ plumbing

    def normalise(self, location: str) -> str:
        return location.rstrip("/")

    def join(self, *parts: str) -> str:
        return "/".join(p.strip("/") if i else p.rstrip("/") for i, p in enumerate(parts))

    def where(self) -> str:
        return f"endpoint {self.endpoint or 'AWS default'}, region {self.region}"

    def client(self):
        if self._client is None:
            import boto3
            from botocore.config import Config
            cfg = Config(connect_timeout=self.timeout, read_timeout=self.timeout,
                         retries={"total_max_attempts": self.attempts, "mode": "standard"})
            try:
                self._client = boto3.session.Session().client("s3", region_name=self.region,
                                                             endpoint_url=self.endpoint, config=cfg)
            except ValueError as e:  # what _endpoint() let through
                raise _bad_endpoint(self.endpoint, e) from None
        return self._client

    def arrow_fs(self):
        if self._arrow_fs is None:
            from pyarrow import fs as pafs
            options = dict(region=self.region, connect_timeout=self.timeout, request_timeout=self.timeout,
                           retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=self.attempts))
            if self.endpoint:
                scheme, _, host = self.endpoint.partition("://")
                options.update(endpoint_override=host or scheme, scheme=scheme if host else "https")
            key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
            if key and secret:
                options.update(access_key=key, secret_key=secret, session_token=os.environ.get("AWS_SESSION_TOKEN"))
            self._arrow_fs = pafs.S3FileSystem(**options)
        return self._arrow_fs

    def _call(self, op: str, path: str | None = None, **kw):
        """One request, counted; errors the user can cause become one line."""
        import botocore.exceptions as bx
        if self.silent is not None:
            if time.monotonic() < self._silent_until:
                raise StoreUnreachable(self.silent)
            self.silent = None
        with self._count_lock:
            self.requests += 1
        try:
            return getattr(self.client(), op)(Bucket=self.bucket, **kw)
        except bx.ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code == "NoSuchBucket":
                raise StoreUnreachable(f"bucket {self.bucket!r} does not exist at {self.endpoint or 'AWS'}") from None
            if code in _AUTH:
                raise StoreUnreachable(f"the object store refused the credentials for bucket {self.bucket!r} "
                                       f"({code}); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY") from None
            if code in _NOT_FOUND:
                raise FileNotFoundError(path or op) from None
            raise
        except (bx.NoCredentialsError, bx.PartialCredentialsError) as e:
            raise StoreUnreachable(f"no AWS credentials for bucket {self.bucket!r} ({e}); set AWS_ACCESS_KEY_ID "
                                   f"and AWS_SECRET_ACCESS_KEY (or an AWS profile)") from None
        except bx.EndpointResolutionError as e:
            raise _bad_endpoint(self.endpoint, e) from None
        except bx.EndpointConnectionError:
            raise self._give_up(f"cannot reach the object store at {self.endpoint or 'AWS'} "
                                f"(bucket {self.bucket!r}); check AWS_ENDPOINT_URL") from None
        except (bx.ConnectTimeoutError,) as e:
            raise self._give_up(f"the object store at {self.endpoint or 'AWS'} did not answer "
                                f"within {self.timeout:g} s ({type(e).__name__})") from None
        except (bx.ReadTimeoutError, bx.ConnectionClosedError, bx.ResponseStreamingError) as e:
            error = self._give_up(f"the object store at {self.endpoint or 'AWS'} stopped answering "
                                  f"({type(e).__name__}, {self.attempts} attempt(s) of {self.timeout:g} s)")
            if op == "put_object":
                raise Ambiguous(f"{op} of {path}: {type(e).__name__}") from None
            raise error from None

    def _give_up(self, why: str) -> StoreUnreachable:
        """The endpoint did not answer through every attempt: the requests of the next
        timeout x attempts seconds fail at once with the same line, so the command that
        met it ends within about twice that. No longer: the endpoint may be back for the
        next command (a Spark task's worker serves many)."""
        if self.silent is None:
            self.silent = why
            self._silent_until = time.monotonic() + self.timeout * self.attempts
        return StoreUnreachable(self.silent)

    def new_command(self) -> None:
        """The process starts another command: it tries the endpoint and the bucket again."""
        self.silent, self._checked = None, False

    def check(self) -> None:
        """Once per command: the bucket exists and the credentials are accepted."""
        if self._checked:
            return
        try:
            self._call("head_bucket")
        except FileNotFoundError:  # HEAD has no body: a missing bucket is a bare 404
            raise StoreUnreachable(f"bucket {self.bucket!r} does not exist at {self.endpoint or 'AWS'}") from None
        self._checked = True

    # ------------------------------------------------------------ reading

    def get(self, path: str) -> bytes:
        return self.get_with_ident(path)[0]

    def get_with_ident(self, path: str) -> tuple[bytes, tuple]:
        r = self._call("get_object", path, Key=_split(path)[1])
        return r["Body"].read(), (r["ETag"], r["LastModified"].timestamp())

    def stat(self, path: str) -> Stat:
        r = self._call("head_object", path, Key=_split(path)[1])
        mtime = r["LastModified"].timestamp()
        return Stat(r["ContentLength"], mtime, (r["ETag"], mtime))

    def _list(self, folder: str, key: str) -> list[str]:
        prefix = _split(folder)[1].rstrip("/") + "/"
        out, token = [], None
        while True:
            kw = dict(Prefix=prefix, Delimiter="/", **({"ContinuationToken": token} if token else {}))
            r = self._call("list_objects_v2", folder, **kw)
            if key == "files":
                out += [o["Key"][len(prefix):] for o in r.get("Contents", [])]
            else:
                out += [p["Prefix"][len(prefix):].rstrip("/") for p in r.get("CommonPrefixes", [])]
            if not r.get("IsTruncated"):
                return out
            token = r["NextContinuationToken"]

    def list(self, folder: str) -> list[str]:
        return self._list(folder, "files")

    def list_folders(self, folder: str) -> list[str]:
        return self._list(folder, "folders")

    def list_objects(self, path: str) -> list[tuple[str, int, str]]:
        """``(s3 URL, size, ETag)`` of every object whose key starts with ``path``'s key,
        at any depth (update files found by a glob, storage/files/locations.py)."""
        prefix = _split(path)[1]
        out, token = [], None
        while True:
            kw = dict(Prefix=prefix, **({"ContinuationToken": token} if token else {}))
            r = self._call("list_objects_v2", path, **kw)
            out += [(f"s3://{self.bucket}/{o['Key']}", o["Size"], o["ETag"]) for o in r.get("Contents", [])]
            if not r.get("IsTruncated"):
                return out
            token = r["NextContinuationToken"]

    def any_under(self, path: str) -> bool:
        """Whether some object's key starts with ``path``'s key (one listing of one key)."""
        r = self._call("list_objects_v2", path, Prefix=_split(path)[1], MaxKeys=1)
        return bool(r.get("Contents"))

    def open_object(self, path: str, etag: str | None = None):
        """The object's bytes as a stream (``read(n)``); with ``etag``, of exactly that
        version (:class:`ObjectChanged` if the object was replaced since it was listed)."""
        import botocore.exceptions as bx
        kw = {"IfMatch": etag} if etag else {}
        try:
            r = self._call("get_object", path, Key=_split(path)[1], **kw)
        except bx.ClientError as e:
            if str(e.response.get("Error", {}).get("Code", "")) in _TAKEN:
                raise ObjectChanged(path) from None
            raise
        return _Body(r["Body"], self)

    def open_read(self, path: str):
        try:
            return self.arrow_fs().open_input_file(path[len("s3://"):])
        except FileNotFoundError:
            raise
        except OSError as e:
            if "NoSuchKey" in str(e) or "does not exist" in str(e) or "404" in str(e):
                raise FileNotFoundError(path) from None
            raise

    def local_copy(self, path: str) -> tuple[str, int, str]:
        """One ``GetObject`` per layer file and process: the object's bytes go to a file
        in this process's copy folder while they are hashed, and every later read in the
        process (DuckDB with its row-group skipping, pyarrow memory-mapped) is a local read
        of exactly the bytes that were hashed. A missing object is FileNotFoundError."""
        import botocore.exceptions as bx
        with _copies.lock:
            got = _copies.files().get(path)
            if got is not None:
                return got
            local = os.path.join(_copies.folder(), f"{len(_copies.files()):08d}-{os.path.basename(path)}")
            h, size = hashlib.sha256(), 0
            r = self._call("get_object", path, Key=_split(path)[1])
            tmp = local + ".part"
            try:
                with open(tmp, "wb") as fh:
                    for chunk in r["Body"].iter_chunks(1 << 20):
                        h.update(chunk)
                        size += len(chunk)
                        fh.write(chunk)
                os.rename(tmp, local)
            except (bx.ReadTimeoutError, bx.ConnectionClosedError, bx.ResponseStreamingError) as e:
                _remove_quietly(tmp)
                raise self._give_up(f"the object store at {self.endpoint or 'AWS'} stopped answering "
                                    f"({type(e).__name__})") from None
            except BaseException:
                _remove_quietly(tmp)
                raise
            got = _copies.files()[path] = (local, size, h.hexdigest())
            return got

    def forget_copy(self, path: str) -> None:
        """Drop the copy of ``path`` (it did not match the log: the next read fetches again)."""
        with _copies.lock:
            got = _copies.files().pop(path, None)
        if got is not None:
            _remove_quietly(got[0])

    def read_folders(self, folder: str) -> list[str]:
        with _copies.lock:
            return [folder, _copies.folder() + os.sep]

    def arrow(self, path: str) -> tuple[object, str]:
        return self.arrow_fs(), path[len("s3://"):]

    def prepare_duckdb(self, con) -> None:
        """Let DuckDB read ``s3://`` paths through pyarrow (httpfs is not available offline)."""
        from fsspec.implementations.arrow import ArrowFSWrapper

        class _S3(ArrowFSWrapper):
            protocol = ("s3",)

        con.register_filesystem(_S3(self.arrow_fs()))

    # ------------------------------------------------------------ writing

    def write_new(self, path: str, write) -> dict:
        buf = io.BytesIO()
        write(buf)
        data = buf.getvalue()
        sums = bytes_checksums(data)
        faults.point("layer.before_fsync")
        faults.point("layer.before_rename")
        try:
            self._call("put_object", path, Key=_split(path)[1], Body=data, IfNoneMatch="*")
        except Ambiguous:
            if self.ident(path) is None:  # read back: landed or not, never guessed
                raise StoreUnreachable(f"writing {path} failed: the object store stopped answering") from None
        faults.point("layer.after_rename")
        return {"bytes": len(data), **sums}

    def put_if_absent(self, path: str, data: bytes, point: str = "log.before_link") -> bool:
        import botocore.exceptions as bx
        faults.point(point)
        try:
            self._call("put_object", path, Key=_split(path)[1], Body=data, IfNoneMatch="*")
            return True
        except bx.ClientError as e:
            if str(e.response.get("Error", {}).get("Code", "")) in _TAKEN:
                return False
            raise

    def replace(self, path: str, data: bytes) -> None:
        self._call("put_object", path, Key=_split(path)[1], Body=data)

    def upload(self, path: str, fh) -> None:
        """One ``PutObject`` of the whole of ``fh`` (an open local file, read from its
        start) under ``path``, replacing any object there: the object appears whole or not
        at all (a result written to ``s3://``, ddcli/outputs.py)."""
        self._call("put_object", path, Key=_split(path)[1], Body=fh)

    def delete(self, path: str) -> bool:
        self._call("delete_object", path, Key=_split(path)[1])
        return True

    def make_folder(self, folder: str) -> None:
        return None  # an object store has no folders

    def remove_folder(self, folder: str, older_than: float | None = None) -> None:
        return None


class _Body:
    """A ``GetObject`` body read in pieces; a connection that drops or stalls mid-way is
    one-line :class:`StoreUnreachable`, as for any other request."""

    def __init__(self, body, blobs: S3Blobs):
        self._body = body
        self._blobs = blobs

    def read(self, n: int = -1) -> bytes:
        import botocore.exceptions as bx
        from urllib3.exceptions import HTTPError
        try:
            return self._body.read(n if n is not None and n >= 0 else None)
        except (bx.ReadTimeoutError, bx.ConnectionClosedError, bx.ResponseStreamingError, HTTPError) as e:
            raise self._blobs._give_up(f"the object store at {self._blobs.endpoint or 'AWS'} stopped answering "
                                       f"({type(e).__name__})") from None
        except bx.FlexibleChecksumError:
            raise StoreUnreachable(f"the bytes the object store at {self._blobs.endpoint or 'AWS'} sent do not "
                                   f"match the checksum it sent with them; nothing was ingested, try again") from None

    def close(self) -> None:
        self._body.close()


def _setting(name: str, default, kind):
    """A positive number from the environment variable ``name`` (``default`` when unset)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = 0
    if not value > 0:
        raise StoreUnreachable(f"{name}={raw!r} is not a positive {'whole ' if kind is int else ''}number")
    return value


def _endpoint() -> str | None:
    """``AWS_ENDPOINT_URL`` checked (None when unset): an http(s) URL with a host."""
    raw = os.environ.get("AWS_ENDPOINT_URL", "").strip()
    if not raw:
        return None
    try:
        u = urllib.parse.urlsplit(raw)
        u.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as e:
        raise _bad_endpoint(raw, e) from None
    if u.scheme not in ("http", "https") or not u.hostname or any(c.isspace() for c in raw):
        raise _bad_endpoint(raw, "it needs http:// or https:// and a host")
    return raw


def _bad_endpoint(raw, why) -> StoreUnreachable:
    return StoreUnreachable(f"AWS_ENDPOINT_URL={raw!r} is not an endpoint URL such as "
                            f"https://s3.example.com or http://localhost:9000 ({why})")


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class _Copies:
    """This process's local copies of layer objects (:meth:`S3Blobs.local_copy`): one
    temporary folder, removed when the process ends; a forked child makes its own."""

    def __init__(self):
        self.lock = threading.RLock()
        self._pid = None
        self._dir = None
        self._files: dict[str, tuple[str, int, str]] = {}  # layer path -> (copy, size, sha256)

    def _fresh(self) -> None:
        if self._pid != os.getpid():
            self._dir = tempfile.mkdtemp(prefix="ddcli-layers-")
            self._pid = os.getpid()
            self._files = {}
            atexit.register(shutil.rmtree, self._dir, True)

    def folder(self) -> str:
        self._fresh()
        return self._dir

    def files(self) -> dict[str, tuple[str, int, str]]:
        self._fresh()
        return self._files


_copies = _Copies()
