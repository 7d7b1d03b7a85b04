"""Untrusted code: what a rank process can reach, shown by workloads that try (workloads are user
code that runs in the ranks like candidates, and no static checker reads them), and by the
sandbox's launcher run directly with the system Python as an unprivileged user.

Each test names the boundary it shows holding; ``docs/reliability.md`` has the table.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import sys
import textwrap
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from reliability_helpers import ROOT, leftover_pool_cgroups
from services.worker.evaluator import EvalSettings, Evaluator, sandbox
from services.worker.evaluator.static_check import check_candidate

PLATFORM = sandbox.platform()
needs_root = pytest.mark.skipif(not PLATFORM.root, reason="namespaces and cgroups for pools need root here")
needs_pids_cgroup = pytest.mark.skipif("pids" not in PLATFORM.cgroups, reason="no writable pids cgroup here")
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
REPORT = {report!r}


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
    with open(f"{{REPORT}}.{{dist.get_rank()}}", "w") as fh:
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

    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cwd = os.getcwd()
    report({{
        "uid": os.getuid(),
        "environ": dict(os.environ),
        "proc_environ": open("/proc/self/environ", "rb").read().decode("utf-8", "replace"),
        "cap_eff": int(status["CapEff"].strip(), 16),
        "no_new_privs": status["NoNewPrivs"].strip(),
        "cwd": cwd,
        "cwd_mode": oct(stat.S_IMODE(os.stat(cwd).st_mode)),
        "interfaces": [name for _, name in socket.if_nameindex()],
        "tcp_outside": attempt(lambda: tcp({outside_port})),
        "tcp_postgres": attempt(lambda: tcp(5432)),
        "unix_postgres": attempt(lambda: unix("/var/run/postgresql/.s.PGSQL.5432")),
        "parent_environ": attempt(lambda: len(open(f"/proc/{{os.getppid()}}/environ", "rb").read())),
        "raise_open_files": attempt(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (hard * 2, hard * 2))),
        "write_kloom_code": attempt(lambda: open({code_file!r}, "a").close()),
        "leave_cgroup": attempt(lambda: open("/sys/fs/cgroup/pids/cgroup.procs", "w").write(str(os.getpid()))),
        "join_host_network": attempt(join_host_network),
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


def _settings(**overrides) -> EvalSettings:
    return EvalSettings.for_device("cpu", shapes="ci", call_timeout_s=20.0, timing_budget_s=0.1, min_iters=3, **overrides)


def _probe(tmp_path: Path, template: str, settings: EvalSettings, **fields) -> tuple[object, list[dict], dict[str, str]]:
    """Run ``template`` as a workload's reference on 2 ranks: the result, the ranks' reports, and
    what the pool's sandbox says it enforced."""
    workload = tmp_path / "probe.py"
    report = tmp_path / "report.json"
    workload.write_text(textwrap.dedent(template.format(report=str(report), **fields)))
    with Evaluator("cpu", settings) as evaluator:
        enforced = evaluator.pool(2).isolation.enforced()  # the warm pool the probe then runs in
        result = evaluator.baseline(workload, world_size=2)
    reports = [json.loads(Path(f"{report}.{rank}").read_text()) for rank in range(2) if Path(f"{report}.{rank}").exists()]
    return result, reports, enforced


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


@needs_root
def test_a_rank_reaches_nothing_outside_its_pool(tmp_path, secrets_in_environment, outside_listener):
    code_file = ROOT / "services" / "worker" / "evaluator" / "compare.py"
    before = code_file.stat().st_mtime_ns
    result, reports, enforced = _probe(tmp_path, REACH, _settings(), outside_port=outside_listener, code_file=str(code_file))
    assert result.status == "workload_error" and "probe finished" in result.error.message, result.error
    assert len(reports) == 2, result.error
    for rank, found in enumerate(reports):
        leaked = [k for k, v in found["environ"].items() if k in SECRETS or "SANDBOX" in v]
        assert not leaked and "SANDBOX" not in found["proc_environ"], f"rank {rank} sees {leaked}"
        # Its own private directory.
        assert found["cwd"] == found["environ"]["HOME"] == found["environ"]["TMPDIR"] and found["cwd_mode"] == "0o700"
        # No network but its own loopback: not the host's services, not PostgreSQL's Unix socket.
        assert found["interfaces"] == ["lo"], found["interfaces"]
        for probe in ("tcp_outside", "tcp_postgres", "unix_postgres", "join_host_network"):
            assert found[probe].startswith("refused"), f"{probe}: {found[probe]}"
        # No way back out of the limits: the cgroup tree is hidden, raising a limit is refused.
        assert found["leave_cgroup"].startswith("refused") and found["raise_open_files"].startswith("refused")
        # The pool's process is not readable (non-dumpable, and the rank has no CAP_SYS_PTRACE).
        assert found["parent_environ"].startswith("refused"), found["parent_environ"]
        # kloom's code is read-only to a rank that stays root.
        assert "Read-only file system" in found["write_kloom_code"], found["write_kloom_code"]
        assert found["cap_eff"] & ~((1 << 14) | (1 << 23)) == 0 and found["no_new_privs"] == "1"
    assert code_file.stat().st_mtime_ns == before
    assert enforced["network"].startswith("own namespace")


