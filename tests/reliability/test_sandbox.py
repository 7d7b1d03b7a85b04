"""Untrusted code: what a rank process can reach, shown by workloads that try (workloads are user
code that runs in the ranks like candidates, and no static checker reads them), by the sandbox's
launcher run directly with the system Python as an unprivileged user, and by a whole worker run
as an unprivileged user.

Each test names the boundary it shows holding; ``docs/reliability.md`` has the table.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pytest

from reliability_helpers import ROOT
from kloom.static_check import check_candidate
from services.worker.evaluator import EvalSettings, Evaluator, sandbox, sandbox_view

PLATFORM = sandbox.platform()
needs_root = pytest.mark.skipif(not PLATFORM.root, reason="namespaces and cgroups for pools need root here")
needs_pids_cgroup = pytest.mark.skipif("pids" not in PLATFORM.cgroups, reason="no writable pids cgroup here")
needs_view = pytest.mark.skipif(not (PLATFORM.root and PLATFORM.view and PLATFORM.pidns), reason="needs root, open_tree and pid namespaces")
SYSTEM_PYTHON = "/usr/bin/python3"
needs_system_python = pytest.mark.skipif(
    not (PLATFORM.root and os.access(SYSTEM_PYTHON, os.X_OK)), reason="needs root and a system Python an unprivileged user can run"
)
NOBODY = pwd.getpwnam("nobody")
#: Recognisable fake credentials set in the pool's own environment.
SECRETS = {
    "KLOOM_DATABASE_URL": "postgresql://kloom:pw-SANDBOX-7f3a@db/kloom",
    "KLOOM_ADMIN_KEY": "kl_admin-SANDBOX-91c2",
    "OPENAI_API_KEY": "sk-SANDBOX-openai-55e1",
    "ANTHROPIC_API_KEY": "sk-ant-SANDBOX-0b7d",
    "TORCH_HUB_TOKEN": "hf-SANDBOX-token-3c9e",
    "DATABASE_URL": "postgresql://app:pw-SANDBOX-a11c@db/app",
}

PROBE_HEADER = '''
import ctypes, json, os, resource, socket, stat, sys, time
import torch
import torch.distributed as dist
import torch.nn as nn

WORLD_SIZES = [2]
REPORT = "report"


class Model(nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    return [torch.zeros(4)]


def attempt(fn):
    try:
        return "allowed: " + repr(fn())[:200]
    except BaseException as exc:
        return f"refused: {{type(exc).__name__}}: {{exc}}"[:300]


def report(data):
    # The rank's compiler caches are the one writable place that outlives its pool.
    folder = os.path.dirname(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    with open(os.path.join(folder, f"{{REPORT}}.{{dist.get_rank()}}"), "w") as fh:
        json.dump(data, fh)
    raise RuntimeError("probe finished")
'''

REACH = PROBE_HEADER + '''

def get_init_inputs():
    libc = ctypes.CDLL(None, use_errno=True)

    def join_host_network():
        fd = os.open("/proc/1/ns/net", os.O_RDONLY)
        if libc.setns(fd, 0x40000000) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))

    def tcp(port):
        socket.create_connection(("127.0.0.1", port), timeout=3).close()

    def unix(path):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(3)
        s.connect(path)
        s.close()

    def write(path):
        with open(path, "a") as fh:
            fh.write("probe")
        return "written"

    def processes():
        return sorted(int(p) for p in os.listdir("/proc") if p.isdigit())

    def servers(known):
        # A rank's own pool's processes were forked from the server too and show its command
        # line: only those of another user or outside this pool's ranks count.
        found = {{known}}
        own = {{os.getpid(), os.getppid()}}
        for pid in processes():
            try:
                if b"fork_server" in open(f"/proc/{{pid}}/cmdline", "rb").read() and os.stat(f"/proc/{{pid}}").st_uid != os.getuid():
                    found.add(pid)
            except OSError:
                pass
        return sorted(found - own)

    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cwd = os.getcwd()
    open(os.path.join(cwd, "scratch"), "w").write("mine")
    open("/dev/shm/probe-shm", "w").write("shared")
    report({{
        "uid": os.getuid(),
        "environ": dict(os.environ),
        "proc_environ": open("/proc/self/environ", "rb").read().decode("utf-8", "replace"),
        "cap_eff": int(status["CapEff"].strip(), 16),
        "cap_prm": int(status["CapPrm"].strip(), 16),
        # CUDA needs a writable /proc; the kernel's settings in it stay read-only (checked by the
        # mount's flags: writing a sysctl to see would change the host's if the sandbox failed).
        "proc_readonly": bool(os.statvfs("/proc").f_flag & os.ST_RDONLY),
        "proc_sys_readonly": bool(os.statvfs("/proc/sys").f_flag & os.ST_RDONLY),
        "no_new_privs": status["NoNewPrivs"].strip(),
        "cwd": cwd,
        "cwd_mode": oct(stat.S_IMODE(os.stat(cwd).st_mode)),
        "interfaces": [name for _, name in socket.if_nameindex()],
        "tcp_outside": attempt(lambda: tcp({outside_port})),
        "tcp_postgres": attempt(lambda: tcp(5432)),
        "unix_postgres": attempt(lambda: unix("/var/run/postgresql/.s.PGSQL.5432")),
        "pool_environ": attempt(lambda: len(open(f"/proc/{pool_pid}/environ", "rb").read())),
        # The fork server every rank is forked from (patched, it would patch every later rank):
        # by its pid, and by whatever in this rank's /proc looks like it.
        "server_memory": [attempt(lambda: open(f"/proc/{{pid}}/mem", "r+b").close()) for pid in servers({server_pid})],
        "server_environ": [attempt(lambda: len(open(f"/proc/{{pid}}/environ", "rb").read())) for pid in servers({server_pid})],
        "raise_open_files": attempt(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (hard * 2, hard * 2))),
        "write_kloom_code": attempt(lambda: write({code_file!r})),
        "write_etc": attempt(lambda: write("/etc/kloom-probe")),
        "write_root": attempt(lambda: write("/kloom-probe")),
        "leave_cgroup": attempt(lambda: open("/sys/fs/cgroup/pids/cgroup.procs", "w").write(str(os.getpid()))),
        "join_host_network": attempt(join_host_network),
        "hidden_listing": attempt(lambda: os.listdir({hidden!r})),
        "hidden_secret": attempt(lambda: open({secret!r}).read()),
        "hidden_write": attempt(lambda: write({secret!r})),
        "tmp_listing": sorted(os.listdir("/tmp")),
        "shm_listing": sorted(os.listdir("/dev/shm")),
        "processes": processes(),
        "kill_everything": attempt(lambda: os.kill(-1, 0)),
        "home_listing": attempt(lambda: os.listdir(os.path.expanduser("~root"))),
    }})
'''

FORKS = PROBE_HEADER + '''

def get_init_inputs():
    children, error = [], ""
    while len(children) < 5000:
        try:
            pid = os.fork()
        except OSError as exc:
            error = f"{{type(exc).__name__}}: {{exc}}"
            break
        if pid == 0:
            try:
                os.setsid()  # out of the rank's process group: killing the group misses it
                time.sleep(600)
            finally:
                os._exit(0)
        children.append(pid)
    report({{"children": children, "error": error}})
'''

OPEN_FILES = PROBE_HEADER + '''

def get_init_inputs():
    handles, error = [], ""
    while len(handles) < 100000:
        try:
            handles.append(open(os.devnull))
        except OSError as exc:
            error = f"{{type(exc).__name__}}: {{exc}}"
            break
    opened = len(handles)
    for handle in handles:  # the report needs a descriptor
        handle.close()
    report({{"opened": opened, "error": error}})
'''

MEMORY = PROBE_HEADER + '''

def get_init_inputs():
    blocks, error = [], ""
    while len(blocks) < 1000:
        try:
            blocks.append(bytearray(64 << 20))
        except MemoryError as exc:
            error = f"MemoryError: {{exc}}"
            break
    report({{"allocated": 64 * len(blocks) << 20, "error": error}})
'''

SPINS = PROBE_HEADER + '''

def get_init_inputs():
    while True:
        pass
'''


WRITES = PROBE_HEADER + '''

def get_init_inputs():
    import time
    place, chunk = "{place}", b"x" * (1 << 20)
    if place == "output":  # printed: the rank's output goes to a file of its pool's directory
        for _ in range(2048):
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
            time.sleep(0.02)
    elif place == "many_files":
        for i in range(100000):
            open(os.path.join(os.getcwd(), f"f{{dist.get_rank()}}.{{i}}"), "w").close()
    else:
        folder = {{"cwd": os.getcwd(), "cache": os.environ["TORCHINDUCTOR_CACHE_DIR"], "shm": "/dev/shm"}}[place]
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"fill.{{dist.get_rank()}}"), "wb") as fh:
            for _ in range(2048):
                fh.write(chunk)
                fh.flush()
                time.sleep(0.02)
    return []
'''


def _settings(**overrides) -> EvalSettings:
    return EvalSettings.for_device("cpu", shapes="ci", call_timeout_s=20.0, timing_budget_s=0.1, min_iters=3, **overrides)


def _service_settings(tmp_path: Path, **overrides) -> EvalSettings:
    """As the service's worker runs ranks: an unprivileged user, the temporary directories
    covered, the service's data (here a directory holding a fake key) hidden."""
    return sandbox.for_service(_settings(hidden_paths=[str(tmp_path / "data")], private_tmp=True,
                                         readable_paths=[str(tmp_path / "job")], **overrides))


