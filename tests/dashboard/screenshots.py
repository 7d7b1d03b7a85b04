"""Screenshots of every dashboard page for docs/screenshots (a script, not a test).

    python tests/dashboard/screenshots.py --batch results/gpu/h200x4-ws4 [--batch OTHER] --out docs/screenshots

Starts ``kloom up`` on a temporary data directory and runs one real CPU job through the API.
With ``--batch`` (the first is shown compared with the second), it loads the trajectories that
``kloom bench run`` saved in that directory into the service's database as a batch of finished
jobs (through the DB layer: jobs, steps and their events, as a worker's ``DBSink`` writes them)
and into the knowledge base, so that the pages show real multi-step GPU runs. Saves each page at
1366x768 as a palette PNG.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from dashboard_helpers import CHROMIUM, CHROMIUM_ARGS, DOUBLE, LAPTOP, Service  # noqa: E402
from service_helpers import free_port, kloom_process, wait_for  # noqa: E402

from kb import ingest as kb_ingest  # noqa: E402
from kloom.batch.archive import load_trajectories  # noqa: E402
from kloom.db import create_db_engine, session_factory  # noqa: E402
from kloom.suite import BUILTIN_SUITE  # noqa: E402
from services.db import jobs as job_ops  # noqa: E402
from services.db import keys  # noqa: E402
from services.db.models import Batch, Job  # noqa: E402
from services.db.sink import json_safe  # noqa: E402

FINISHED = {"succeeded", "failed", "cancelled", "stopped"}


def start(data: Path) -> Service:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLOOM_")}
    proc = kloom_process(["up", "--data-dir", str(data), "--port", str(port)], env, data.parent / "up.log")
    base = f"http://127.0.0.1:{port}"

    def healthy():
        try:
            r = httpx.get(f"{base}/api/v1/health", timeout=2)
        except httpx.TransportError:
            return None
        return r.status_code == 200 and r.json()["workers_alive"] >= 1

    wait_for(healthy, 120, "kloom up", interval=0.5)
    return Service(base, (data / "admin_key").read_text().strip(), data, data.parent / "up.log", proc)


def import_batch(service: Service, directory: Path) -> str:
    """The trajectories of a ``kloom bench run`` directory as a batch of finished jobs of the admin key."""
    settings = json.loads((directory / "batch.json").read_text())
    engine = create_db_engine(f"sqlite:///{service.data_dir / 'kloom.db'}")
    sessions = session_factory(engine)
    with sessions() as session:
        owner_id = keys.lookup(session, service.admin_key, service.admin_key).id  # commits the admin's row
    with sessions() as session, session.begin():
        trajectories = load_trajectories(directory)  # job folders, or the archive of a committed batch
        gpu = next((t.baseline.environment.get("gpu", "") for t in trajectories if t.baseline), "")
        kind = "cpu" if settings["device"] == "cpu" else f"cuda-{gpu.split()[-1].lower() or 'gpu'}x{settings['world_size']}"
        batch = Batch(
            owner_key_id=owner_id,
            suite="kloom" if Path(settings["suite"]).resolve() == BUILTIN_SUITE else Path(settings["suite"]).name,
            settings={"world_size": settings["world_size"], "device_kind": kind, "strategist": settings["strategist"], "max_iters": settings["max_iters"]},
        )
        session.add(batch)
        session.flush()
        for traj in trajectories:
            source = Path(traj.job.workload)
            state = traj.state if traj.state in FINISHED else "stopped"
            best = traj.best_step
            meta = traj.to_dict()
            meta.pop("steps")
            job = Job(
                owner_key_id=owner_id,
                batch_id=batch.id,
                workload_name=traj.workload_name,
                workload_family=traj.workload_family,
                workload_source=source.read_text() if source.is_file() else "",
                workload_sha256=traj.workload_sha256,
                world_size=traj.job.world_size,
                device_kind=kind,
                shapes=traj.job.shapes,
                strategist=traj.job.strategist,
                limits=json_safe(meta["job"]["limits"]),
                state="running",
                attempts=1,
                worker_id="imported",
                trajectory=json_safe(meta),
                num_steps=len(traj.steps),
                best_step_index=best.index if best else None,
                best_speedup=json_safe(best.speedup) if best else None,
                best_fraction_of_floor=json_safe(best.fraction_of_floor) if best else None,
                cost_usd=traj.usage.cost_usd,
            )
            session.add(job)
            session.flush()
            for step in traj.steps:
                job_ops.record_step(session, job.id, json_safe(step.to_dict()), json_safe(step.speedup))
            reason = traj.stop_reason if traj.state in FINISHED else f"imported from {directory} before it finished"
            job_ops.finish(session, job.id, 1, state, reason)
            traj.job.job_id = job.id  # the knowledge base links its kernels and evidence to this job
    # What a worker does when a job ends: the knowledge base learns from it.
    for traj in trajectories:
        if traj.state in FINISHED:
            with sessions() as session:
                kb_ingest.ingest(session, traj)
    engine.dispose()
    return batch.id


def shoot(service: Service, out: Path, batch_ids: list[str]) -> None:
    from playwright.sync_api import expect, sync_playwright

    with service.api() as api:
        r = api.post("/jobs", files={"workload_file": ("double.py", DOUBLE.encode())}, data={"world_size": "2", "max_iters": "2"})
        cpu_job = r.json()["id"]
        wait_for(lambda: api.get(f"/jobs/{cpu_job}").json()["state"] in FINISHED, 180, "the CPU job", interval=1)
        jobs = api.get("/jobs", params={"limit": 200}).json()["data"]
        imported = [j for j in jobs if batch_ids and j["batch_id"] == batch_ids[0]]

        # The richest trajectory: the most steps, and the most kinds of outcome among them.
        def richness(job):
            statuses = {s["status"] for s in api.get(f"/jobs/{job['id']}/steps").json()["data"]}
            return (job["num_steps"], len(statuses), job["best_speedup"] or 0)

        showcase = max(imported or jobs, key=richness)
        kernels = api.get("/kb/kernels", params={"limit": 1}).json()["data"]
        strategies = api.get("/kb/strategies", params={"limit": 1}).json()["data"]
    failed = next((j for j in jobs if j["state"] == "failed"), None)
    # A step with a correct one before it, so that its diff is against a previous best.
    step = showcase["num_steps"] - 1
    pages = {
        "jobs": "/#/jobs",
        "job": f"/#/jobs/{showcase['id']}",
        "step": f"/#/jobs/{showcase['id']}/steps/{step}",
        "job-cpu": f"/#/jobs/{cpu_job}",
        "batches": "/#/batches",
        "kb": "/#/kb",
        "workers": "/#/workers",
    }
    if batch_ids:
        # Compared with the second batch given, where there is one.
        pages["batch"] = f"/#/batches/{batch_ids[0]}" + (f"?compare={batch_ids[1]}" if len(batch_ids) > 1 else "")
    if kernels:
        pages["kb-kernel"] = f"/#/kb/kernels/{kernels[0]['id']}"
    if strategies:
        pages["kb-strategy"] = f"/#/kb/strategies/{strategies[0]['id']}"
    if failed:
        pages["job-failed"] = f"/#/jobs/{failed['id']}"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport=LAPTOP, base_url=service.base)
        page = context.new_page()
        page.goto("/#/login")
        expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
        save(page, out / "login.png")
        context.add_cookies([{"name": "kloom_key", "value": service.admin_key, "url": service.base}])
        page.reload()
        for name, url in pages.items():
            page.goto(url)
            page.wait_for_load_state("networkidle")
            expect(page.locator("main .loading")).to_have_count(0)
            save(page, out / f"{name}.png", full=name in ("batch", "step", "job", "job-cpu", "job-failed"))
        browser.close()


def save(page, path: Path, full: bool = False) -> None:
    """A screenshot as a 256-colour PNG: a tenth of the size, and text stays sharp."""
    from PIL import Image

    page.screenshot(path=path, full_page=full)
    Image.open(path).convert("RGB").quantize(256).save(path, optimize=True)
    print(f"{path} ({path.stat().st_size // 1024} KiB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=Path, action="append", default=[], help="a kloom bench run directory to show as a batch (repeat to compare)")
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        service = start(Path(tmp) / "data")
        try:
            shoot(service, args.out, [import_batch(service, directory) for directory in args.batch])
        finally:
            service.stop()


if __name__ == "__main__":
    main()