@needs_root
@needs_pids_cgroup
def test_processes_are_capped_per_pool_and_killed_with_it(tmp_path):
    settings = _settings(rank_processes=24)
    result, reports, enforced = _probe(tmp_path, FORKS, settings)
    assert enforced["processes"] == "pids cgroup, 48 per pool"
    forked = [r for r in reports]
    assert forked and all("Resource temporarily unavailable" in r["error"] for r in forked), forked
    # Two ranks (plus their threads) and their children share the pool's 48.
    assert sum(len(r["children"]) for r in forked) < 48
    # Every child left its process group; the pool's cgroup still found and killed them.
    alive = [pid for r in forked for pid in r["children"] if _alive(pid)]
    assert not alive, f"children still running: {alive}"
    assert result.status == "workload_error"


@needs_root
def test_open_files_are_capped(tmp_path):
    result, reports, enforced = _probe(tmp_path, OPEN_FILES, _settings(rank_open_files=64))
    assert enforced["open_files"] == "RLIMIT_NOFILE 64"
    assert reports and all(r["opened"] < 64 and "Too many open files" in r["error"] for r in reports), reports


@needs_root
def test_memory_is_capped(tmp_path):
    limit = 1536 << 20  # a rank maps about 0.8 GiB once torch and gloo are loaded
    result, reports, enforced = _probe(tmp_path, MEMORY, _settings(rank_memory_bytes=limit))
    assert enforced["memory"].startswith(f"RLIMIT_AS {limit} per rank")
    assert reports and all(r["allocated"] < limit and r["error"].startswith("MemoryError") for r in reports), reports


@needs_root
@pytest.mark.slow
def test_cpu_time_is_capped(tmp_path):
    result, reports, enforced = _probe(tmp_path, SPINS, _settings(rank_cpu_seconds=5))
    assert enforced["cpu_time"] == "RLIMIT_CPU 5 s"
    assert result.status == "crashed" and "SIGXCPU" in result.error.message, result.error


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
    first = _spawn_launcher(
        tmp_path, sandbox.Plan(status_fd=-1, netns="new", hide=list(sandbox.HIDDEN_PATHS)),
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
            " 'interfaces': [n for _, n in socket.if_nameindex()], 'uid': os.getuid()}))"
        )
        joined = _launch(tmp_path, sandbox.Plan(status_fd=-1, netns=f"/proc/{first.pid}/ns", hide=list(sandbox.HIDDEN_PATHS)), probe, user=NOBODY)
        found = json.loads(joined.stdout)
        assert found == {"pool_peer": "reached", "postgres": "ConnectionRefusedError",
                         "postgres_socket": "FileNotFoundError", "interfaces": ["lo"], "uid": NOBODY.pw_uid}, found
        with socket.socket() as host:  # the pool's listener is not on the host's loopback
            host.settimeout(3)
            assert host.connect_ex(("127.0.0.1", 47321)) != 0
    finally:
        first.kill()
        first.wait(10)


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
    sandbox_file = str(Path(sandbox.__file__))
    kwargs = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []} if user else {}
    proc = subprocess.Popen(
        [SYSTEM_PYTHON, sandbox_file, json.dumps(asdict(plan)), "--", SYSTEM_PYTHON, "-c", code],
        pass_fds=(write,), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/", env={"PATH": "/usr/bin:/bin"},
        **kwargs,
    )
    os.close(write)
    report = sandbox._read_report(read, 30)
    assert report == "ok", report
    return proc


def _launch(tmp_path: Path, plan: sandbox.Plan, code: str, user=None) -> subprocess.CompletedProcess:
    proc = _spawn_launcher(tmp_path, plan, code, user)
    out, _ = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