@dataclass
class Probed:
    result: object
    reports: list[dict]
    enforced: dict[str, str]
    #: The pool's pid namespace (``pid:[inode]``), or "" without one.
    pid_namespace: str


def _probe(tmp_path: Path, template: str, settings: EvalSettings, **fields) -> Probed:
    """Run ``template`` as a workload's reference on 2 ranks: the result, the ranks' reports, and
    what the pool's sandbox says it enforced."""
    job = tmp_path / "job"
    job.mkdir(exist_ok=True)
    workload = job / "probe.py"
    settings = replace(settings, cache_scope=f"probe-{tmp_path.name}")
    with Evaluator("cpu", settings) as evaluator:
        isolation = evaluator.pool(2).reference.isolation  # the warm pool the probe then runs in (the candidate's has the same sandbox)
        enforced, cache = isolation.enforced(), isolation.cache_dir()
        server_pid = isolation.fork_server_pid or os.getpid()
        workload.write_text(textwrap.dedent(template.format(pool_pid=os.getpid(), server_pid=server_pid, **fields)))
        workload.chmod(0o600)
        job.chmod(0o700)
        sandbox.share_with_ranks([str(job), str(workload)], settings)  # as the worker does
        pidns = os.readlink(f"{isolation.ns_dir}/pid_for_children") if "pid" in isolation.namespaces else ""
        result = evaluator.baseline(workload, world_size=2)
    reports = [json.loads(Path(cache, f"report.{rank}").read_text()) for rank in range(2) if Path(cache, f"report.{rank}").exists()]
    shutil.rmtree(cache, ignore_errors=True)
    return Probed(result, reports, enforced, pidns)


