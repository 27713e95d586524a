"""Who may call the MetaService: bearer tokens, and which job a caller acts as.

Two tokens, from the service's configuration or environment:

- ``DTS_META_TOKEN``: the service token of a deployment's jobs and tools (workers,
  Spark jobs, the CLI): register, heartbeat and finish *its own* jobs, report
  barriers of tables its job holds, read everything.
- ``DTS_META_ADMIN_TOKEN``: an operator's; also ends or deletes *other* jobs,
  reports barriers of a table without being its writer (``dts meta rebuild``).

A caller acts as a job by sending ``X-DTS-Job: <job id>``; the client sends it for
the job it registered (heartbeats, finishing it), never for a job id it was only
given on a command line, so ``dts meta job cancel`` of someone else's job needs the
admin token. With no token configured the service is open (every caller is an
admin); ``dts meta serve`` then refuses to listen beyond the loopback interface.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from bridge.meta.errors import Forbidden, Unauthorized

TOKEN_ENV = "DTS_META_TOKEN"
ADMIN_TOKEN_ENV = "DTS_META_ADMIN_TOKEN"
#: the CA certificate(s) a client verifies an https MetaService with (PEM); without it, the
#: system trust store. An environment variable like the tokens, so every client (worker,
#: Spark tasks, the CLI) picks it up without an option of its own.
CA_FILE_ENV = "DTS_META_CA_FILE"
JOB_HEADER = "X-DTS-Job"


@dataclass(frozen=True)
class MetaAuth:
    """The tokens a service accepts; ``None`` for both means an open service."""

    # out of the repr: a MetaAuth in a log line or a traceback must not show them
    token: str | None = field(default=None, repr=False)
    admin_token: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> MetaAuth:
        env = os.environ if env is None else env
        return cls(env.get(TOKEN_ENV) or None, env.get(ADMIN_TOKEN_ENV) or None)

    @property
    def open(self) -> bool:
        return self.token is None and self.admin_token is None

    def caller(self, authorization: str | None, job: str | None) -> Caller:
        """The caller of one request; Unauthorized without a valid token."""
        if self.open:
            return Caller(admin=True, job=job)
        scheme, _, presented = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not presented:
            raise Unauthorized("this MetaService needs 'Authorization: Bearer <token>'")
        if self.admin_token and hmac.compare_digest(presented, self.admin_token):
            return Caller(admin=True, job=job)
        if self.token and hmac.compare_digest(presented, self.token):
            return Caller(admin=False, job=job)
        raise Unauthorized("the bearer token is not valid for this MetaService")


@dataclass(frozen=True)
class Caller:
    admin: bool
    job: str | None

    def may_manage(self, job_id: str, action: str) -> None:
        """Ending, deleting or heartbeating a job: the job itself, or an admin."""
        if self.admin or self.job == job_id:
            return
        raise Forbidden(
            f"only job {job_id} itself ({JOB_HEADER}: {job_id}) or the admin token "
            f"({ADMIN_TOKEN_ENV}) may {action} it",
            job_id=job_id,
        )
