"""Hostile code for the tests of issue 20's attacks on the service: what an uploaded workload
became admin with (and more), written once and run as a workload's reference or as a candidate.

Every attack runs at import and again in ``forward``; the results come back in the exception the
code raises at the end (the job's stop reason, or the evaluation's error), as
``ATTACKS{...}`` with one short verdict per attack: ``allowed...`` or ``refused:<error>``."""

from __future__ import annotations

import json
import re

ATTACKS = r'''
import glob, json, os, socket, sqlite3

DATA = {data!r}
DATABASE = {database!r}
WORKER_PID = {worker_pid!r}


def _try(fn):
    try:
        return "allowed:" + repr(fn())[:60]
    except BaseException as exc:
        return "refused:" + type(exc).__name__


def _tcp(port):
    socket.create_connection(("127.0.0.1", port), timeout=2).close()


def _unix(path):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(2)
    try:
        s.connect(path)
    finally:
        s.close()


def _write(path, text="pwned"):
    with open(path, "a") as fh:
        fh.write(text)


def _make_admin():
    db = sqlite3.connect(DATABASE, timeout=2)
    db.execute("UPDATE api_keys SET is_admin = 1")
    db.commit()
    return db.total_changes


def _some(found):
    if not found:
        raise LookupError("nothing there")  # an empty (covered) directory shows nothing: refused
    return found


def _others_uploads():
    found = [p for p in glob.glob("/tmp/kloom-job-*/*") if not p.startswith(os.path.dirname(os.path.abspath(__file__)))]
    return _some([open(p).read()[:20] for p in found])


def attacks():
    """Issue 20's list, each tried once."""
    out = {{
        "admin_key": _try(lambda: open(os.path.join(DATA, "admin_key")).read()),
        "list_data": _try(lambda: _some(os.listdir(DATA))),
        "read_db": _try(lambda: sqlite3.connect(f"file:{{DATABASE}}?mode=ro", uri=True, timeout=2).execute("SELECT key_hash FROM api_keys").fetchall()),
        "make_admin": _try(_make_admin),
        "write_data": _try(lambda: _write(os.path.join(DATA, "pwned"))),
        "write_etc": _try(lambda: _write("/etc/kloom-pwned")),
        "others_uploads": _try(_others_uploads),
        "broker_queue": _try(lambda: _some(os.listdir(os.path.join(DATA, "broker", "queue")))),
        "tcp_postgres": _try(lambda: _tcp(5432)),
        "tcp_redis": _try(lambda: _tcp(6379)),
        "unix_postgres": _try(lambda: _unix("/var/run/postgresql/.s.PGSQL.5432")),
        "unix_redis": _try(lambda: _unix("/var/run/redis/redis-server.sock")),
        "worker_environ": _try(lambda: open(f"/proc/{{WORKER_PID}}/environ", "rb").read()),
        "uid": os.getuid(),
    }}
    return out


AT_IMPORT = attacks()


def report():
    raise RuntimeError("ATTACKS" + json.dumps({{"import": AT_IMPORT, "forward": attacks()}}, separators=(",", ":")))
'''

WORKLOAD = ATTACKS + r'''
import torch
import torch.nn as nn

WORLD_SIZES = [1, 2]


class Model(nn.Module):
    def forward(self, x):
        report()
        return x


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(4, 4)]
'''

HONEST_WORKLOAD = '''
import torch
import torch.distributed as dist
import torch.nn as nn

WORLD_SIZES = [1, 2]


class Model(nn.Module):
    def forward(self, x):
        y = x * 2
        dist.all_reduce(y)
        return y


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(8, 16)]
'''

CANDIDATE = ATTACKS + r'''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        report()
        return x
'''

#: Verdicts that must say ``refused``: everything but the uid.
MUST_BE_REFUSED = ("admin_key", "list_data", "read_db", "make_admin", "write_data", "write_etc", "others_uploads",
                   "broker_queue", "tcp_postgres", "tcp_redis", "unix_postgres", "unix_redis", "worker_environ")


def source(template: str, *, data: str, database: str, worker_pid: int) -> str:
    return template.format(data=data, database=database, worker_pid=worker_pid)


def verdicts(text: str) -> dict:
    """The ``ATTACKS`` report in ``text`` (a stop reason or an error message)."""
    match = re.search(r"ATTACKS(\{.*\})", text or "")
    assert match, f"no report of the attacks in: {text!r}"
    return json.loads(match.group(1))


def allowed(found: dict) -> list[str]:
    """The attacks that were not refused, at import or in forward."""
    return [f"{when}:{name}={found[when][name]}" for when in ("import", "forward") for name in MUST_BE_REFUSED
            if not str(found[when][name]).startswith("refused")]