@pytest.fixture()
def service_data(tmp_path):
    """A stand-in for the service's data directory: a key file, readable by root only."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "admin_key").write_text("kl_admin-SANDBOX-5e1f\n")
    return {"hidden": str(data), "secret": str(data / "admin_key")}


@pytest.fixture()
def secrets_in_environment(monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)


@pytest.fixture()
def outside_listener():
    """A TCP server on the host's loopback, which ranks must not reach."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server.getsockname()[1]


def test_rank_environment_keeps_no_credentials(secrets_in_environment, tmp_path):
    env = sandbox.rank_environment(str(tmp_path), {})
    assert not set(SECRETS) & set(env)
    assert not [v for v in env.values() if "SANDBOX" in v]
    assert env["HOME"] == env["TMPDIR"] == str(tmp_path)


def test_ranks_keep_triton_autotuning_timings_in_the_compiler_cache(tmp_path):
    """The autotuner's timings are cached beside the compiled kernels (the knob the installed
    Triton reads), so a candidate does not time again what an earlier one timed."""
    env = sandbox.rank_environment(str(tmp_path), {}, cache_dir=str(tmp_path / "cache"))
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "cache" / "triton")
    env.pop("TRITON_INTERPRET", None)  # the interpreter never caches (nothing is timed)
    code = "from triton import knobs; print(knobs.autotuning.cache, knobs.cache.dir)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", env["TRITON_CACHE_DIR"]], out.stderr


def _refused(found: dict, *probes: str) -> None:
    for probe in probes:
        for attempt in found[probe] if isinstance(found[probe], list) else [found[probe]]:
            assert attempt.startswith("refused"), f"{probe}: {found[probe]}"


