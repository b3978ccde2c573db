"""Every Deployment and Job of the rendered manifests starts: its process's
start-up checks (``boxoffice ROLE --check-config``) pass with the
environment the manifests give it. The ConfigMaps are taken as rendered;
each value from a Secret is a valid, non-development value for its key; the
TLS files come from a PKI made here. A role that is not given a secret it
refuses to start without fails here, not in the cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from boxoffice import access
from tests.k8s.support import POOLER, ROOT, built, kustomization_roots, needs_kubectl
from tests.support import make_pki

# A valid production value for each key of a Secret an env entry reads
# (secretKeyRef), by key. The URLs are never dialled by the checks.
SECRET_VALUES = {
    "DATABASE_URL": "postgresql://boxoffice:pw@pgbouncer:6432/boxoffice",
    "DATABASE_DIRECT_URL": "postgresql://boxoffice:pw@postgres:5432/boxoffice",
    "REDIS_URL": "redis://redis:6379/0",
    "BOXOFFICE_TOKEN_KEYS": "k1:cluster-token-key-0123456789abcdef",
    "BOXOFFICE_WEBHOOK_SECRETS": "whsec_cluster0123456789abcdef",
    "BOXOFFICE_CHECKIN_KEYS": "c1:" + "5a" * 32,
}

# The contents of each file a Secret volume mounts, by (Secret, key).
SECRET_FILES = {
    ("boxoffice-edge-session-keys", "keys"): "s1:cluster-session-key-0123456789",
    ("boxoffice-stripe", "secret-key"): "sk_live_cluster0123456789abcdef",
    ("boxoffice-smtp", "password"): "smtp-relay-password",
}


def _operator_config_maps() -> dict[str, dict[str, str]]:
    """The ConfigMaps the operator makes (k8s/README.md), with valid contents."""
    key = jwt.algorithms.ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1()).public_key(), as_dict=True)
    jwks = json.dumps({"keys": [{**key, "kid": "k1", "use": "sig", "alg": "ES256"}]})
    return {"boxoffice-oidc-jwks": {"jwks.json": jwks}}


# A TLS Secret's files (cert-manager's names) -> the field of CertFiles.
TLS_FILES = {"tls.crt": "cert", "tls.key": "key", "ca.crt": "ca"}


def _workloads(rendered: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (obj["metadata"]["name"], obj["spec"]["template"]["spec"])
        for obj in rendered
        if obj["kind"] in ("Deployment", "Job") and obj["metadata"]["name"] != POOLER
    ]


def _mounted_file(
    path: str,
    container: dict[str, Any],
    pod: dict[str, Any],
    config_maps: dict[str, dict[str, str]],
    pki_dir: Path,
    files: Path,
) -> str | None:
    """The local file standing for ``path`` when a volume of the pod mounts
    it (None: no volume does)."""
    for mount in container.get("volumeMounts", []):
        prefix = mount["mountPath"].rstrip("/") + "/"
        if not path.startswith(prefix):
            continue
        name = path[len(prefix) :]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        items = {
            item["path"]: item["key"]
            for item in (volume.get("secret") or volume.get("configMap") or {}).get("items", [])
        }
        key = items.get(name, name)
        if "secret" in volume:
            secret = volume["secret"]["secretName"]
            if secret.startswith("boxoffice-tls-"):
                role = secret.removeprefix("boxoffice-tls-")
                assert role in access.ROLES, f"{secret}: no role {role!r} in the authorization table"
                pki = make_pki(pki_dir / role)
                return str(getattr(pki.roles[role], TLS_FILES[key]))
            assert (secret, key) in SECRET_FILES, f"no test value for key {key!r} of Secret {secret}"
            content = SECRET_FILES[(secret, key)]
        else:
            assert "configMap" in volume, volume
            content = config_maps[volume["configMap"]["name"]][key]
        local = files / mount["name"] / name
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(content)
        return str(local)
    return None


def _environment(
    container: dict[str, Any], pod: dict[str, Any], config_maps: dict[str, dict[str, str]], tmp: Path
) -> dict[str, str]:
    environ: dict[str, str] = {}
    for source in container.get("envFrom", []):
        assert set(source) == {"configMapRef"}, source
        environ.update(config_maps[source["configMapRef"]["name"]])
    for entry in container.get("env", []):
        if "value" in entry:
            value = entry["value"]
            mounted = _mounted_file(value, container, pod, config_maps, tmp / "pki", tmp / "files")
            environ[entry["name"]] = value if mounted is None else mounted
            continue
        source = entry["valueFrom"]
        if "secretKeyRef" in source:
            key = source["secretKeyRef"]["key"]
            assert key in SECRET_VALUES, f"no test value for Secret key {key!r}"
            environ[entry["name"]] = SECRET_VALUES[key]
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            environ[entry["name"]] = config_maps[ref["name"]][ref["key"]]
        else:
            assert "fieldRef" in source, entry
            environ[entry["name"]] = "from-the-downward-api"
    return environ


@needs_kubectl
@pytest.mark.parametrize("root", kustomization_roots(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_workload_passes_its_start_up_checks(root: Path, tmp_path: Path) -> None:
    rendered = built(root)
    config_maps = _operator_config_maps()
    config_maps |= {
        obj["metadata"]["name"]: dict(obj.get("data", {})) for obj in rendered if obj["kind"] == "ConfigMap"
    }
    workloads = _workloads(rendered)
    assert {"admitter", "relay", "sweeper", "issuer", "boxoffice-migrate"} <= {name for name, _ in workloads}
    refused = []
    for name, pod in workloads:
        (container,) = [c for c in pod["containers"] if c["image"].split(":")[0].rsplit("/", 1)[-1] == "boxoffice"]
        command = [*container.get("command", []), *container.get("args", [])]
        environ = _environment(container, pod, config_maps, tmp_path / name)
        # The image's interpreter and code: this checkout's.
        environ["PYTHONPATH"] = str(ROOT)
        result = subprocess.run(
            [sys.executable, "-m", "boxoffice_cli", *command, "--check-config"],
            env=environ,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0 or result.stdout.strip() != "settings ok":
            refused.append(f"{name} ({' '.join(command)}): exit {result.returncode}: {result.stderr.strip()}")
    assert not refused, "\n".join(refused)
