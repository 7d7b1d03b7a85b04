"""The deployment files, checked as far as a machine without a container engine allows: the
compose file parses (with ``docker compose config`` where it is installed), runs migrations as a
prestart step, health-checks every service and reserves GPUs for the worker; the image installs
every package of the project."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib

import pytest
import yaml

from service_helpers import ROOT


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_services_health_checks_and_prestart_migrations(compose):
    services = compose["services"]
    assert set(services) == {"postgres", "redis", "migrate", "api", "worker"}
    for name in ("postgres", "redis", "api", "worker"):
        assert services[name]["healthcheck"]["test"], f"{name} has no health check"
    assert services["migrate"]["command"] == ["kloom", "db", "upgrade"]
    for name in ("api", "worker"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
    gpus = services["worker"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpus["driver"] == "nvidia" and "gpu" in gpus["capabilities"]
    assert services["worker"]["environment"]["KLOOM_HEARTBEAT_FILE"] in services["worker"]["healthcheck"]["test"][1]
    assert "/api/v1/health" in services["api"]["healthcheck"]["test"][-1]


def test_compose_config_parses_with_the_installed_tool():
    tool = (["docker", "compose"] if _has_compose_plugin() else None) or (["docker-compose"] if shutil.which("docker-compose") else None)
    if tool is None:
        pytest.skip("neither 'docker compose' nor 'docker-compose' is installed here")
    r = subprocess.run([*tool, "-f", str(ROOT / "docker-compose.yml"), "config"], capture_output=True, text=True, env={"KLOOM_ADMIN_KEY": "kl_test", "PATH": "/usr/bin:/bin:/usr/local/bin"}, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "kloom" in r.stdout and "service_completed_successfully" in r.stdout


def _has_compose_plugin() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30).returncode == 0


def test_image_copies_every_package_the_project_installs():
    dockerfile = (ROOT / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\w+) ", dockerfile, flags=re.M))
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in include}
    assert packages <= copied, f"the image misses {packages - copied}"
    assert re.search(r'pip install (-e )?"\.\[service\]"', dockerfile)
