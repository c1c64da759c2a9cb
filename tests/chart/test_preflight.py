import re

import pytest

from chartlib import CHART, container, role, sts

QUANTITY_UNITS = "(Ki, Mi, Gi, Ti: powers of 1024; k, M, G, T: of 1000; m: a thousandth)"
IMAGE_GRAMMAR = (
    "write [registry/]path[:tag][@sha256:<64 hex digits>], the path in lowercase letters and digits separated by '.', "
    "'_', '__' or '-', the tag in letters, digits, '_', '.' and '-'"
)
SHA = "sha256:" + "0123456789abcdef" * 4

# (values, the exact message `fail` prints: it names the value to change)
FAILURES = {
    # Quantities: the value's path and an example, not the schema's 100-character pattern, which
    # tells a person nothing.
    "bad memory quantity": (
        {"roles": {"actor": role(resources={"memory": "1Gii"})}},
        f'roles.actor.resources.memory: "1Gii" is not a Kubernetes quantity: write a number with an optional unit, e.g. '
        f"16Gi or 512Mi {QUANTITY_UNITS}",
    ),
    "bad cpu quantity in workerDefaults": (
        {"workerDefaults": {"resources": {"cpu": "two"}}, "roles": {"a": role()}},
        f'workerDefaults.resources.cpu: "two" is not a Kubernetes quantity: write a number with an optional unit, e.g. '
        f"4 or 500m {QUANTITY_UNITS}",
    ),
    "bad shm quantity": (
        {"roles": {"a": role(shm={"sizeLimit": "lots"})}},
        f'roles.a.shm.sizeLimit: "lots" is not a Kubernetes quantity: write a number with an optional unit, e.g. 16Gi '
        f"{QUANTITY_UNITS}",
    ),
    "bad quantity in a fork's overrides": (
        {
            "roles": {"a": role()},
            "forks": {"f": {"target": "a", "mode": "pod", "overrides": {"resources": {"cpu": "1 "}}}},
        },
        f'forks.f.overrides.resources.cpu: "1 " is not a Kubernetes quantity: write a number with an optional unit, '
        f"e.g. 4 or 500m {QUANTITY_UNITS}",
    ),
    # A memory without a unit counts bytes.
    "memory of one byte": (
        {"roles": {"actor": role(resources={"memory": "1"})}},
        'roles.actor.resources.memory: "1" is less than 1Mi, too little memory to start a worker (a memory without a '
        'unit counts bytes): write its unit, e.g. "1Gi"',
    ),
    "memory as a YAML number": (
        {"workerDefaults": {"resources": {"memory": 16}}, "roles": {"a": role()}},
        'workerDefaults.resources.memory: "16" is less than 1Mi, too little memory to start a worker (a memory without '
        'a unit counts bytes): write its unit, e.g. "16Gi"',
    ),
    "memory in thousandths of a byte": (
        {
            "roles": {"a": role()},
            "forks": {"f": {"target": "a", "mode": "pod", "overrides": {"resources": {"memory": "512m"}}}},
        },
        'forks.f.overrides.resources.memory: "512m" is less than 1Mi, too little memory to start a worker (a memory '
        'without a unit counts bytes): write its unit, e.g. "1Gi"',
    ),
    # Image references the kubelet cannot pull: the CLI refuses them (release/image_reference.py), so does the chart.
    "uppercase image path": (
        {"image": {"repository": "ghcr.io/InclusionAI/areal-runtime"}, "roles": {"actor": role()}},
        'the image of roles.actor, "ghcr.io/InclusionAI/areal-runtime:v1.0.4" (from roles.actor.image, '
        "workerDefaults.image or image), is not a container image reference: the repository path must be lowercase: "
        'use "ghcr.io/inclusionai/areal-runtime:v1.0.4"',
    ),
    "uppercase image path with a digest, in a pod-mode fork": (
        {
            "roles": {"a": role()},
            "forks": {"f": {"target": "a", "mode": "pod", "overrides": {"image": {"repository": "Areal", "tag": SHA}}}},
        },
        f'the image of forks.f, "Areal@{SHA}" (from forks.f.overrides.image, roles.a.image, workerDefaults.image or '
        f'image), is not a container image reference: the repository path must be lowercase: use "areal@{SHA}"',
    ),
    "image with a space": (
        {"roles": {"actor": role(image={"repository": "areal runtime"})}},
        'the image of roles.actor, "areal runtime:v1.0.4" (from roles.actor.image, workerDefaults.image or image), is '
        f"not a container image reference: {IMAGE_GRAMMAR}",
    ),
    "uppercase test image": (
        {"tests": {"image": {"repository": "registry.example.com/Areal/python"}}, "roles": {"a": role()}},
        'the test Pod\'s image, "registry.example.com/Areal/python:v1.0.4" (from tests.image or image), is not a '
        'container image reference: the repository path must be lowercase: use "registry.example.com/areal/python:v1.0.4"',
    ),
    "uppercase reaper image": (
        {
            "reaper": {
                "enabled": True,
                "image": {"repository": "registry.example.com/areal-workers/Reaper", "tag": "v1"},
            }
        },
        'the reaper\'s image, "registry.example.com/areal-workers/Reaper:v1" (from reaper.image), is not a container '
        'image reference: the repository path must be lowercase: use "registry.example.com/areal-workers/reaper:v1"',
    ),
    "empty experiment": (
        {"experiment": ""},
        "experiment is empty: set experiment to the AReaL experiment_name (e.g. --set experiment=gsm8k-grpo)",
    ),
    "blank trial": (
        {"trial": "  "},
        "trial is empty: set trial to the AReaL trial_name (e.g. --set trial=trial0)",
    ),
    "fork named like a role": (
        {"roles": {"actor": role()}, "forks": {"actor": {"target": "actor"}}},
        'forks.actor: "actor" is also defined in roles; rename the fork or remove roles.actor',
    ),
    "colocation named like a role": (
        {"roles": {"actor": role()}, "colocations": {"actor": "actor"}},
        'colocations.actor: "actor" is also defined in roles; rename the colocation or remove roles.actor',
    ),
    "colocation named like a fork": (
        {"roles": {"actor": role()}, "forks": {"ref": {"target": "actor"}}, "colocations": {"ref": "actor"}},
        'colocations.ref: "ref" is also defined in forks; remove colocations.ref or forks.ref',
    ),
    "colocation target missing": (
        {"roles": {"actor": role(), "rollout": role()}, "colocations": {"critic": "trainer"}},
        'colocations.critic targets "trainer", which is not in roles; add roles.trainer or set colocations.critic to one of: actor, rollout',
    ),
    "fork target missing": (
        {"roles": {"actor": role()}, "forks": {"ref": {"target": "critic"}}},
        'forks.ref.target is "critic", which is not in roles; add roles.critic or set forks.ref.target to one of: actor',
    ),
    "fork target missing, no roles": (
        {"forks": {"ref": {"target": "critic"}}},
        'forks.ref.target is "critic", which is not in roles; add roles.critic or set forks.ref.target to one of: none, roles is empty',
    ),
    "fork of a colocated role": (
        {"roles": {"actor": role()}, "colocations": {"critic": "actor"}, "forks": {"ref": {"target": "critic"}}},
        'forks.ref.target is "critic", which is not in roles; add roles.critic or set forks.ref.target to one of: actor',
    ),
    "pod-mode fork replicas differ from the target's": (
        {"roles": {"actor": role(2)}, "forks": {"helper": {"target": "actor", "mode": "pod", "replicas": 3}}},
        "forks.helper.replicas is 3 but its target roles.actor.replicas is 2; a pod-mode fork runs one worker per target worker: set forks.helper.replicas to 2 or remove it",
    ),
    "overrides on a process fork": (
        {"roles": {"actor": role()}, "forks": {"ref": {"target": "actor", "overrides": {"extraPorts": 2}}}},
        "forks.ref.overrides only applies to forks.ref.mode=pod (a process fork runs inside its target's container); remove forks.ref.overrides or set forks.ref.mode=pod",
    ),
    "name collision": (
        {"roles": {"ref_model": role(), "ref-model": role()}},
        'roles.ref-model and roles.ref_model both become the object name "rel-areal-workers-ref-model" ("_" turns into "-", long names are cut); rename one of them',
    ),
    "ports beyond 65535": (
        {"roles": {"a": role(guardPort=65534, extraPorts=2)}},
        "a: guard port 65534 plus extraPorts 2 exceeds 65535; lower extraPorts or guardPort (or guard.port) in roles.a or workerDefaults",
    ),
    "hostNetwork roles on the same guard port": (
        {"roles": {"actor": role(hostNetwork=True), "rollout": role(hostNetwork=True, extraPorts=3)}},
        "actor (ports 8000-8001) and rollout (ports 8000-8003) both use hostNetwork with overlapping ports; set roles.rollout.guardPort to 8002 or higher so their workers can share a node",
    ),
    "hostNetwork pod fork on its target's ports": (
        {
            "roles": {"actor": role(hostNetwork=True)},
            "forks": {"helper": {"target": "actor", "mode": "pod", "overrides": {"hostNetwork": True}}},
        },
        "actor (ports 8000-8001) and helper (ports 8000-8001) both use hostNetwork with overlapping ports; set forks.helper.overrides.guardPort to 8002 or higher so their workers can share a node",
    ),
    "reserved env variable": (
        {"roles": {"a": role(env={"AREAL_WORKER_INDEX": "0"})}},
        "env.AREAL_WORKER_INDEX, set in roles.a or workerDefaults, is set by the chart from the downward API; remove it",
    ),
    "reserved env variable in a pod fork": (
        {"roles": {"a": role()}, "forks": {"p": {"target": "a", "mode": "pod", "overrides": {"env": {"POD_IP": "1"}}}}},
        "env.POD_IP, set in forks.p.overrides, roles.a or workerDefaults, is set by the chart from the downward API; remove it",
    ),
    "reserved AReaL identity: experiment": (
        {"roles": {"a": role(env={"AREAL_EXPERIMENT_NAME": "x"})}},
        "env.AREAL_EXPERIMENT_NAME, set in roles.a or workerDefaults, is set by the chart from experiment; remove it",
    ),
    "reserved AReaL identity: trial": (
        {"workerDefaults": {"env": {"AREAL_TRIAL_NAME": "x"}}, "roles": {"a": role()}},
        "env.AREAL_TRIAL_NAME, set in roles.a or workerDefaults, is set by the chart from trial; remove it",
    ),
    "reserved AReaL identity: role": (
        {"roles": {"a": role(env={"AREAL_ROLE": "b"})}},
        "env.AREAL_ROLE, set in roles.a or workerDefaults, is set by the chart from the role name; remove it",
    ),
    "reserved AReaL identity: worker id in a pod fork": (
        {
            "roles": {"a": role()},
            "forks": {
                "p": {
                    "target": "a",
                    "mode": "pod",
                    "overrides": {
                        "env": {"AREAL_WORKER_ID": {"valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}}
                    },
                }
            },
        },
        "env.AREAL_WORKER_ID, set in forks.p.overrides, roles.a or workerDefaults, is set by the chart from the role name and AREAL_WORKER_INDEX; remove it",
    ),
    "chart-managed pod label": (
        {"roles": {"a": role(podLabels={"app.kubernetes.io/name": "x"})}},
        "podLabels.app.kubernetes.io/name, set in roles.a or workerDefaults, is a label the chart manages; remove it",
    ),
    "chart-managed pod annotation": (
        {"workerDefaults": {"podAnnotations": {"areal.io/role-name": "x"}}, "roles": {"a": role()}},
        "podAnnotations.areal.io/role-name, set in roles.a or workerDefaults, is an annotation the chart manages; remove it",
    ),
    "inverted allocated port range": (
        {"networkPolicy": {"allocatedPorts": {"start": 30000, "end": 20000}}},
        "networkPolicy.allocatedPorts.start (30000) is greater than networkPolicy.allocatedPorts.end (20000); swap them",
    ),
    "network policy without controller": (
        {"networkPolicy": {"controller": {"podSelector": None}}},
        "networkPolicy.controller admits nobody, so the trainer could not reach the workers: set networkPolicy.controller.podSelector, .namespaceSelector or .cidrs, or set networkPolicy.enabled=false",
    ),
    "two controller owners": (
        {
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1"},
                {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u2", "controller": True},
                {"apiVersion": "v1", "kind": "Pod", "name": "q", "uid": "u3", "controller": True},
            ]
        },
        "ownerReferences[1] and ownerReferences[2] both set controller: true, and an object has at most one controller; set controller: false on all but one",
    ),
    "kueue label on pods": (
        {"roles": {"a": role(podLabels={"kueue.x-k8s.io/queue-name": "lq"})}},
        "podLabels.kueue.x-k8s.io/queue-name, set in roles.a or workerDefaults: Kueue labels on pods would queue each worker alone; set kueue.queueName (and kueue.priorityClass) instead, which queue the role as one group",
    ),
    "kueue priority without a queue": (
        {"roles": {"a": role(kueue={"priorityClass": "high"})}},
        'a: kueue.priorityClass "high" is set without kueue.queueName (in roles.a or workerDefaults); set kueue.queueName to the role\'s LocalQueue or remove kueue.priorityClass',
    ),
    "kueue topology without a queue": (
        {"roles": {"a": role(kueue={"preferredTopology": "example.com/rack"})}},
        'a: kueue.preferredTopology "example.com/rack" is set without kueue.queueName (in roles.a or workerDefaults): Kueue places only the workers it admits; set kueue.queueName to a LocalQueue whose ResourceFlavor has a Topology, or use exclusiveTopology (the kube-scheduler\'s own placement)',
    ),
    "kueue required and preferred topology": (
        {"roles": {"a": role(kueue={"queueName": "q", "requiredTopology": "x.io/b", "preferredTopology": "x.io/r"})}},
        "a: kueue.requiredTopology and kueue.preferredTopology are both set (in roles.a or workerDefaults); Kueue takes one: keep requiredTopology for a hard requirement, preferredTopology for a wish",
    ),
    "trial ..": (
        {"trial": ".."},
        'trial is "..": it becomes a directory of name_resolve\'s records and the fileroot, and ".." names another one; choose another name',
    ),
    "experiment .": (
        {"experiment": "."},
        'experiment is ".": it becomes a directory of name_resolve\'s records and the fileroot, and "." names another one; choose another name',
    ),
    "reaper without an image": (
        {"reaper": {"enabled": True, "image": {"repository": " "}}},
        "reaper.enabled is true but reaper.image.repository is empty: set it to an image with areal-workers and helm on its PATH (AReaL's runtime image has neither): images/reaper/Dockerfile builds one and make release REGISTRY=R pushes it, then --set reaper.image.repository=R/areal-workers/reaper (its tag defaults to the chart's version)",
    ),
    "shared storage without a volume": (
        {"sharedStorage": {"enabled": True}},
        "sharedStorage.enabled is true but names no volume: set sharedStorage.claimName to a ReadWriteMany PersistentVolumeClaim of the release namespace, or sharedStorage.volume to a volume source (e.g. {nfs: {server: ..., path: ...}})",
    ),
    "shared storage with two volumes": (
        {"sharedStorage": {"enabled": True, "claimName": "c", "volume": {"emptyDir": {}}}},
        "sharedStorage sets both claimName and volume: keep one of them",
    ),
    "unshared nfs paths refused": (
        {"sharedStorage": {"uncoveredPaths": "fail"}},
        "cluster.fileroot /tmp/areal, cluster.nameResolve.nfsRecordRoot /tmp/areal/name_resolve: on no volume every worker mounts, so AReaL's workers and trainer would not see each other's files (name_resolve type nfs); set sharedStorage.enabled with a claimName and put cluster.fileroot and cluster.nameResolve.nfsRecordRoot under sharedStorage.mountPath (/areal-shared), use cluster.nameResolve.type etcd3, or set sharedStorage.uncoveredPaths=warn",
    ),
    # The matrix of names against rbac/cluster/admission-policy.yaml: test_policy_identity.py.
    "controller identity the admission policy does not match": (
        {"controllerRbac": {"create": True, "serviceAccountName": "trainer"}},
        'controllerRbac.serviceAccountName "trainer" is not matched by rbac/cluster/admission-policy.yaml, whose policies act on the ServiceAccounts named areal-controller or areal-reaper or ending in areal-workers-controller or areal-workers-reaper: a controller identity they do not match could create a token Secret of any ServiceAccount of the namespace and act as it. Set controllerRbac.serviceAccountName to a name ending in areal-workers-controller (e.g. "trainer-areal-workers-controller"), or leave it empty for the chart\'s own',
    ),
    "built identity the admission policy does not match": (
        {"controllerRbac": {"create": True}, "nameOverride": "Workers"},
        "the controller ServiceAccount \"rel-Workers-areal-workers-controller\", built from the release name, fullnameOverride and nameOverride, is not matched by rbac/cluster/admission-policy.yaml, whose policies act on the ServiceAccounts named areal-controller or areal-reaper or ending in areal-workers-controller or areal-workers-reaper: a controller identity they do not match could create a token Secret of any ServiceAccount of the namespace and act as it. Use only lowercase letters, digits and '-' in nameOverride and fullnameOverride",
    ),
}


@pytest.mark.parametrize("values,message", FAILURES.values(), ids=FAILURES.keys())
def test_preflight_fails_with_a_message_naming_the_value(values, message, render_error):
    err = render_error(values)
    assert "execution error at " in err and message in err, err
    # Helm names the template that failed: one of the release's objects, never the helm test hook,
    # which would send a person to the wrong file.
    assert "templates/tests/" not in err, err


def test_a_preflight_error_names_a_template_of_the_release_not_the_test_hook(render_error):
    err = render_error({"roles": {"actor": role()}, "forks": {"ref": {"target": "critic"}}})
    assert "execution error at (areal-workers/templates/statefulset.yaml:" in err, err


def test_what_the_quantity_checks_accept_renders_as_given(render):
    accepted = {"1Mi": "1Mi", "1048576": "1048576", "4294967296": "4294967296", "1.5Gi": "1.5Gi", "2e6": "2e6"}
    for memory, rendered in accepted.items():
        docs = render({"roles": {"actor": role(resources={"memory": memory, "cpu": "500m"})}})
        assert container(sts(docs, "actor"))["resources"]["limits"]["memory"] == rendered, memory
    docs = render({"roles": {"actor": role(resources={"memory": 17179869184, "cpu": 0.5})}})  # YAML numbers: bytes
    assert container(sts(docs, "actor"))["resources"]["requests"] == {"cpu": "0.5", "memory": "17179869184"}


def test_a_bad_quantity_is_reported_without_the_grammar(render_error):
    err = render_error({"roles": {"actor": role(resources={"memory": "1Gii"})}})
    assert "pattern" not in err and "[KMGTPE]" not in err and len(err.splitlines()[0]) < 300, err


# (release name, the exact message): helm accepts them, the Services named after them cannot have them
RELEASE_FAILURES = {
    "1abc": 'release name "1abc" cannot start the chart\'s Service names: use a DNS-1035 label (lowercase letters, digits and \'-\', starting with a letter and ending with a letter or digit), e.g. "aw-1abc"',
    "a.b": 'release name "a.b" cannot start the chart\'s Service names: use a DNS-1035 label (lowercase letters, digits and \'-\', starting with a letter and ending with a letter or digit), e.g. "aw-a-b"',
}


@pytest.mark.parametrize("release,message", RELEASE_FAILURES.items(), ids=RELEASE_FAILURES.keys())
def test_a_release_name_the_services_cannot_carry_fails_with_a_name_that_works(release, message, render_error):
    err = render_error({"roles": {"a": role()}}, release=release)
    assert "execution error at " in err and message in err, err


def test_every_fail_in_the_chart_is_exercised():
    """Each `fail` format string in the templates matches at least one message tested above."""
    source = "".join(p.read_text() for p in sorted((CHART / "templates").rglob("*")) if p.is_file())
    formats = re.findall(r'fail (?:\(printf )?"((?:[^"\\]|\\.)*)"', source)
    assert len(formats) == 33
    for fmt in formats:
        pattern = re.escape(fmt.replace('\\"', '"'))
        for verb in ("%s", "%q", "%d"):
            pattern = pattern.replace(re.escape(verb), ".+")
        messages = [message for _, message in FAILURES.values()] + list(RELEASE_FAILURES.values())
        assert any(re.fullmatch(pattern, message) for message in messages), fmt
