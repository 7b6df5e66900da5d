"""What a dead process left of the local stack is found and removed, and nothing else is.

The decisions are pure (which processes are provably a dead owner's, which /30 is free, which pod
directory may go) and tested as such. Owner records are tested with real processes, killed with
SIGKILL as a crash would; namespace claims with real locks, the namespaces themselves being files under
a temporary ``NETNS_DIR`` and ``ip`` a fake (real namespaces: ``tests/integration/test_leftovers.py``).
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from bridge.sandbox import netns, owners
from bridge.sandbox.netns import (
    NamespaceBusyError,
    NamespaceHeldError,
    choose_subnet,
    claim_path,
    create_namespace,
    reclaim_namespaces,
    remove_namespace,
)
from bridge.sandbox.owners import (
    OWNER_ENV,
    OwnerRecord,
    ProcessInfo,
    SelfOwnedError,
    hold,
    kill_owned,
    owned,
    reclaim_owners,
    start_time,
)
from bridge.sandbox.processes import ProcessGroup, wait_until
from bridge.sandbox.runner import NETNS_FILE, pod_dir_removable, prune_pod_dirs

REPO = Path(__file__).resolve().parents[3]


def running(pid: int, started: int) -> bool:
    """Still the very process seen (same start time), and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and start_time(pid) == started


def info(
    pid: int, *, ppid: int = 1, session: int | None = None, start: int = 100, owner: str | None = None
) -> ProcessInfo:
    return ProcessInfo(
        pid=pid, ppid=ppid, session=pid if session is None else session, start=start, owner=owner
    )


# ---------------------------------------------------------------------------------------------------
# Which processes are a dead owner's (pure).
# ---------------------------------------------------------------------------------------------------


class TestOwnedProcesses:
    def test_a_recorded_daemon_and_its_descendants(self) -> None:
        snapshot = {p.pid: p for p in [info(10), info(11, ppid=10, start=101), info(12, ppid=11, start=105)]}
        assert owned(snapshot, roots=[(10, 100)], token="t") == {10: 100, 11: 101, 12: 105}

    def test_a_pid_reused_by_another_process_is_not_the_owners_nor_are_its_children(self) -> None:
        # pid 10 was recorded with start 100; the process now at pid 10 started at 500
        snapshot = {p.pid: p for p in [info(10, start=500), info(11, ppid=10, start=501)]}
        assert owned(snapshot, roots=[(10, 100)], token="t") == {}

    def test_the_session_of_a_live_daemon_is_the_owners(self) -> None:
        # 12 is in 10's session though its parent (11) has exited and it was reparented to init
        snapshot = {p.pid: p for p in [info(10), info(12, ppid=1, session=10, start=300)]}
        assert owned(snapshot, roots=[(10, 100)], token="t") == {10: 100, 12: 300}

    def test_the_session_of_a_dead_daemon_is_not_provably_the_owners(self) -> None:
        # 10 is gone: session 10 may be another process's by now (pid 10 reused, its session left)
        snapshot = {p.pid: p for p in [info(12, ppid=1, session=10, start=300)]}
        assert owned(snapshot, roots=[(10, 100)], token="t") == {}

    def test_a_process_carrying_the_owners_token_is_the_owners_and_others_tokens_are_not(self) -> None:
        snapshot = {p.pid: p for p in [info(20, owner="mine"), info(21, owner="another"), info(22)]}
        assert owned(snapshot, roots=[], token="mine") == {20: 100}

    def test_a_child_older_than_its_parent_is_not_the_parents(self) -> None:
        # a stale parent pid: the pid was the parent's only after the child began
        snapshot = {p.pid: p for p in [info(10, start=100), info(11, ppid=10, start=50)]}
        assert owned(snapshot, roots=[(10, 100)], token="t") == {10: 100}

    def test_init_is_never_the_owners(self) -> None:
        snapshot = {p.pid: p for p in [info(1, owner="t"), info(10, owner="t")]}
        assert owned(snapshot, roots=[(1, 100)], token="t") == {10: 100}


# ---------------------------------------------------------------------------------------------------
# Owner records, with real processes.
# ---------------------------------------------------------------------------------------------------