@needs_view
def test_a_service_rank_reaches_nothing_outside_its_pool(tmp_path, secrets_in_environment, outside_listener, service_data):
    """The service's ranks (the worker is root here, its interpreter under mode-700 /root): an
    unprivileged user, a read-only filesystem with the service's data and the other pools' and
    jobs' files out of sight, their own directory, /dev/shm and caches, their own pool's processes
    and loopback, nothing else."""
    code_file = ROOT / "services" / "worker" / "evaluator" / "compare.py"
    before = code_file.stat().st_mtime_ns
    settings = _service_settings(tmp_path)
    assert settings.rank_user == sandbox.SERVICE_RANK_USER, "the root worker runs ranks as an unprivileged user"
    probed = _probe(tmp_path, REACH, settings, outside_port=outside_listener, code_file=str(code_file), **service_data)
    result, reports, enforced = probed.result, probed.reports, probed.enforced
    assert result.status == "workload_error" and "probe finished" in result.error.message, result.error
    assert len(reports) == 2, result.error
    for rank, found in enumerate(reports):
        leaked = [k for k, v in found["environ"].items() if k in SECRETS or "SANDBOX" in v]
        assert not leaked and "SANDBOX" not in found["proc_environ"], f"rank {rank} sees {leaked}"
        assert found["uid"] == NOBODY.pw_uid and found["cap_eff"] == found["cap_prm"] == 0 and found["no_new_privs"] == "1"
        # Its own private directory; everything else in the temporary directories is covered.
        assert found["cwd"] == found["environ"]["HOME"] == found["environ"]["TMPDIR"] and found["cwd_mode"] == "0o700"
        # Only the way to its own directory, its caches and the job's workload (the worker's files).
        job_top = Path(tmp_path).relative_to("/tmp").parts[0]
        assert set(found["tmp_listing"]) == {os.path.basename(found["cwd"]), f"kloom-cache-{NOBODY.pw_uid}", job_top}, found["tmp_listing"]
        assert found["shm_listing"] == ["probe-shm"], found["shm_listing"]
        # The service's data: gone (it lies in /tmp here; elsewhere an empty, read-only directory).
        assert found["hidden_listing"].startswith("refused: FileNotFoundError"), found["hidden_listing"]
        _refused(found, "hidden_secret", "hidden_write", "write_kloom_code", "write_etc", "write_root")
        # root's home (mode 700 here): only the way to the interpreter, where it lives there.
        home = os.path.expanduser("~root")
        shown = sorted({Path(p).relative_to(home).parts[0] for p in sandbox._code_paths() if p.startswith(home + "/")})
        assert found["home_listing"] == (f"allowed: {shown}" if shown else found["home_listing"]), found["home_listing"]
        assert "Read-only file system" in found["write_etc"]
        # No network but its own loopback: not the host's services, not PostgreSQL's Unix socket.
        assert found["interfaces"] == ["lo"], found["interfaces"]
        _refused(found, "tcp_outside", "tcp_postgres", "unix_postgres", "join_host_network")
        # Its pool's processes only: the pool's reaper, two launchers' ranks; the host's are not there.
        assert len(found["processes"]) <= 4 and os.getpid() not in found["processes"], found["processes"]
        _refused(found, "pool_environ", "leave_cgroup", "raise_open_files", "server_memory", "server_environ")
    assert code_file.stat().st_mtime_ns == before and not Path("/etc/kloom-probe").exists()
    assert Path(service_data["secret"]).read_text() == "kl_admin-SANDBOX-5e1f\n"
    assert enforced["network"].startswith("own namespace") and enforced["user"] == "nobody"
    assert enforced["processes_visible"].startswith("its pool's only") and enforced["filesystem"].startswith("read-only")
    assert service_data["hidden"] in enforced["hidden_paths"] and "/tmp" in enforced["covered_paths"]
    assert f"scope probe-{tmp_path.name}" in enforced["compiler_caches"]
    assert enforced["rank_start"].startswith("forked from a fork server"), enforced["rank_start"]


@needs_view
def test_a_rank_of_a_root_caller_is_read_only_too(tmp_path, service_data, outside_listener):
    """``kloom optimize`` run by root keeps its ranks root (its workloads may be anywhere root can
    read), without capabilities: the filesystem is read-only to them all the same, /proc is the
    pool's own, and the hidden paths are hidden."""
    code_file = ROOT / "services" / "worker" / "evaluator" / "compare.py"
    settings = _settings(hidden_paths=[service_data["hidden"]])
    probed = _probe(tmp_path, REACH, settings, outside_port=outside_listener, code_file=str(code_file), **service_data)
    result, reports, enforced = probed.result, probed.reports, probed.enforced
    assert len(reports) == 2, result.error
    for found in reports:
        assert found["uid"] == 0 and (found["cap_eff"] | found["cap_prm"]) & ~((1 << 14) | (1 << 23)) == 0
        _refused(found, "write_kloom_code", "write_etc", "write_root", "hidden_secret", "hidden_write", "server_memory", "server_environ")
        assert found["hidden_listing"] == "allowed: []"
        assert len(found["processes"]) <= 4, found["processes"]
        assert not found["proc_readonly"] and found["proc_sys_readonly"], found
    assert not Path("/etc/kloom-probe").exists() and enforced["user"] == "root"
    assert enforced["rank_start"].startswith("forked from a fork server"), enforced["rank_start"]


@needs_root
@needs_pids_cgroup
def test_processes_are_capped_per_pool_and_killed_with_it(tmp_path):
    settings = _settings(rank_processes=24)
    probed = _probe(tmp_path, FORKS, settings)
    assert probed.enforced["processes"] == "pids cgroup, 48 per pool"
    forked = probed.reports
    assert forked and all("Resource temporarily unavailable" in r["error"] for r in forked), forked
    # Two ranks (plus their threads, their launchers and the pool's reaper) and their children share the pool's 48.
    assert sum(len(r["children"]) for r in forked) < 48
    # Every child left its process group; the pool's cgroup still found and killed them (the
    # children's pids are those of the pool's pid namespace: look for any process still in it).
    assert probed.pid_namespace
    deadline = time.monotonic() + 5  # SIGKILL takes effect as each process is next scheduled
    while _in_pid_namespace(probed.pid_namespace) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _in_pid_namespace(probed.pid_namespace)
    assert probed.result.status == "workload_error"


