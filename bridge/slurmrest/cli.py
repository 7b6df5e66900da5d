"""The ``scontrol`` fallback, for what a REST version cannot do.

Slurm 22.05's REST (v0.0.38) has no node update or delete and no REST version before v0.0.45 can
requeue a job held, yet the bridge must drain, set DOWN and delete its dynamic nodes and put a
preempted running job back held (and, rarely, create a FUTURE placeholder node: see
``SlurmClient.hold_job``). ``scontrol`` does all of it with the same JWT (``SLURM_JWT`` in
its environment). It is run with an argv list, never through a shell, and every value that came
from Slurm or a user (node names, job ids, reasons) is checked before it becomes an argument, so
a hostile name cannot add a second ``key=value`` to the command.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Mapping, Sequence

from .auth import JwtAuth
from .errors import (
    InvalidJobId,
    InvalidNodeName,
    JobAlreadyDone,
    NodesBusy,
    PartitionConfigUnavailable,
    ScontrolError,
    SlurmError,
    SlurmUnavailable,
)

__all__ = ["ScontrolCli"]

log = logging.getLogger(__name__)

_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_JOB_ID = re.compile(r"^[0-9]{1,12}(_[0-9]{1,12})?$")
_STATES = frozenset({"DRAIN", "DOWN", "RESUME", "UNDRAIN", "IDLE", "FUTURE"})


def _node(name: str) -> str:
    if not _NODE_NAME.match(name):
        raise ValueError(f"refusing node name {name!r} for scontrol")
    return name


def _job(job_id: int | str) -> str:
    text = str(job_id)
    if not _JOB_ID.match(text):
        raise ValueError(f"refusing job id {text!r} for scontrol")
    return text


def _one_line(text: str) -> str:
    # one argv element; scontrol would stop at nothing, but keep logs and `sinfo -R` single-line
    return " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())[:256]


def _reason(reason: str) -> str:
    return _one_line(reason) or "k8s-bridge"


class ScontrolCli:
    """Runs ``scontrol`` as a subprocess with the bridge's JWT; raises the client's typed errors.

    ``argv_prefix`` wraps the command (for example ``["chroot", "/srv/trixie"]`` in the sandbox);
    ``env`` adds variables such as ``SLURM_CONF``. The token goes only into the child's
    environment, never into argv (which other users can read in /proc).
    """

    def __init__(
        self,
        *,
        auth: JwtAuth | None,
        scontrol: str = "scontrol",
        argv_prefix: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.auth = auth
        self.scontrol = scontrol
        self.argv_prefix = tuple(argv_prefix)
        self.env = dict(env or {})
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"ScontrolCli(scontrol={self.scontrol!r}, argv_prefix={self.argv_prefix!r})"

    async def run(self, *args: str) -> str:
        """Run ``scontrol <args>``; the output on success, a typed SlurmError otherwise."""
        argv = [*self.argv_prefix, self.scontrol, *args]
        env = {k: v for k, v in os.environ.items() if k != "SLURM_JWT"}
        env.update(self.env)
        if self.auth is not None:
            env.update(await self.auth.env())
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
            )
        except OSError as exc:
            raise SlurmUnavailable(f"cannot run {self.scontrol}: {exc.strerror or exc}") from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self.timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise SlurmUnavailable(
                f"scontrol {args[0] if args else ''} timed out after {self.timeout}s"
            ) from None
        stdout = out.decode(errors="replace").strip()
        stderr = err.decode(errors="replace").strip()
        log.debug("scontrol %s -> %s", args[:2], proc.returncode)
        if proc.returncode != 0:
            raise _classify(stderr or stdout, proc.returncode)
        return stdout

    async def requeue_hold(self, job_id: int | str) -> None:
        await self.run("requeuehold", _job(job_id))

    async def hold(self, job_id: int | str) -> None:
        await self.run("hold", _job(job_id))

    async def release(self, job_id: int | str) -> None:
        await self.run("release", _job(job_id))

    async def set_admin_comment(self, job_id: int | str, text: str) -> None:
        """Write the job's admin comment (v0.0.38 cannot over REST). One argv element, one line."""
        await self.run("update", f"JobId={_job(job_id)}", f"AdminComment={_one_line(text)}")

    async def set_node_state(self, name: str, state: str, *, reason: str | None = None) -> None:
        state = state.upper()
        if state not in _STATES:
            raise ValueError(f"unsupported node state {state!r}")
        args = ["update", f"nodename={_node(name)}", f"state={state}"]
        if reason is not None or state in ("DRAIN", "DOWN"):
            args.append(f"reason={_reason(reason or '')}")
        await self.run(*args)

    async def delete_node(self, name: str) -> None:
        await self.run("delete", f"nodename={_node(name)}")

    async def create_future_node(self, name: str) -> None:
        """Create ``name`` as a FUTURE node (dynamic, never scheduled): a name a job's required node
        list can resolve again. Only for a name slurmctld does not know: 24.11.5 answers a create of
        an existing name "Node already exists" and loses that node from its name lookup."""
        await self.run("create", f"NodeName={_node(name)}", "State=FUTURE")


def _classify(message: str, returncode: int | None) -> SlurmError:
    low = message.lower()
    kind: type[SlurmError] = ScontrolError
    if "busy" in low:
        kind = NodesBusy
    elif "invalid node name" in low:
        kind = InvalidNodeName
    elif "invalid job id" in low:
        kind = InvalidJobId
    elif "partition configuration not available" in low:
        kind = PartitionConfigUnavailable  # 2015 on a job update: applied (see its docstring)
    elif "job has already finished" in low or "already completing or completed" in low:
        kind = JobAlreadyDone  # an update of a job cancelled since the poll (2084, 2021)
    return kind(message or f"scontrol exited {returncode}", source="scontrol")