# The owner: starts a daemon through a ProcessGroup, which starts (1) a child in a session of its own
# and (2) through a short-lived intermediate, an orphan in a session of its own (only the owner's
# token in its environment tells it apart); prints their pids, then waits to be killed.
OWNER = textwrap.dedent(
    """
    import json, subprocess, sys, time
    from pathlib import Path
    from bridge.sandbox.processes import ProcessGroup, wait_until
    DAEMON = '''
    import subprocess, sys, time
    escaped = subprocess.Popen(["sleep", "600"], start_new_session=True)
    ORPHAN = (
        "import subprocess as s; "
        "print(s.Popen(['sleep', '600'], start_new_session=True, stdout=s.DEVNULL, stderr=s.DEVNULL).pid)"
    )
    orphan = subprocess.run(
        [sys.executable, "-c", ORPHAN], capture_output=True, text=True, check=True
    ).stdout.strip()
    open(sys.argv[1] + ".tmp", "w").write(f"{escaped.pid} {orphan}")
    __import__("os").rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
    '''
    workdir = Path(sys.argv[1])
    group = ProcessGroup(workdir)
    pids = workdir / "pids"
    daemon = group.start("daemon", [sys.executable, "-c", DAEMON, str(pids)])
    wait_until(pids.exists, timeout=30, what="the daemon's children", process=daemon)
    escaped, orphan = pids.read_text().split()
    print(json.dumps({"owner": __import__("os").getpid(), "daemon": daemon.pid, "escaped": int(escaped),
                      "orphan": int(orphan)}), flush=True)
    time.sleep(600)
    """
)


def owners_root(run_dir: Path) -> Path:
    return run_dir / "owners"