@needs_root
def test_open_files_are_capped(tmp_path):
    probed = _probe(tmp_path, OPEN_FILES, _settings(rank_open_files=64))
    assert probed.enforced["open_files"] == "RLIMIT_NOFILE 64"
    assert probed.reports and all(r["opened"] < 64 and "Too many open files" in r["error"] for r in probed.reports), probed.reports


@pytest.mark.parametrize("place", ["output", "cwd", "cache", "shm", "many_files"])
def test_what_ranks_write_is_bounded(tmp_path, place):
    """A workload (or candidate) that prints or writes without end, in any place its view lets
    it write, is stopped within seconds as a resource limit, not left to fill the service's disk
    (or, through /dev/shm, its memory) until a call's deadline; the compiler caches it wrote into
    are emptied."""
    if place == "shm" and not (PLATFORM.root and PLATFORM.view):
        pytest.skip("/dev/shm is the pool's own only in a rank's view")
    settings = _settings(pool_write_bytes=24 << 20, pool_write_files=2000)
    began = time.monotonic()
    probed = _probe(tmp_path, WRITES, settings, place=place)
    took = time.monotonic() - began
    result = probed.result
    assert result.status == "resource_limit", result.summary()
    expected = "files" if place == "many_files" else "MiB to their directories"
    assert expected in result.error.message and "reference" in result.error.message, result.error.message
    assert took < 40, took  # unchecked, the writer alone runs 41 s


@needs_root
def test_memory_is_capped(tmp_path):
    limit = 1536 << 20  # a rank maps about 0.8 GiB once torch and gloo are loaded
    probed = _probe(tmp_path, MEMORY, _settings(rank_memory_bytes=limit))
    assert probed.enforced["memory"].startswith(f"RLIMIT_AS {limit} per rank")
    assert probed.reports and all(r["allocated"] < limit and r["error"].startswith("MemoryError") for r in probed.reports), probed.reports


@needs_root
@pytest.mark.slow
def test_cpu_time_is_capped(tmp_path):
    probed = _probe(tmp_path, SPINS, _settings(rank_cpu_seconds=5))
    assert probed.enforced["cpu_time"] == "RLIMIT_CPU 5 s"
    assert probed.result.status == "crashed" and "SIGXCPU" in probed.result.error.message, probed.result.error


@needs_root
def test_memory_cgroup_kills_what_rlimit_cannot_see(tmp_path):
    """On CUDA there is no RLIMIT_AS (the driver reserves huge address space): the pool's memory
    cgroup caps what the ranks really use, and the kernel kills inside the pool only."""
    if "memory" not in PLATFORM.cgroups:
        pytest.skip("no writable memory cgroup here")
    group = sandbox.PoolCgroup.create({"memory": PLATFORM.cgroups["memory"]}, 0, 256 << 20)
    try:
        proc = _launch(tmp_path, sandbox.Plan(status_fd=-1, cgroups=group.directories),
                       "blocks = [bytearray(64 << 20) for _ in range(16)]; print('survived')")
    finally:
        group.remove()
    assert proc.returncode == -9 and "survived" not in proc.stdout, (proc.returncode, proc.stdout)


@needs_system_python
def test_launcher_runs_a_rank_as_an_unprivileged_user_with_a_process_limit(tmp_path):
    """A root worker's ranks as ``nobody``: no capabilities, RLIMIT_NPROC binding, no privileges
    to regain through set-user-ID programs."""
    plan = sandbox.Plan(status_fd=-1, uid=NOBODY.pw_uid, gid=NOBODY.pw_gid, processes=12)
    proc = _launch(tmp_path, plan, _FORK_AND_STATUS)
    found = json.loads(proc.stdout)
    assert found["uid"] == NOBODY.pw_uid and found["cap_eff"] == 0 and found["no_new_privs"] == "1"
    assert found["forked"] < 12 and "Resource temporarily unavailable" in found["error"], found


