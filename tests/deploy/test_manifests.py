"""deploy/: the Kubernetes manifests and the container build files, checked offline.

- Every manifest validates against the Kubernetes 1.30 OpenAPI schemas (kubernetes-validate,
  strict: an unknown field fails), as written and as kustomize renders it (deploy/k8s/base and the
  GPU overlay deploy/k8s/gpu; the small renderer below does what those two kustomizations use,
  and fails on anything else; where kubectl is installed, it must agree with `kubectl
  kustomize`).
- Every `agentix` command line in a container parses with the real CLI parser (a dry run: no
  model, no port), after Kubernetes' `$(VAR)` expansion from the container's env.
- Ports agree: flags, container ports, probes, Services, the Prometheus annotations and the
  router's --replicas-dns name; the files the flags name are mounted, from Secrets whose
  example data the server's own parsers accept.
- Each Dockerfile's ENTRYPOINT/CMD is a real `agentix` command, its COPY sources exist, and
  it runs as the non-root user the manifests name.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import kubernetes_validate
import pytest
import yaml

from server.auth import load_router_token, parse_tokens
from server.cli import build_parser
from server.router.app import LIVENESS_SERVICE

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
BASE = K8S / "base"
OVERLAYS = {"cpu": BASE, "gpu": K8S / "gpu"}
SECRET_EXAMPLE = K8S / "secret.example.yaml"
KUBERNETES_VERSION = "1.30"  # the schemas the manifests are checked against
CLUSTER_DOMAIN = "svc.cluster.local"
# Flags that may repeat on one command line (argparse "append"); any other given twice is a
# mistake (the last would win silently).
REPEATABLE = frozenset({"--set", "--replica", "--replicas-dns"})


def _load(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _manifest_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")


def _name(obj: dict) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


# ----- a small kustomize: what deploy/k8s uses, nothing more --------------------------------

def _pointer(path: str) -> list[str]:
    assert path.startswith("/"), path
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _json_patch(obj: dict, ops: list[dict]) -> None:
    """RFC 6902 `add` and `replace` (all the overlay uses), in place."""
    for op in ops:
        *parents, last = _pointer(op["path"])
        node = obj
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        value = copy.deepcopy(op["value"])
        if op["op"] == "add":
            if isinstance(node, list):
                node.insert(len(node) if last == "-" else int(last), value)
            else:
                node[last] = value
        elif op["op"] == "replace":
            if isinstance(node, list):
                node[int(last)] = value
            else:
                assert last in node, f"replace {op['path']}: no such field"
                node[last] = value
        else:
            raise AssertionError(f"patch op {op['op']!r}: the test's renderer knows add/replace")


def _render(directory: Path) -> list[dict]:
    """The objects `kubectl apply -k directory` would apply."""
    (kust,) = _load(directory / "kustomization.yaml")
    assert kust["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kust["kind"] == "Kustomization"
    unknown = set(kust) - {"apiVersion", "kind", "namespace", "resources", "patches", "images"}
    assert not unknown, f"{directory}/kustomization.yaml: {sorted(unknown)} (teach _render)"
    objects: list[dict] = []
    for resource in kust["resources"]:
        path = (directory / resource).resolve()
        objects += _render(path) if path.is_dir() else copy.deepcopy(_load(path))
    if "namespace" in kust:
        for obj in objects:
            if obj["kind"] != "Namespace":
                obj["metadata"]["namespace"] = kust["namespace"]
    for patch in kust.get("patches", ()):
        target = patch["target"]
        hits = [obj for obj in objects
                if obj["kind"] == target["kind"] and obj["metadata"]["name"] == target["name"]]
        assert len(hits) == 1, f"patch target {target} matches {len(hits)} objects"
        _json_patch(hits[0], yaml.safe_load(patch["patch"]))
    for image in kust.get("images", ()):  # after the patches, as kustomize does
        for workload in _workloads(objects):
            for container in workload["spec"]["template"]["spec"]["containers"]:
                name, _, tag = container["image"].rpartition(":")
                if "/" in tag or not name:  # no tag, e.g. host:port/name
                    name, tag = container["image"], ""
                if name == image["name"]:
                    name, tag = image.get("newName", name), image.get("newTag", tag)
                    container["image"] = f"{name}:{tag}" if tag else name
    return objects


def _namespace(objects: list[dict]) -> str:
    (namespace,) = {obj["metadata"].get("namespace") for obj in objects
                    if obj["kind"] != "Namespace"}
    return namespace


def _workloads(objects: list[dict]) -> list[dict]:
    return [obj for obj in objects if obj["kind"] in ("StatefulSet", "Deployment")]


def _one(objects: list[dict], kind: str, name: str) -> dict:
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of `$(VAR)` in command and args (`$$` is a literal `$`)."""
    def sub(match: re.Match) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        assert name in env, f"$({name}) is not in the container's env"
        return env[name]
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, text)


