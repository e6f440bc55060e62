"""The infra templates: the Kubernetes job template renders with Prefect's own templating; compose and sbatch are sound."""
import json
import re
import subprocess

import yaml
from prefect.utilities.templating import apply_values

from tests.conftest import ROOT


def defaults(template: dict) -> dict:
    return {k: v.get("default") for k, v in template["variables"]["properties"].items()}


def test_kubernetes_gpu_template_renders_a_job_that_asks_for_gpus_and_shm():
    template = json.loads((ROOT / "infra/k8s/gpu-base-job-template.json").read_text())
    job = apply_values(template["job_configuration"], {**defaults(template), "gpus": 4, "name": "run-1"})["job_manifest"]
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 4 and job["spec"]["backoffLimit"] == 0
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert pod["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
    assert pod["volumes"][1]["persistentVolumeClaim"]["claimName"] == "pretrain-shared"
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert "{{" not in json.dumps(job)  # every placeholder has a variable behind it


def test_team_compose_uses_postgres_for_both_servers_and_every_secret_is_in_the_example():
    compose = yaml.safe_load((ROOT / "infra/team/docker-compose.yml").read_text())
    services = compose["services"]
    assert services["prefect-server"]["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"].startswith("postgresql+asyncpg://")
    assert "--backend-store-uri postgresql://" in " ".join(services["mlflow"]["command"])
    assert "s3://" in " ".join(services["mlflow"]["command"])
    required = set(re.findall(r"\$\{(\w+):\?", (ROOT / "infra/team/docker-compose.yml").read_text()))
    example = {line.split("=")[0] for line in (ROOT / "infra/team/env.example").read_text().splitlines()
               if "=" in line and not line.startswith("#")}
    assert required and required <= example


def test_shell_scripts_parse():
    for script in ("infra/local.sh", "infra/slurm/gpu-workers.sbatch", "infra/build_gpu_tools.sh"):
        assert subprocess.run(["bash", "-n", str(ROOT / script)]).returncode == 0, script