@needs_system_python
def test_unprivileged_launchers_share_one_network_namespace(tmp_path):
    """A worker that is not root (the deployed container) still gets a network namespace of the
    pool's own, inside a user namespace: its ranks reach each other over loopback, nothing else."""
    view = asdict(sandbox_view.View(hide=list(sandbox.HIDDEN_PATHS), proc=PLATFORM.pidns))
    namespaces = ["net", "ipc"] + (["pid"] if PLATFORM.pidns else [])
    first = _spawn_launcher(
        tmp_path, sandbox.Plan(status_fd=-1, pool_ns="new", namespaces=namespaces, view=view),
        "import socket, time\ns = socket.socket(); s.bind(('127.0.0.1', 47321)); s.listen(1)\nprint('listening', flush=True)\ntime.sleep(60)",
        user=NOBODY,
    )
    try:
        assert first.stdout.readline().strip() == "listening"
        probe = (
            "import socket, json, os\n"
            "def reach(address, family=socket.AF_INET):\n"
            "    s = socket.socket(family); s.settimeout(3)\n"
            "    try:\n        s.connect(address); return 'reached'\n"
            "    except OSError as exc:\n        return type(exc).__name__\n"
            "print(json.dumps({'pool_peer': reach(('127.0.0.1', 47321)), 'postgres': reach(('127.0.0.1', 5432)),"
            " 'postgres_socket': reach('/var/run/postgresql/.s.PGSQL.5432', socket.AF_UNIX),"
            " 'interfaces': [n for _, n in socket.if_nameindex()], 'uid': os.getuid(),"
            " 'processes': len([p for p in os.listdir('/proc') if p.isdigit()])}))"
        )
        joined = _launch(tmp_path, sandbox.Plan(status_fd=-1, pool_ns=f"/proc/{first.pid}/ns", namespaces=namespaces, view=view), probe, user=NOBODY)
        found = json.loads(joined.stdout)
        processes = found.pop("processes")
        assert found == {"pool_peer": "reached", "postgres": "ConnectionRefusedError",
                         "postgres_socket": "FileNotFoundError", "interfaces": ["lo"], "uid": NOBODY.pw_uid}, found
        if PLATFORM.pidns:  # the reaper, the listener, the probe
            assert processes == 3, processes
        with socket.socket() as host:  # the pool's listener is not on the host's loopback
            host.settimeout(3)
            assert host.connect_ex(("127.0.0.1", 47321)) != 0
    finally:
        first.kill()
        first.wait(10)


@needs_view
def test_read_only_by_remounting_where_mount_setattr_is_missing(tmp_path):
    """Kernels before 5.12 have no mount_setattr: each mount is remounted read-only instead, and
    the writable holes stay writable."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    view = sandbox_view.plan_view(uid=0, gid=0, hide=list(sandbox.HIDDEN_PATHS), scratch=[], readable=[],
                                  writable=[str(scratch)], readonly="remount", cwd=str(scratch))
    code = ("import json, os\n"
            "def write(path):\n"
            "    try:\n        open(path, 'a').close(); return 'written'\n"
            "    except OSError as exc:\n        return exc.strerror\n"
            "print(json.dumps({'etc': write('/etc/kloom-probe'), 'dev_shm': write('/dev/shm/kloom-probe'),"
            " 'scratch': write('scratch-file'), 'cwd': os.getcwd()}))")
    found = json.loads(_launch(tmp_path, sandbox.Plan(status_fd=-1, view=asdict(view)), code).stdout)
    assert found == {"etc": "Read-only file system", "dev_shm": "Read-only file system", "scratch": "written", "cwd": str(scratch)}, found
    assert (scratch / "scratch-file").exists() and not Path("/etc/kloom-probe").exists()


@needs_view
def test_a_hidden_file_reads_empty_and_keeps_its_content(tmp_path):
    """An SQLite file outside the data directory, with its journal: covered by /dev/null."""
    db = tmp_path / "elsewhere.db"
    db.write_text("the keys")
    Path(f"{db}-wal").write_text("the journal")
    view = sandbox_view.plan_view(uid=0, gid=0, hide=[str(db)], scratch=[], readable=[], writable=[])
    code = ("import json\n"
            f"found = {{p: open(p).read() for p in ({str(db)!r}, {str(db) + '-wal'!r})}}\n"
            f"open({str(db)!r}, 'w').write('overwritten')\n"
            "print(json.dumps(found))")
    found = json.loads(_launch(tmp_path, sandbox.Plan(status_fd=-1, view=asdict(view)), code).stdout)
    assert found == {str(db): "", f"{db}-wal": ""}, found
    assert db.read_text() == "the keys" and Path(f"{db}-wal").read_text() == "the journal"


UNPRIVILEGED_WORKER = """
import json, os, sys
sys.path.insert(0, {root!r})
from services.worker.evaluator import EvalSettings, Evaluator, sandbox
settings = EvalSettings.for_device("cpu", shapes="ci", call_timeout_s=30.0, timing_budget_s=0.1, min_iters=3,
                                   hidden_paths=[{hidden!r}], private_tmp=True, readable_paths=[{job!r}], cache_scope="probe")
with Evaluator("cpu", settings) as evaluator:
    isolation = evaluator.pool(2).reference.isolation
    enforced, cache = isolation.enforced(), isolation.cache_dir()
    result = evaluator.baseline({workload!r}, world_size=2)
