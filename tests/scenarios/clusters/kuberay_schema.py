"""Make the KubeRay CRD schemas the manifest test validates against (test data, committed).

python tests/scenarios/clusters/kuberay_schema.py GIT_DIR TAG
  GIT_DIR: a clone of github.com/ray-project/kuberay (a bare one will do), TAG: a release tag.

Reads ray-operator/config/crd/bases/ray.io_{rayclusters,rayjobs}.yaml at TAG (the CRDs the
operator's Helm chart installs) and writes the served ``v1`` version's ``openAPIV3Schema`` of
each as gzipped JSON to kuberay/TAG/ beside this script, with SOURCE naming the commit.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import yaml

KINDS = {"RayCluster": "rayclusters", "RayJob": "rayjobs"}


def main(git_dir: str, tag: str) -> int:
    def git(*args: str) -> str:
        return subprocess.run(["git", "--git-dir", git_dir, *args], capture_output=True, text=True, check=True).stdout

    commit = git("rev-list", "-n", "1", tag).strip()
    out = Path(__file__).with_name("kuberay") / tag
    out.mkdir(parents=True, exist_ok=True)
    for kind, plural in KINDS.items():
        path = f"ray-operator/config/crd/bases/ray.io_{plural}.yaml"
        crd = yaml.safe_load(git("show", f"{commit}:{path}"))
        assert crd["spec"]["names"]["kind"] == kind, path
        (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
        schema = version["schema"]["openAPIV3Schema"]
        with gzip.GzipFile(out / f"{plural}.schema.json.gz", "wb", mtime=0) as f:
            f.write(json.dumps(schema, sort_keys=True, separators=(",", ":")).encode())
    (out / "SOURCE").write_text(
        f"github.com/ray-project/kuberay {tag} (commit {commit}),\n"
        f"ray-operator/config/crd/bases/ray.io_{{rayclusters,rayjobs}}.yaml, version v1, openAPIV3Schema;\n"
        f"made by tests/scenarios/clusters/kuberay_schema.py\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
