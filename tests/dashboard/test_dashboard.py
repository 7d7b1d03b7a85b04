"""The dashboard in headless Chromium against the real service (``kloom up``: API, worker, SQLite):
sign in, submit a CPU job from the form and watch its plot gain points over the event stream,
read a step's code and diff, read a batch report and compare two batches, the knowledge base,
the workers, and the empty and error states. Each page is saved as a screenshot artifact.

The tests share one service and run in file order: the first sees no jobs, the last stops it.
"""

from __future__ import annotations

import math
import re
import statistics

import pytest
from playwright.sync_api import expect

from dashboard_helpers import DESKTOP, DOUBLE
from service_helpers import wait_for

pytestmark = pytest.mark.slow

JOB_URL = re.compile(r"#/jobs/([0-9a-f]{32})$")


def speedup_text(v: float) -> str:
    """The dashboard's way of writing a speedup (format.js ``speedup``)."""
    return f"{v:.0f}×" if v >= 100 else f"{v:.1f}×" if v >= 10 else f"{v:.2f}×"


def test_sign_in_refuses_a_wrong_key_then_shows_the_empty_jobs_page(open_page, service, artifacts):
    page = open_page(key=None)
    page.goto("/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    page.screenshot(path=artifacts / "login.png")
    page.get_by_label("API key").fill("kl_not_a_key")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("does not know this key")
    page.get_by_label("API key").fill(service.admin_key)
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()
    expect(page.locator(".empty")).to_contain_text("No jobs yet")
    cookie = next(c for c in page.context.cookies() if c["name"] == "kloom_key")
    assert cookie["value"] == service.admin_key and cookie["sameSite"] == "Strict"
    page.screenshot(path=artifacts / "jobs-empty.png", full_page=True)


def test_a_malformed_upload_is_refused_with_the_apis_reason(open_page, service, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n\ndef get_inputs(:\n    return []\n")
    page = open_page()
    page.goto("/#/jobs")
    page.get_by_label("Upload a workload file").check()
    page.get_by_label("Workload file (.py)").set_input_files(bad)
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#submit-status [role=alert]")).to_contain_text("malformed workload")
    expect(page).not_to_have_url(JOB_URL)
    with service.api() as api:
        assert api.get("/jobs").json()["count"] == 0


def test_a_job_submitted_from_the_form_gains_points_live(open_page, service, artifacts, tmp_path):
    workload = tmp_path / "double.py"
    workload.write_text(DOUBLE)
    page = open_page()
    page.goto("/#/jobs")
    page.get_by_label("Upload a workload file").check()
    page.get_by_label("Workload file (.py)").set_input_files(workload)
    page.get_by_label("World size (ranks)").fill("2")
    page.get_by_label("Steps at most").fill("2")
    page.get_by_label("Let the knowledge base advise the planner").uncheck()
    page.get_by_label("Hardware profiles").select_option("none")
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url(JOB_URL)
    job_id = JOB_URL.search(page.url).group(1)

    plot = page.locator("#trajectory")
    expect(plot.locator("svg.trajectory")).to_be_visible()
    # The worker measures the reference for seconds before the first candidate: no point yet.
    assert plot.get_attribute("data-points") == "0"
    expect(page.locator("#live-status")).to_contain_text("Live")
    page.evaluate("window.__sameDocument = true")
    page.screenshot(path=artifacts / "job-running.png", full_page=True)

    expect(plot.locator("a.point")).to_have_count(1, timeout=120_000)
    expect(page.locator("h1 .badge")).to_have_text("succeeded", timeout=60_000)
    # Drawn from the event stream, in the same document: no reload happened.
    assert page.evaluate("window.__sameDocument") is True
    assert int(plot.get_attribute("data-events")) >= 1
    expect(page.locator("#live-status")).to_contain_text("Finished")

    with service.api() as api:
        job = api.get(f"/jobs/{job_id}").json()
        traj = api.get(f"/jobs/{job_id}/trajectory").json()
        step = api.get(f"/jobs/{job_id}/steps").json()["data"][0]
    assert job["state"] == "succeeded" and job["num_steps"] == 1 and job["best_step_index"] == 0
    assert job["profile"] == "none" and job["use_kb"] is False  # the form's choices
    # The point shows what the step measured; the job's best is the same number, except that the
    # reference run as a candidate is never reported above 1.0x.
    capped = min(step["speedup"], 1.0) if step["data"]["plan"]["strategy"] == "reference_copy" else step["speedup"]
    assert job["best_speedup"] == pytest.approx(capped)
    point = plot.locator("a.point")
    expect(point).to_have_attribute("data-status", "correct")
    expect(point).to_have_attribute("aria-label", re.compile(re.escape(speedup_text(step["speedup"]))))
    # The best-so-far line and the "new best" mark are for measurable wins only: the reference's
    # own copy (the first step here) never is one, so the job found no faster kernel.
    from kloom.evaluation import EvalResult
    from kloom.speedup import measured

    win = step["data"]["plan"]["strategy"] != "reference_copy" and measured(EvalResult.from_dict(step["data"]["evaluation"]).timing).measurable_win
    expect(plot.locator("svg.trajectory path.best-line")).to_have_count(1 if win else 0)
    if not win:
        expect(plot.locator("svg.trajectory .mark-best")).to_have_count(0)
        expect(page.get_by_label("Summary")).to_contain_text("no faster kernel found: the reference stands at 1.00×")
    expect(plot.locator(".baseline-label")).to_have_text("baseline 1×")
    assert traj["floor_speedup"] == pytest.approx(traj["reference_ms"] / traj["floor_ms"])
    expect(plot.locator(".floor-label")).to_contain_text(f"roofline floor {speedup_text(traj['floor_speedup'])}")
    expect(page.locator("tr[data-step='0']")).to_contain_text(speedup_text(step["speedup"]))
    page.screenshot(path=artifacts / "job.png", full_page=True)
    wide = open_page(viewport=DESKTOP)
    wide.goto(f"/#/jobs/{job_id}")
    expect(wide.locator("#trajectory a.point")).to_have_count(1)
    wide.screenshot(path=artifacts / "job-1920.png", full_page=True)


def _double_job(service) -> dict:
    with service.api() as api:
        jobs = api.get("/jobs", params={"workload": "double", "state": "succeeded"}).json()["data"]
    assert jobs, "the job of the live test is missing"
    return jobs[0]


def test_jobs_list_filters_by_state_and_workload(open_page, service, artifacts):
    page = open_page()
    page.goto("/#/jobs")
    expect(page.locator("tr[data-job]")).to_have_count(1)
    # Keyboard: the first Tab reaches the skip link, which lands in the page without losing the route.
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()
    expect(page).to_have_url(re.compile(r"#/jobs$"))
    row = page.locator("tr[data-job]")
    expect(row).to_contain_text("double")
    expect(row).to_contain_text("succeeded")
    page.get_by_label("State", exact=True).select_option("failed")
    expect(page.locator(".empty")).to_contain_text("No job matches these filters")
    page.get_by_role("link", name="Show every job").click()
    # The link re-renders the page, filter form included: type only into the new form (typing
    # during the change went into the old one, and Enter then submitted the new, empty one).
    expect(page).to_have_url(re.compile(r"#/jobs$"))
    expect(page.locator("tr[data-job]")).to_have_count(1)
    expect(page.get_by_label("State", exact=True)).to_have_value("")
    page.get_by_label("Workload", exact=True).fill("doub")
    page.get_by_label("Workload", exact=True).press("Enter")
    expect(page).to_have_url(re.compile(r"workload=doub"))
    expect(page.locator("tr[data-job]")).to_have_count(1)
    page.screenshot(path=artifacts / "jobs.png", full_page=True)


def test_a_step_shows_its_plan_code_diff_and_evaluation(open_page, service, artifacts):
    job = _double_job(service)
    with service.api() as api:
        step = api.get(f"/jobs/{job['id']}/steps").json()["data"][0]["data"]
    page = open_page()
    page.goto(f"/#/jobs/{job['id']}")
    # The plot's points are links: reach one with the keyboard.
    page.locator("#trajectory a.point").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Step 0: {step['plan']['strategy']}")
    expect(page.locator("#plan-title + .facts")).to_contain_text(step["plan"]["strategy"])
    expect(page.locator(".prose").first).to_have_text(step["plan"]["rationale"])

    # The first candidate's diff is against the reference: the workload it was submitted with.
    expect(page.get_by_role("tab", name="Diff")).to_have_attribute("aria-selected", "true")
    summary = page.locator(".diff-summary")
    expect(summary).to_contain_text("Against the reference")
    added = int(re.search(r"\+(\d+)", summary.inner_text()).group(1))
    assert added == page.locator("table.diff tr.add").count() > 0
    expect(page.locator("table.diff tr.add td.src", has_text="class ModelNew(Model):")).to_have_count(1)
    context = page.locator("table.diff tr.ctx td.src").all_inner_texts()
    assert context and all(line in DOUBLE.split("\n") for line in context)

    page.get_by_role("tab", name="Diff").focus()
    page.keyboard.press("ArrowRight")
    expect(page.get_by_role("tab", name="Full code")).to_have_attribute("aria-selected", "true")
    expect(page.locator("pre.code")).to_contain_text("class ModelNew(Model):")
    assert page.locator("pre.code .line").count() == len(step["candidate_code"].split("\n"))

    timing = step["evaluation"]["timing"]
    expect(page.locator("#eval-title ~ .table-wrap").first.locator("tbody tr")).to_have_count(2)
    expect(page.locator("#eval-title + .facts")).to_contain_text(speedup_text(timing["speedup"]))
    checks = sum(len(t["ranks"]) for t in step["evaluation"]["trials"])
    expect(page.get_by_text(f"All {checks} rank checks passed", exact=False)).to_be_visible()
    page.get_by_role("tab", name="Diff").click()
    page.screenshot(path=artifacts / "step.png", full_page=True)


def test_a_batch_report_with_fast_p_geomean_and_a_comparison(open_page, service, artifacts):
    key = service.new_key("batches")
    with service.api(key) as api:
        # B runs the suite at world size 1, where only one of its workloads applies.
        a = api.post("/batches", json={"suite": "tiny", "world_size": 2, "max_iters": 1}).json()
        b = api.post("/batches", json={"suite": "tiny", "world_size": 1, "max_iters": 1}).json()
        assert [w["workload_name"] for w in b["workloads"]] == ["double"]

        def finished():
            return all(api.get(f"/batches/{x['id']}").json()["summary"]["finished"] == x["summary"]["total"] for x in (a, b))

        page = open_page(key=key)
        page.goto(f"/#/batches/{a['id']}")
        expect(page.get_by_role("heading", level=1)).to_contain_text("tiny suite at world size 2")
        wait_for(finished, 180, "both batches to finish", interval=1)
        report = api.get(f"/batches/{a['id']}/report").json()
        jobs = {j["workload_name"]: j for j in api.get("/jobs", params={"batch_id": a["id"]}).json()["data"]}

    # The report agrees with the batch's job rows, by KernelBench's definitions.
    rows = {r["workload"]: r for r in report["rows"]}
    assert set(rows) == {"double", "stateful"}
    assert rows["double"]["correct"] and not rows["stateful"]["correct"]
    # The row's result is the job's (1.0 where the reference stands).
    assert rows["double"]["speedup"] == pytest.approx(jobs["double"]["result_speedup"])
    assert rows["double"]["outcome"] == jobs["double"]["outcome"]
    assert rows["double"]["job_id"] == jobs["double"]["id"] and rows["stateful"]["state"] == "failed"
    assert rows["double"]["baseline_ms"] > 0 and rows["double"]["floor_ms"] > 0
    speedup = rows["double"]["speedup"]
    agg = report["aggregate"]
    assert agg["workloads"] == agg["finished"] == 2 and agg["correct"] == 1 and agg["correctness_rate"] == 0.5
    assert agg["fast_p"] == {str(p): (0.5 if speedup > p else 0.0) for p in (1.0, 1.2, 1.5, 2.0)}
    assert agg["geomean_speedup"] == pytest.approx(math.exp(statistics.fmean([math.log(speedup)])))
    assert agg["median_fraction_of_floor"] == pytest.approx(rows["double"]["fraction_of_floor"])

    # The page redraws itself as the batch finishes: no reload needed.
    expect(page.locator(".progress")).to_contain_text("2/2", timeout=15_000)
    expect(page.locator("tr[data-workload='double']")).to_contain_text("yes")
    expect(page.locator("tr[data-workload='stateful']")).to_contain_text("no")
    expect(page.locator(".stat", has_text="fast_1.0").locator(".stat-value")).to_have_text(f"{agg['fast_p']['1.0']:.2f}")
    expect(page.locator(".stat", has_text="Geomean").locator(".stat-value")).to_have_text(speedup_text(agg["geomean_speedup"]))
    expect(page.locator("svg.fastp path.curve.series-a")).to_have_count(1)

    page.get_by_label("Compare with").select_option(b["id"])
    page.get_by_role("button", name="Compare").click()
    expect(page).to_have_url(re.compile(f"compare={b['id']}"))
    expect(page.locator("svg.fastp path.curve")).to_have_count(2)
    compared = page.locator("#compare tr[data-workload]")
    expect(compared).to_have_count(2)
    expect(page.locator("#compare tr[data-workload='stateful']")).to_contain_text("only in A")
    page.screenshot(path=artifacts / "batch.png", full_page=True)

    # A failed job says why, and its incorrect candidate is marked apart from the correct ones.
    page.locator("tr[data-workload='stateful'] a").first.click()
    expect(page.locator("#job-notice [role=alert]")).to_contain_text("This job failed: no correct candidate")
    expect(page.locator("#trajectory a.point[data-status='incorrect'] .mark-incorrect")).to_have_count(1)
    expect(page.locator("#trajectory svg.trajectory path.best-line")).to_have_count(0)
    page.screenshot(path=artifacts / "job-failed.png", full_page=True)
    page.goto("/#/batches")
    expect(page.locator("tbody tr")).to_have_count(2)
    page.screenshot(path=artifacts / "batches.png", full_page=True)


def test_knowledge_base_search_strategies_and_evidence(open_page, service, artifacts):
    page = open_page()
    page.goto("/#/kb")
    strategies = page.locator("#strategies-title ~ .table-wrap tbody tr")
    expect(strategies.first).to_be_visible(timeout=30_000)
    page.get_by_label("Search kernels").fill("all reduce")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_role("heading", name="Kernels matching “all reduce”")).to_be_visible()
    expect(page.locator("#kernels-title ~ *").first).to_be_visible()
    page.screenshot(path=artifacts / "kb.png", full_page=True)
    strategies.first.get_by_role("link").click()
    expect(page.get_by_role("heading", name="Evidence")).to_be_visible()
    evidence = page.locator("#evidence-title ~ .table-wrap tbody tr")
    expect(evidence.first).to_be_visible()
    expect(evidence.first.get_by_role("link")).to_have_attribute("href", re.compile(r"#/jobs/[0-9a-f]{32}/steps/\d+"))
    page.screenshot(path=artifacts / "kb-strategy.png", full_page=True)


def test_workers_page_shows_the_live_worker(open_page, service, artifacts):
    with service.api() as api:
        workers = api.get("/workers").json()["data"]
    alive = [w for w in workers if w["alive"]]
    page = open_page()
    page.goto("/#/workers")
    card = page.locator(f"article[data-worker='{alive[0]['id']}']")
    expect(card.locator(".badge")).to_have_text("alive")
    expect(card).to_contain_text("cpu")
    expect(card).to_contain_text("No GPUs")
    expect(card.locator("dt", has_text="Last heartbeat")).to_be_visible()
    page.screenshot(path=artifacts / "workers.png", full_page=True)


def test_error_states_say_what_is_wrong(open_page, service, artifacts):
    page = open_page()
    page.goto("/#/jobs/nope")
    expect(page.get_by_role("alert")).to_contain_text("Error 404: no job 'nope'")
    expect(page.get_by_role("button", name="Try again")).to_be_visible()
    page.screenshot(path=artifacts / "error-404.png")
    page.goto("/#/batches/nope")
    expect(page.get_by_role("alert")).to_contain_text("no batch 'nope'")
    page.goto("/#/nowhere")
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()

    # A revoked key sends its user back to the sign-in form, with the API's reason.
    key = service.new_key("soon revoked")
    with service.api() as api:
        key_id = next(k["id"] for k in api.get("/keys").json()["data"] if k["name"] == "soon revoked")
        assert api.delete(f"/keys/{key_id}").status_code == 200
    revoked = open_page(key=key)
    revoked.goto("/#/batches")
    expect(revoked.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(revoked.get_by_role("alert")).to_contain_text("unknown or revoked API key")

    # With the API gone, a page says so instead of staying blank.
    page.goto("/#/jobs")
    expect(page.locator("tr[data-job]").first).to_be_visible()
    service.stop()
    page.get_by_role("link", name="Workers").click()
    expect(page.get_by_role("alert")).to_contain_text("the API cannot be reached")
    page.screenshot(path=artifacts / "error-offline.png")