def _env(container: dict, namespace: str) -> dict[str, str]:
    """The container's env as the kubelet would set it (fieldRef metadata.namespace is the
    rendered namespace; other references are placeholders)."""
    env = {}
    for var in container.get("env", ()):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif var["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[var["name"]] = namespace
        else:
            env[var["name"]] = f"<{var['name']}>"
    return env


def _parse(argv: list[str]):
    """`agentix ARGV` through the real parser; a parse error fails the test with argparse's
    own message."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"agentix {' '.join(argv)}\n  does not parse: {stderr.getvalue().strip()}")


def _commands(objects: list[dict]):
    """(workload, container, parsed args, argv) for every container running `agentix`."""
    namespace = _namespace(objects)
    for workload in _workloads(objects):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            assert container.get("command") == ["agentix"], \
                f"{_name(workload)}/{container['name']}: command must be ['agentix']"
            env = _env(container, namespace)
            argv = [_expand(arg, env) for arg in container.get("args", [])]
            yield workload, container, _parse(argv), argv


def _container_ports(container: dict) -> dict[str, int]:
    return {port["name"]: port["containerPort"] for port in container.get("ports", ())}


# ----- 1. schemas ----------------------------------------------------------------------------

def test_schema_version_is_shipped():
    assert KUBERNETES_VERSION in {kubernetes_validate.utils.major_minor(v)
                                  for v in kubernetes_validate.utils.all_versions()}, \
        f"kubernetes-validate {kubernetes_validate.__version__} has no {KUBERNETES_VERSION} schemas"


@pytest.mark.parametrize("path", _manifest_files(), ids=lambda p: str(p.relative_to(K8S)))
def test_manifest_files_validate(path):
    docs = _load(path)
    assert docs, f"{path}: no objects"
    for doc in docs:
        if doc.get("kind") == "Kustomization":
            continue  # a kustomize file, not an API object (the gpu overlay's)
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rendered_objects_validate(overlay):
    objects = _render(OVERLAYS[overlay])
    names = [_name(obj) for obj in objects]
    assert len(names) == len(set(names)), names
    for obj in objects:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_kustomization_lists_every_manifest_but_the_secret():
    (kust,) = _load(BASE / "kustomization.yaml")
    assert set(kust["resources"]) == {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    # The Secrets are applied by hand with real tokens; `apply -k` must never overwrite them.
    for overlay in OVERLAYS.values():
        assert all(obj["kind"] != "Secret" for obj in _render(overlay))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_renderer_agrees_with_kubectl_kustomize(overlay):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl here: the renderer above stands alone")
    out = subprocess.run([kubectl, "kustomize", str(OVERLAYS[overlay])], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    theirs = [doc for doc in yaml.safe_load_all(out.stdout) if doc]
    assert sorted(_render(OVERLAYS[overlay]), key=_name) == sorted(theirs, key=_name)


# ----- 2. command lines ----------------------------------------------------------------------

@pytest.mark.parametrize("overlay", OVERLAYS)
def test_agentix_command_lines_parse(overlay):
    objects = _render(OVERLAYS[overlay])
    seen = set()
    for workload, container, args, argv in _commands(objects):
        seen.add(args.command)
        flags = [arg.split("=", 1)[0] for arg in argv if arg.startswith("--")]
        twice = {flag for flag in flags if flags.count(flag) > 1} - REPEATABLE
        assert not twice, f"{_name(workload)}: {sorted(twice)} given twice"
        assert args.host == "0.0.0.0", f"{_name(workload)}: --host must listen beyond loopback"
        grace = workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace > args.grace, f"{_name(workload)}: the pod is killed before --grace ends"
    assert seen == {"serve", "router"}


def test_gpu_overlay_asks_for_a_gpu():
    cpu, gpu = (_one(_render(OVERLAYS[o]), "StatefulSet", "agentix-engine") for o in OVERLAYS)
    (cpu_engine,), (gpu_engine,) = (s["spec"]["template"]["spec"]["containers"] for s in (cpu, gpu))
    assert "nvidia.com/gpu" not in cpu_engine["resources"]["limits"]
    assert gpu_engine["resources"]["limits"]["nvidia.com/gpu"] >= 1
    assert gpu_engine["image"].endswith(":cuda") and cpu_engine["image"].endswith(":cpu")
    assert "--device=cuda" in gpu_engine["args"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_files_named_by_flags_are_mounted(overlay, tmp_path):
    objects = _render(OVERLAYS[overlay])
    secrets = {doc["metadata"]["name"]: doc for doc in _load(SECRET_EXAMPLE)}
    for workload, container, args, _ in _commands(objects):
        pod = workload["spec"]["template"]["spec"]
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        for flag in ("model", "auth_token_file", "router_token_file", "chat_template"):
            value = getattr(args, flag, None)
            if value is None:
                continue
            path = PurePosixPath(value)
            under = [m for m in mounts if path.is_relative_to(m) and path != PurePosixPath(m)]
            assert under, f"{_name(workload)}: --{flag.replace('_', '-')} {value} is not mounted"
            mount = mounts[max(under, key=len)]
            assert mount.get("readOnly"), f"{_name(workload)}: {mount['mountPath']} writable"
            volume = volumes[mount["name"]]
            if "secret" not in volume:
                continue
            secret = secrets[volume["secret"]["secretName"]]
            key = {item["path"]: item["key"] for item in volume["secret"]["items"]}[
                str(path.relative_to(mount["mountPath"]))]
            data = secret["stringData"][key]
            assert "REPLACE-ME" in data, "the example Secret must hold visible placeholders"
            if flag == "auth_token_file":
                parse_tokens(data.splitlines(), f"{secret['metadata']['name']}/{key}")
            else:
                (tmp_path / key).write_text(data)
                load_router_token(tmp_path / key)


def test_example_secrets_are_in_the_namespace():
    (namespace,) = {_namespace(_render(path)) for path in OVERLAYS.values()}
    for doc in _load(SECRET_EXAMPLE):
        assert doc["kind"] == "Secret"
        assert doc["metadata"]["namespace"] == namespace


# ----- 3. ports --------------------------------------------------------------------------------

@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ports_agree(overlay):
    objects = _render(OVERLAYS[overlay])
    namespace = _namespace(objects)
    services = [obj for obj in objects if obj["kind"] == "Service"]
    commands = {args.command: (workload, container, args)
                for workload, container, args, _ in _commands(objects)}

    for workload, container, args in commands.values():
        ports = _container_ports(container)
        assert ports["grpc"] == args.port
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["grpc"]["port"] == args.port, f"{_name(workload)} {probe}"
            # The overall status is service ""; the router's liveness name is SERVING while
            # it runs, so an engine outage does not restart it.
            expected = LIVENESS_SERVICE if args.command == "router" and probe != \
                "readinessProbe" else ""
            assert container[probe]["grpc"].get("service", "") == expected, \
                f"{_name(workload)} {probe}"

    # The engines: metrics port, Prometheus annotations, the headless Service.
    engine, engine_container, serve = commands["serve"]
    assert engine["kind"] == "StatefulSet"
    annotations = engine["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == "/metrics"
    assert int(annotations["prometheus.io/port"]) == serve.metrics_port
    assert _container_ports(engine_container)["metrics"] == serve.metrics_port
    headless = _one(objects, "Service", engine["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"

    # Every Service selects one workload's pods, and its ports reach container ports (a
    # headless Service does no port mapping: port == target port).
    for service in services:
        selector = service["spec"]["selector"]
        selected = [w for w in _workloads(objects)
                    if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert len(selected) == 1, f"{_name(service)} selects {len(selected)} workloads"
        (container,) = selected[0]["spec"]["template"]["spec"]["containers"]
        ports = _container_ports(container)
        for port in service["spec"]["ports"]:
            target = port["targetPort"]
            number = ports.get(target) if isinstance(target, str) else target
            assert number in ports.values(), f"{_name(service)}: {target} is no container port"
            if service["spec"].get("clusterIP") == "None":
                assert port["port"] == number, f"{_name(service)}: headless port != target"

    # The router finds the engines by the headless Service's DNS name, on their gRPC port.
    router, router_container, route = commands["router"]
    assert route.replicas_dns, "the router must find the engines with --replicas-dns"
    for name in route.replicas_dns:
        host, _, port = name.rpartition(":")
        assert host == f"{headless['metadata']['name']}.{namespace}.{CLUSTER_DOMAIN}"
        assert int(port) == serve.port
        assert int(port) in [p["port"] for p in headless["spec"]["ports"]]
    assert not getattr(route, "replica", None), "fixed --replica addresses do not scale"
    front = [s for s in services if s is not headless and
             s["spec"]["selector"].items() <= router["spec"]["template"]["metadata"][
                 "labels"].items()]
    assert front, "the router needs a Service"


# ----- 4. Dockerfiles -------------------------------------------------------------------------

def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


DOCKERFILES = tuple(sorted(p for p in DEPLOY.glob("Dockerfile.*") if p.suffix != ".dockerignore"))


def test_dockerfiles_exist_for_every_image():
    assert [p.name for p in DOCKERFILES] == ["Dockerfile.cpu", "Dockerfile.cuda"]
    images = set()
    for overlay in OVERLAYS.values():
        for workload in _workloads(_render(overlay)):
            images |= {c["image"] for c in workload["spec"]["template"]["spec"]["containers"]}
    tags = {image.rpartition(":")[2] for image in images}  # the registry may be set
    assert tags == {"cpu", "cuda"}, images
    for tag in tags:
        assert (DEPLOY / f"Dockerfile.{tag}").exists(), tag


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_runs_a_real_agentix_command(path):
    steps = _instructions(path)
    (entrypoint,) = [json.loads(rest) for word, rest in steps if word == "ENTRYPOINT"]
    (cmd,) = [json.loads(rest) for word, rest in steps if word == "CMD"]
    assert entrypoint == ["agentix"]
    subcommands = next(action for action in build_parser()._actions
                       if action.dest == "command").choices
    assert cmd[0] in subcommands, f"CMD {cmd[0]!r} is no agentix subcommand"
    _parse(cmd)

    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["agentix"] == "server.cli:main"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_copies_the_project_and_drops_root(path):
    steps = _instructions(path)
    copied = set()
    for word, rest in steps:
        if word == "COPY":
            *sources, _ = rest.split()
            for source in sources:
                assert (ROOT / source).exists(), f"{path.name}: COPY {source}: not in the repo"
                copied.add(source.rstrip("/"))
    # Every top-level package pyproject.toml installs is copied before `pip install -e .`.
    tomllib = pytest.importorskip("tomllib")
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"]["find"]["include"]
    assert {pattern.rstrip("*") for pattern in include} <= copied
    assert {"pyproject.toml", "constraints.txt"} <= copied
    (user,) = [rest for word, rest in steps if word == "USER"]
    uid = int(user.split(":")[0])
    assert uid != 0
    for overlay in OVERLAYS.values():
        for workload in _workloads(_render(overlay)):
            context = workload["spec"]["template"]["spec"]["securityContext"]
            assert context["runAsNonRoot"] and context["runAsUser"] == uid
    ignore = (path.parent / f"{path.name}.dockerignore").read_text().split()
    assert ".venv" in ignore and ".git" in ignore


# What a deployment sizes for its machines; every other engine field keeps EngineConfig's
# default (README, "One set of defaults"): a policy, prefix cache, KV memory, preemption or
# first-token deadline set here would be a second set of defaults.
SIZING = frozenset({"model", "device", "dtype", "kv_cache_memory_gb", "max_num_seqs"})


def _serve_commands() -> list[list[str]]:
    """The argv of every `agentix serve` the manifests (both overlays) and the images run."""
    commands = [argv for overlay in OVERLAYS.values()
                for _, _, args, argv in _commands(_render(overlay)) if args.command == "serve"]
    for path in DOCKERFILES:
        commands += [json.loads(rest) for word, rest in _instructions(path) if word == "CMD"]
    return commands


def test_engines_run_the_engine_defaults():
    from engine import EngineConfig
    from server.cli_checks import engine_config

    default = EngineConfig().as_flat()
    commands = _serve_commands()
    assert len(commands) == 4  # the engine StatefulSet in two overlays, two images
    for argv in commands:
        args = _parse(argv)
        config = engine_config(args, args.model).as_flat()
        changed = {name for name, value in config.items() if value != default[name]}
        assert changed <= SIZING, f"agentix {' '.join(argv)} sets {sorted(changed - SIZING)}"
