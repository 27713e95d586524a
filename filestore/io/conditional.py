"""Create-if-absent on object stores: a conditional PUT (``If-None-Match: *``) via obstore.

S3 (and S3-compatible stores), GCS and Azure refuse a conditional create of a key
that exists with ``412 Precondition Failed``, atomically on the service side: of
racing committers exactly one creates ``snapshot-N``. pyarrow's filesystems cannot
send that header, so this module builds an obstore client with the same endpoint,
region and credentials as the pyarrow S3 filesystem the warehouse was opened with.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from filestore.errors import ConditionalCreateUnsupported

if TYPE_CHECKING:
    from obstore.store import ClientConfig, S3Config

log = logging.getLogger(__name__)


class ConditionalCreate:
    """``create(path, data) -> bool`` on one object store, path = ``<bucket>/<key>``."""

    def __init__(self, make_store: Any) -> None:
        self._make_store = make_store
        self._stores: dict[str, Any] = {}

    def _store(self, bucket: str) -> Any:
        store = self._stores.get(bucket)
        if store is None:
            store = self._stores[bucket] = self._make_store(bucket)
        return store

    def create(self, path: str, data: bytes) -> bool:
        """True when this call created ``path``; False when it existed already."""
        # obstore is optional (see for_filesystem): only S3 warehouses need it
        import obstore
        from obstore.exceptions import AlreadyExistsError, NotSupportedError, PreconditionError

        bucket, _, key = path.partition("/")
        try:
            obstore.put(self._store(bucket), key, data, mode="create")
        except (AlreadyExistsError, PreconditionError):
            return False
        except NotSupportedError as e:
            raise ConditionalCreateUnsupported(
                f"the object store of {bucket!r} does not support conditional writes "
                f"(If-None-Match): {e}"
            ) from e
        return True


def for_filesystem(fs: pafs.FileSystem) -> ConditionalCreate | None:
    """A conditional-create client for ``fs``, or None where there is none (not S3)."""
    if not isinstance(fs, pafs.S3FileSystem):
        return None
    try:
        import obstore  # noqa: F401
    except ImportError:
        log.warning("obstore is not installed: commits on S3 fall back to check-write-verify")
        return None
    settings = fs.__reduce__()[1][0]  # the options pyarrow was configured with
    return ConditionalCreate(lambda bucket: _s3_store(bucket, settings))


def _s3_store(bucket: str, settings: dict[str, Any]) -> Any:
    # obstore is optional (see for_filesystem)
    from obstore.store import S3Store

    config: S3Config = {}
    if settings.get("region"):
        config["region"] = settings["region"]
    endpoint = settings.get("endpoint_override")
    scheme = settings.get("scheme") or "https"
    if endpoint:
        config["endpoint"] = endpoint if "://" in endpoint else f"{scheme}://{endpoint}"
        # a custom endpoint (MinIO, moto, R2...) is addressed by path, as pyarrow does
        config["virtual_hosted_style_request"] = bool(settings.get("force_virtual_addressing"))
    if settings.get("access_key"):
        config["access_key_id"] = settings["access_key"]
        config["secret_access_key"] = settings["secret_key"]
        if settings.get("session_token"):
            config["session_token"] = settings["session_token"]
    if settings.get("anonymous"):
        config["skip_signature"] = True
    client_options: ClientConfig = {"allow_http": scheme == "http"}
    # credentials not given to pyarrow come from the environment (AWS_*), as for pyarrow
    return S3Store(bucket, config=config, client_options=client_options)