reports = [json.load(open(os.path.join(cache, f"report.{{r}}"))) for r in range(2) if os.path.exists(os.path.join(cache, f"report.{{r}}"))]
print(json.dumps({{"uid": os.getuid(), "platform": sandbox.platform().__dict__, "enforced": enforced,
                  "error": result.error.message if result.error else "", "reports": reports}}))
"""


@needs_view
@pytest.mark.slow
def test_an_unprivileged_worker_hides_its_data_from_its_ranks(tmp_path, service_data, outside_listener):
    """A worker that is not root (the deployed container's user): its ranks get a user namespace,
    and in it the same view, network and pid namespace as a root worker's. The worker here is run
    as ``nobody`` through the launcher itself, which shows it its interpreter (under mode-700
    /root on this machine) and lets it write /tmp, /dev/shm and /proc (its user namespaces' maps),
    as a host would."""
    job, out = tmp_path / "job", tmp_path / "out"
    job.mkdir()
    out.mkdir()
    workload = job / "probe.py"
    code_file = ROOT / "services" / "worker" / "evaluator" / "compare.py"
    # The worker's fork server is found by the probe in its /proc, if it shows there at all.
    workload.write_text(textwrap.dedent(REACH.format(pool_pid=os.getpid(), server_pid=os.getpid(), outside_port=outside_listener,
                                                     code_file=str(code_file), **service_data)))
    script = job / "worker.py"
    script.write_text(UNPRIVILEGED_WORKER.format(root=str(ROOT), job=str(job), workload=str(workload), **service_data))
    for path in (job, out, tmp_path):
        os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
    os.chmod(Path(service_data["hidden"]), 0o755)  # readable by the worker's own user: its ranks must still not see it
    os.chmod(service_data["secret"], 0o644)
    view = sandbox_view.plan_view(uid=NOBODY.pw_uid, gid=NOBODY.pw_gid, hide=[], scratch=[],
                                  readable=sandbox._code_paths() + [str(job), service_data["hidden"]],
                                  writable=[str(out), "/tmp", "/dev/shm", "/proc"], cwd=str(out))
    plan = sandbox.Plan(status_fd=-1, uid=NOBODY.pw_uid, gid=NOBODY.pw_gid, view=asdict(view))
    read, write = os.pipe()
    plan = replace(plan, status_fd=write, parent=os.getpid())
    env = {"PATH": "/usr/bin:/bin", "KLOOM_CACHE_DIR": str(out), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, sandbox.LAUNCHER, json.dumps(asdict(plan)), "--", sys.executable, str(script)],
                            pass_fds=(write,), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    os.close(write)
    assert sandbox._read_report(read, 30) == "ok"
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr[-3000:]
    found = json.loads(stdout.strip().splitlines()[-1])
    assert found["uid"] == NOBODY.pw_uid and found["platform"]["root"] is False
    assert "probe finished" in found["error"] and len(found["reports"]) == 2, found["error"]
    enforced = found["enforced"]
    assert enforced["network"].startswith("own namespace") and enforced["filesystem"].startswith("read-only"), enforced
    assert enforced["processes_visible"].startswith("its pool's only"), enforced
    assert enforced["rank_start"].startswith("forked from a fork server"), enforced["rank_start"]
    for rank in found["reports"]:
        assert rank["uid"] == NOBODY.pw_uid and rank["cap_eff"] == rank["cap_prm"] == 0
        _refused(rank, "server_memory", "server_environ")
        # The worker's own user could read the data; its ranks do not find it (it lies in /tmp).
        assert rank["hidden_listing"].startswith("refused: FileNotFoundError"), rank["hidden_listing"]
        _refused(rank, "hidden_secret", "hidden_write", "write_etc", "write_kloom_code", "tcp_outside", "tcp_postgres", "unix_postgres")
        assert rank["interfaces"] == ["lo"] and len(rank["processes"]) <= 4, rank
        # Its own directory and the way to the job's workload (its caches are in the worker's KLOOM_CACHE_DIR).
        assert set(rank["tmp_listing"]) == {os.path.basename(rank["cwd"]), Path(tmp_path).relative_to("/tmp").parts[0]}, rank["tmp_listing"]
    assert Path(service_data["secret"]).read_text() == "kl_admin-SANDBOX-5e1f\n"


@pytest.mark.parametrize("call", ["torch.os.fork()", "torch.os.execv('/bin/sh', ['sh'])", "torch.ctypes.CDLL(None)", "torch.sys.modules.clear()"])
def test_static_checker_refuses_stdlib_modules_reached_through_torch(call):
    source = f"import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        {call}\n        return x\n"
    assert check_candidate(source), f"{call} passes the static checker"


_FORK_AND_STATUS = """
import json, os, time
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
forked, error = 0, ""
while forked < 100:
    try:
        pid = os.fork()
    except OSError as exc:
        error = str(exc)
        break
    if pid == 0:
        time.sleep(5)
        os._exit(0)
    forked += 1
print(json.dumps({"uid": os.getuid(), "cap_eff": int(status["CapEff"], 16), "no_new_privs": status["NoNewPrivs"].strip(),
                  "forked": forked, "error": error}))
"""


def _spawn_launcher(tmp_path: Path, plan: sandbox.Plan, code: str, user=None) -> subprocess.Popen:
    """The sandbox's launcher, run by the system Python (readable by any user), starting ``code``."""
    read, write = os.pipe()
    plan = replace(plan, status_fd=write, parent=os.getpid())
    sandbox_file = sandbox.LAUNCHER
    if user:
        # Another user must read the launcher: a checkout under a mode-700 home (/root) hides it.
        readable = Path(tempfile.mkdtemp(prefix="kloom-launcher-"))
        readable.chmod(0o755)
        for module in (sandbox.LAUNCHER, sandbox_view.__file__):  # the launcher and what it imports
            shutil.copyfile(module, readable / Path(module).name)
            os.chmod(readable / Path(module).name, 0o644)
        sandbox_file = str(readable / Path(sandbox.LAUNCHER).name)
    kwargs = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []} if user else {}
    proc = subprocess.Popen(
        [SYSTEM_PYTHON, sandbox_file, json.dumps(asdict(plan)), "--", SYSTEM_PYTHON, "-c", code],
        pass_fds=(write,), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/", env={"PATH": "/usr/bin:/bin"},
        **kwargs,
    )
    os.close(write)
    report = sandbox._read_report(read, 30)
    if user:
        shutil.rmtree(Path(sandbox_file).parent, ignore_errors=True)  # read by the launcher by now
    assert report == "ok", report
    return proc


def _launch(tmp_path: Path, plan: sandbox.Plan, code: str, user=None) -> subprocess.CompletedProcess:
    proc = _spawn_launcher(tmp_path, plan, code, user)
    out, _ = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def _in_pid_namespace(namespace: str) -> list[int]:
    """Host pids of the live processes in the pid namespace ``namespace`` (``pid:[inode]``)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.readlink(f"/proc/{entry}/ns/pid") == namespace:
                with open(f"/proc/{entry}/stat") as fh:
                    if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                        found.append(int(entry))
        except OSError:
            continue
    return found


PROFILED_ATTACK = '''
import os
import torch
import torch.distributed as dist
import torch.nn as nn

WORLD_SIZES = [2]


def _attack():
    results = {{}}
    for name, fn in {{
        "read_secret": lambda: open({secret!r}).read(),
        "write_data": lambda: open(os.path.join({hidden!r}, "profiled-attack"), "w").write("owned"),
        "write_code": lambda: open({code_file!r}, "a").write("# owned"),
    }}.items():
        try:
            results[name] = "allowed: " + repr(fn())[:40]
        except BaseException as exc:
            results[name] = "refused: " + type(exc).__name__
    return results


ATTACKED = _attack()


class Model(nn.Module):
    def forward(self, x):
        y = x * 2
        dist.all_reduce(y)
        return y


def get_inputs():
    return [torch.randn(8, 8)]


def get_init_inputs():
    return []
'''


@needs_view
def test_profiling_runs_workload_code_in_the_ranks_sandbox(tmp_path, service_data):
    """A service job profiles its first correct candidate, which for the reference's copy is the
    uploaded workload's code (and a correct hostile candidate's, for another): the profiler's ranks
    get the evaluator's sandbox, so a workload that is correct and attacks at import reaches none
    of the service's data, and the profile is still made."""
    from services.worker.profiler import ProfileSettings, profile

    code_file = ROOT / "services" / "worker" / "evaluator" / "compare.py"
    before = code_file.stat().st_mtime_ns
    job = tmp_path / "job"
    job.mkdir()
    workload = job / "correct_but_hostile.py"
    workload.write_text(PROFILED_ATTACK.format(code_file=str(code_file), **service_data))
    workload.chmod(0o600)
    job.chmod(0o700)
    settings = _service_settings(tmp_path)
    sandbox.share_with_ranks([str(job), str(workload)], settings)
    result = profile(workload, None, world_size=2, device="cpu", settings=ProfileSettings.for_device("cpu", seed=3, iters=2, warmup_iters=1),
                     sandbox_settings=settings)
    assert result.status == "ok" and result.kernels, result.reason
    assert Path(service_data["secret"]).read_text() == "kl_admin-SANDBOX-5e1f\n"
    assert not (Path(service_data["hidden"]) / "profiled-attack").exists()
    assert code_file.stat().st_mtime_ns == before