class TestOwnerRecords:
    def test_what_a_killed_owner_left_is_killed_by_the_next_reclaim(
        self, tmp_path: Path, private_run_dir: Path
    ) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        pids: dict[str, tuple[int, int]] = {}
        try:
            with subprocess.Popen(
                [sys.executable, "-c", OWNER, str(tmp_path)], stdout=subprocess.PIPE, env=env
            ) as owner:
                try:
                    assert owner.stdout is not None
                    seen = json.loads(owner.stdout.readline())
                    for name in ("daemon", "escaped", "orphan"):
                        pids[name] = (seen[name], start_time(seen[name]) or 0)
                finally:
                    owner.kill()  # a crash: nothing of the owner's clean-up runs
            assert all(running(*pid) for pid in pids.values()), "the leak: they outlive their owner"
            (record,) = reclaim_owners(root=owners_root(private_run_dir))
            assert record.owner_pid == seen["owner"]
            assert set(record.killed) >= {pid for pid, _ in pids.values()}
            assert not [name for name, pid in pids.items() if running(*pid)]
            assert list(owners_root(private_run_dir).iterdir()) == [], "the record is gone with them"
        finally:  # whatever failed, nothing of the test's own stays behind
            reclaim_owners(root=owners_root(private_run_dir))
            for pid, started in pids.values():
                if running(pid, started):
                    os.kill(pid, signal.SIGKILL)

    def test_a_live_owners_record_is_left_alone(
        self, private_run_dir: Path, sleeper: subprocess.Popen[bytes]
    ) -> None:
        record = OwnerRecord(root=owners_root(private_run_dir))
        try:
            record.add_process(sleeper.pid)
            assert reclaim_owners(root=owners_root(private_run_dir)) == []
            assert sleeper.poll() is None
        finally:
            record.close()

    def test_a_pid_recorded_with_another_start_time_is_not_killed(
        self, private_run_dir: Path, sleeper: subprocess.Popen[bytes]
    ) -> None:
        record = OwnerRecord(root=owners_root(private_run_dir))
        started = start_time(sleeper.pid)
        assert started is not None
        (record.directory / f"p{sleeper.pid}-{started + 1}").touch()  # the pid's earlier process
        record.forget_after_fork()  # the lock is given up as by a death
        (reclaimed,) = reclaim_owners(root=owners_root(private_run_dir))
        assert reclaimed.killed == []
        assert sleeper.poll() is None

    def test_a_record_of_an_earlier_boot_kills_nothing(
        self, private_run_dir: Path, sleeper: subprocess.Popen[bytes]
    ) -> None:
        record = OwnerRecord(root=owners_root(private_run_dir))
        record.add_process(sleeper.pid)
        record.lock_path.write_text(f"{os.getpid()} another-boot\n")
        record.forget_after_fork()
        (reclaimed,) = reclaim_owners(root=owners_root(private_run_dir))
        assert reclaimed.killed == []
        assert sleeper.poll() is None
        assert list(owners_root(private_run_dir).iterdir()) == []

    def test_a_dead_owners_directories_go_and_kept_ones_stay(
        self, tmp_path: Path, private_run_dir: Path
    ) -> None:
        made, kept = tmp_path / "made", tmp_path / "kept"
        for folder in (made, kept):
            (folder / "sub").mkdir(parents=True)
        record = OwnerRecord(root=owners_root(private_run_dir))
        record.add_directory(made)
        record.add_directory(kept, delete=False)
        record.forget_after_fork()
        (reclaimed,) = reclaim_owners(root=owners_root(private_run_dir))
        assert set(reclaimed.directories) == {made.resolve(), kept.resolve()}
        assert not made.exists()
        assert (kept / "sub").is_dir()

    def test_a_reclaimer_that_is_itself_the_owners_touches_nothing(
        self, monkeypatch: pytest.MonkeyPatch, sleeper: subprocess.Popen[bytes]
    ) -> None:
        started = start_time(sleeper.pid)
        assert started is not None
        monkeypatch.setattr(os, "getpid", lambda: sleeper.pid)  # "we" are the recorded daemon
        with pytest.raises(SelfOwnedError):
            kill_owned("t", [(sleeper.pid, started)], timeout=1.0)
        monkeypatch.undo()
        assert running(sleeper.pid, started)
        state = Path(f"/proc/{sleeper.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state != "T", "not left stopped"

    def test_a_clean_owner_leaves_no_record(self, tmp_path: Path, private_run_dir: Path) -> None:
        record = OwnerRecord(root=owners_root(private_run_dir))
        entry = record.add_directory(tmp_path)
        record.discard(entry)
        record.close()
        assert list(owners_root(private_run_dir).iterdir()) == []


class TestProcessGroupRecords:
    def test_a_daemon_is_recorded_while_it_runs_and_carries_its_owners_token(self, tmp_path: Path) -> None:
        with ProcessGroup(tmp_path) as group:
            daemon = group.start("env", ["sh", "-c", f'echo "${OWNER_ENV}"; exec sleep 600'])
            record = owners.current()
            assert f"p{daemon.pid}-{start_time(daemon.pid)}" in record.entries()
            wait_until(
                lambda: daemon.log_path.read_text().strip() != "", timeout=10, what="output", process=daemon
            )
            assert daemon.log_path.read_text().strip() == record.token
        assert not [entry for entry in record.entries() if entry.startswith(f"p{daemon.pid}-")]

    def test_unmarked_daemons_get_exactly_the_environment_given(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv(OWNER_ENV, "inherited")
        with ProcessGroup(tmp_path, mark_environment=False) as group:
            daemon = group.start("env", ["sh", "-c", f'echo "[${OWNER_ENV}]"'])
            daemon.popen.wait()
        assert daemon.log_path.read_text().strip() == "[]"


# ---------------------------------------------------------------------------------------------------
# Subnets (pure) and their allocation under a lock.
# ---------------------------------------------------------------------------------------------------


class TestChoosingASubnet:
    POOL = ipaddress.IPv4Network("10.213.0.0/28")  # four /30

    def test_a_subnet_holding_a_used_address_is_never_chosen(self) -> None:
        used = ["10.213.0.1", "10.213.0.6", "10.213.0.11"]  # in the first three /30
        assert choose_subnet(used, pool=self.POOL, randbelow=lambda n: 0) == ipaddress.IPv4Network(
            "10.213.0.12/30"
        )

    def test_after_unlucky_random_picks_the_first_free_one_is_taken(self) -> None:
        used = ["10.213.0.1", "10.213.0.13"]
        chosen = choose_subnet(
            used, pool=self.POOL, attempts=5, randbelow=lambda n: 3
        )  # always the used last
        assert chosen == ipaddress.IPv4Network("10.213.0.4/30")

    def test_none_when_every_subnet_is_used(self) -> None:
        used = ["10.213.0.2", "10.213.0.5", "10.213.0.9", "10.213.0.14"]
        assert choose_subnet(used, pool=self.POOL) is None

    def test_addresses_outside_the_pool_and_garbage_are_ignored(self) -> None:
        chosen = choose_subnet(["127.0.0.1", "fe80::1", "x"], pool=self.POOL, randbelow=lambda n: 0)
        assert chosen == ipaddress.IPv4Network("10.213.0.0/30")


class FakeHost:
    """``ip`` on a pretend host: namespaces are files under ``netns_dir``, addresses a set."""

    def __init__(self, netns_dir: Path) -> None:
        self.netns_dir = netns_dir
        self.addresses: set[str] = set()
        self.commands: list[tuple[str, ...]] = []
        self.lock = threading.Lock()
        self.on_link_add: Callable[[], None] = lambda: None

    def ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        with self.lock:
            self.commands.append(args)
        if args[:2] == ("netns", "add"):
            (self.netns_dir / args[2]).touch()
        elif args[:2] == ("netns", "del"):
            (self.netns_dir / args[2]).unlink(missing_ok=True)
        elif args[:2] == ("link", "add"):
            self.on_link_add()
        elif args[:2] == ("addr", "add") and "-n" not in args:
            with self.lock:
                self.addresses.add(args[2].split("/")[0])
        return subprocess.CompletedProcess(["ip", *args], 0, "", "")

    def used(self) -> set[str]:
        with self.lock:
            return set(self.addresses)


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHost:
    fake = FakeHost(tmp_path / "netns")
    fake.netns_dir.mkdir()
    monkeypatch.setattr(netns, "NETNS_DIR", fake.netns_dir)
    monkeypatch.setattr(netns, "_ip", fake.ip)
    monkeypatch.setattr(netns, "_used_host_addresses", fake.used)
    monkeypatch.setattr(netns, "_enable_forwarding", lambda: None)
    monkeypatch.setattr(netns, "namespace_pids", lambda name: [])
    return fake


class TestSubnetAllocation:
    def test_two_namespaces_made_at_once_never_share_a_subnet(self, host: FakeHost) -> None:
        # The first creation waits inside its allocation until the second has chosen its subnet (or
        # for a second at most): were the choice not atomic, both would choose the first free /30.
        second_chose = threading.Event()
        first_inside = threading.Event()

        def first_waits() -> None:
            if not first_inside.is_set():
                first_inside.set()
                second_chose.wait(timeout=1.0)

        host.on_link_add = first_waits
        made: dict[str, netns.NetworkNamespace] = {}

        def make(token: str) -> None:
            made[token] = create_namespace(token=token, attempts=0)  # no random pick: the first free
            if token == "second":
                second_chose.set()

        first = threading.Thread(target=make, args=("first",))
        first.start()
        first_inside.wait()
        make("second")
        first.join()
        assert made["first"].gateway != made["second"].gateway
        assert ipaddress.IPv4Network(f"{made['first'].gateway}/30", strict=False) != ipaddress.IPv4Network(
            f"{made['second'].gateway}/30", strict=False
        )


# ---------------------------------------------------------------------------------------------------
# Namespace claims.
# ---------------------------------------------------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import sys, time
    from bridge.sandbox.owners import hold
    from pathlib import Path
    fd = hold(Path(sys.argv[1]), content="holder\\n")
    print("held" if fd is not None else "busy", flush=True)
    time.sleep(600)
    """
)


def hold_then_die(path: Path) -> None:
    """A process takes the claim ``path``, then is SIGKILLed: the claim file stays, unlocked."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True, env=env
    ) as holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "held"
        finally:
            holder.kill()


class TestNamespaceClaims:
    def test_a_made_namespace_is_claimed_until_removed(self, host: FakeHost) -> None:
        made = create_namespace(token="claimed1")
        assert hold(claim_path(made.name)) is None, "held by this process while it exists"
        remove_namespace(made.name)
        assert not claim_path(made.name).exists()
        assert not (host.netns_dir / made.name).exists()

    def test_a_name_a_live_process_holds_is_neither_made_nor_removed(self, host: FakeHost) -> None:
        name = "kb-taken1"
        (host.netns_dir / name).touch()
        other = hold(claim_path(name), content="4242\n")  # another live holder (a lock of its own)
        assert other is not None
        try:
            with pytest.raises(NamespaceHeldError, match="4242"):
                create_namespace(token="taken1")
            with pytest.raises(NamespaceHeldError):
                remove_namespace(name)
            assert reclaim_namespaces() == {}
            assert (host.netns_dir / name).exists()
            assert not [c for c in host.commands if name in c]
        finally:
            os.close(other)

    def test_what_a_dead_creator_left_is_reclaimed(self, host: FakeHost) -> None:
        name = "kb-leftover1"
        hold_then_die(claim_path(name))
        (host.netns_dir / name).touch()
        assert reclaim_namespaces() == {name: []}
        assert not (host.netns_dir / name).exists()
        assert ("netns", "del", name) in host.commands
        assert not claim_path(name).exists()

    def test_a_leftover_of_the_name_is_replaced_when_made_again(self, host: FakeHost) -> None:
        name = "kb-again1"
        hold_then_die(claim_path(name))
        (host.netns_dir / name).touch()
        made = create_namespace(token="again1")
        deleted = host.commands.index(("netns", "del", name))
        assert host.commands.index(("netns", "add", name)) > deleted
        remove_namespace(made.name)

    def test_a_busy_leftover_keeps_its_claim_file_for_a_retry(
        self, host: FakeHost, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        name = "kb-busy1"
        hold_then_die(claim_path(name))
        (host.netns_dir / name).touch()
        monkeypatch.setattr(netns, "kill_processes", lambda name, timeout: [])
        monkeypatch.setattr(netns, "namespace_pids", lambda name: [4242])
        assert reclaim_namespaces(timeout=0.0) == {}
        assert claim_path(name).exists()
        assert (host.netns_dir / name).exists()
        fd = hold(claim_path(name))  # and not held by anyone: the next reclaim takes it
        assert fd is not None
        os.close(fd)

    def test_busy_is_still_a_namespace_busy_error_for_callers(self) -> None:
        assert issubclass(NamespaceHeldError, NamespaceBusyError)


# ---------------------------------------------------------------------------------------------------
# Pod directories of the process runner.
# ---------------------------------------------------------------------------------------------------


class TestPodDirectories:
    @pytest.mark.parametrize(
        ("recorded", "in_use", "exists", "removable"),
        [
            (None, True, False, True),  # no namespace ever begun: nothing to find later
            ("kb-a", False, False, True),  # namespace gone, pod done
            ("kb-a", False, True, False),  # namespace still there: the record is how it is found
            ("kb-a", True, False, False),  # maybe still being made, or kept to retry
        ],
    )
    def test_removable(self, recorded: str | None, in_use: bool, exists: bool, removable: bool) -> None:
        assert pod_dir_removable(recorded=recorded, in_use=in_use, exists=exists) is removable

    def test_prune_keeps_the_records_of_namespaces_still_there(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr("bridge.sandbox.runner.NETNS_DIR", tmp_path / "netns")
        (tmp_path / "netns").mkdir()
        (tmp_path / "netns" / "kb-left").touch()
        for uid, name in (("gone", "kb-gone"), ("left", "kb-left"), ("busy", "kb-busy"), ("bare", None)):
            (tmp_path / "work" / "pods" / uid).mkdir(parents=True)
            if name:
                (tmp_path / "work" / "pods" / uid / NETNS_FILE).write_text(name + "\n")
        pruned = prune_pod_dirs(tmp_path / "work", in_use={"busy": True})
        assert sorted(pruned) == ["bare", "gone"]
        assert sorted(p.name for p in (tmp_path / "work" / "pods").iterdir()) == ["busy", "left"]

    def test_prune_of_a_workdir_without_pods(self, tmp_path: Path) -> None:
        assert prune_pod_dirs(tmp_path) == []
