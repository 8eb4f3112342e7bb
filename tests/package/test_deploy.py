"""deploy/ renders with kustomize, validates against Kubernetes' schemas and agrees with the
server's flags, its metrics and the Dockerfile; broken copies show that each check can fail."""

from __future__ import annotations

from collections.abc import Callable

import kubernetes_validate
import pytest
import yaml

from tests.support.deploy_manifests import (
    DEPLOY, Manifests, check_autoscaler, check_gpu, check_probes, check_security, check_service, check_termination,
    gauge_names, render,
)

# The oldest Kubernetes still common in managed clusters, and the newest the package knows.
KUBERNETES_VERSIONS = ("1.28.0", kubernetes_validate.latest_version())
CHECKS = (check_probes, check_termination, check_service, check_security, check_gpu, check_autoscaler)


@pytest.fixture(scope="module")
def manifests() -> Manifests:
    return Manifests(render())


def test_renders_the_four_objects_with_the_image_set(manifests):
    assert sorted(obj["kind"] for obj in manifests.objects) == [
        "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Service"]
    image = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["images"][0]
    assert manifests.container["image"] == f"{image['newName']}:{image['newTag']}"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_validates_strictly(manifests, version):
    for obj in manifests.objects:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
def test_manifests_agree_with_the_server(manifests, check):
    check(manifests)


def test_gauges_are_read_from_server_metrics():
    gauges = gauge_names()
    assert {"rose_queue_tokens", "rose_queue_pieces", "rose_ready"} <= gauges
    assert "rose_tokens" not in gauges  # a counter: an HPA target on it would only ever grow


def _set(path: str, value) -> Callable[[Manifests], None]:
    """A breakage that sets one field of the container ('c.'), pod spec ('p.') or a kind ('Kind.')."""
    root, *keys = path.split(".")

    def breaks(m: Manifests) -> None:
        node = {"c": m.container, "p": m.pod["spec"]}.get(root) or m.one(root)
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[keys[-1]] = value
    return breaks


def _flag(flag: str) -> Callable[[Manifests], None]:
    return lambda m: m.container["args"].append(flag)


BREAKAGES = [
    ("grace shorter than the drain", _set("p.terminationGracePeriodSeconds", 40), check_termination),
    ("shutdown timeout raised", _flag("--shutdown-timeout=60"), check_termination),
    ("misspelled flag", _flag("--shutdown-timout=30"), check_termination),
    ("liveness on another path", _set("c.livenessProbe.httpGet.path", "/healthz"), check_probes),
    ("readiness on another port", _set("c.readinessProbe.httpGet.port", 8080), check_probes),
    ("server moved to another port", _flag("--port=9000"), check_probes),
    ("server moved by the environment", _set("c.env", [{"name": "ROSE_EMBED_PORT", "value": "9000"}]), check_probes),
    ("startup probe dropped", lambda m: m.container.pop("startupProbe"), check_probes),
    ("liveness hastier than readiness", _set("c.livenessProbe.periodSeconds", 2), check_probes),
    ("Service selector misses the pods", _set("Service.spec.selector", {"app": "rose"}), check_service),
    ("Service targets another port", _set("Service.spec.ports.0.targetPort", 8080), check_service),
    ("PDB selector misses the pods", _set("PodDisruptionBudget.spec.selector.matchLabels", {"app": "x"}),
     check_service),
    ("scraped on another port", lambda m: m.pod["metadata"]["annotations"].update({"prometheus.io/port": "9090"}),
     check_service),
    ("runs as root", _set("p.securityContext.runAsUser", 0), check_security),
    ("another user than the image's", _set("c.securityContext.runAsUser", 1000), check_security),
    ("no GPU", lambda m: m.container["resources"]["limits"].pop("nvidia.com/gpu"), check_gpu),
    ("GPU not named", lambda m: m.container["args"].remove("--devices=cuda"), check_gpu),
    ("served on the CPU", lambda m: m.container["args"].append("--devices=cpu"), check_gpu),
    ("two GPUs asked of one", lambda m: m.container["args"].append("--devices=cuda:0,cuda:1"), check_gpu),
    ("HPA on an unknown metric", _set("HorizontalPodAutoscaler.spec.metrics.0.pods.metric.name", "rose_queue_depth"),
     check_autoscaler),
    ("HPA target past the 429 limit",
     _set("HorizontalPodAutoscaler.spec.metrics.0.pods.target.averageValue", "300k"), check_autoscaler),
    ("HPA scales another Deployment", _set("HorizontalPodAutoscaler.spec.scaleTargetRef.name", "other"),
     check_autoscaler),
    ("Deployment pins replicas", _set("Deployment.spec.replicas", 2), check_autoscaler),
]


@pytest.mark.parametrize("breaks, check", [b[1:] for b in BREAKAGES], ids=[b[0] for b in BREAKAGES])
def test_each_check_fails_on_a_broken_copy(manifests, breaks, check):
    broken = manifests.copy()
    breaks(broken)
    with pytest.raises(AssertionError):
        check(broken)
    check(manifests)  # the copy was broken, not the original


@pytest.mark.parametrize("breaks", [
    _set("p.terminationGracePeriod", 60),  # a misspelled field: strict validation rejects it
    _set("c.ports.0.containerPort", "8000"),  # a string where the schema wants an integer
    lambda m: m.one("HorizontalPodAutoscaler")["spec"].pop("scaleTargetRef"),
], ids=["unknown field", "wrong type", "missing required field"])
def test_validation_fails_on_a_broken_copy(manifests, breaks):
    broken = manifests.copy()
    breaks(broken)
    with pytest.raises(kubernetes_validate.ValidationError):
        for obj in broken.objects:
            kubernetes_validate.validate(obj, KUBERNETES_VERSIONS[-1], strict=True)
