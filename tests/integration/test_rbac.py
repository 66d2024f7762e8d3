"""``karpy run`` as the chart's ServiceAccount: its RBAC is enough, and no more than the table.

The chart (charts/karpy, kwok) is installed with helm in a namespace of this
module's; karpy runs as a process of its own with a kubeconfig holding only a
token of the chart's ServiceAccount (TokenRequest API), its leader election
Lease in that namespace. In order:

1. the seed walkthrough of test_run.py and the drift replacement of
   test_run_disruption.py, the very same test functions, against this karpy;
2. the API server's audit log (``scripts/control-plane up`` writes one, see
   docs/control-plane.md) of everything that ServiceAccount did, after karpy
   stopped: no request refused, every one granted by the table of
   :mod:`karpy.kube.permissions`, and every granted verb it never used one of
   :data:`~karpy.kube.permissions.NOT_EXERCISED_ON_KWOK`; karpy's log has no
   "forbidden";
3. what the API server says the ServiceAccount may do (a SelfSubjectRulesReview
   with its token, less what any ServiceAccount may do) is the table, the
   installed ClusterRole and Role (and helm's rendering for AWS) are the
   table's rules, and ``kubectl auth can-i`` with its token denies Secrets,
   pod creation, RBAC escalation and ``*``.

The audit test needs the two runs before it: run the module as a whole.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from karpy.kube.permissions import (
    NOT_EXERCISED_ON_KWOK,
    ApiRequest,
    Provider,
    Scope,
    granting_rule,
    policy_rules,
    rules_for,
)

from . import test_run as walkthrough
from . import test_run_disruption as disruption
from .conftest import ControlPlane
from .karpy_run import (
    CHART,
    KarpyProcess,
    ServiceAccount,
    get_items,
    helm,
    install_chart,
    remove_pools,
    service_account_kubeconfig,
    start_karpy_run,
)

pytestmark = pytest.mark.integration

RELEASE = "karpy-rbac"
NAMESPACE = "karpy-rbac"
PROVIDER = Provider.KWOK
ANY_ACCOUNT = "default"  # what every ServiceAccount may do: the one the namespace comes with


@dataclass
class Installed:
    plane: ControlPlane
    account: ServiceAccount
    kubeconfig: Path
    karpy: KarpyProcess
    # Which of the runs before the audit passed, and when karpy stopped.
    ran: set[str]
    stopped_at: float = 0.0

    def stop(self) -> None:
        """Remove the test pools (karpy drains them), then stop karpy as a pod is stopped."""
        if self.stopped_at:
            return
        remove_pools(self.plane, walkthrough.NODEPOOL, disruption.DRIFT_POOL)
        self.karpy.signal(signal.SIGTERM)
        code = self.karpy.wait_exit(30)
        self.stopped_at = time.time()
        assert code == 0, self.karpy.tail()


@pytest.fixture(scope="module")
def installed(crds: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    plane = crds
    work = tmp_path_factory.mktemp("rbac")
    # No Deployment of the chart's own: this module runs karpy itself, as the chart's account.
    account = install_chart(
        plane, RELEASE, NAMESPACE, "rbac.create=true", "replicas=0", f"settings.cloudProvider={PROVIDER}"
    )
    kubeconfig = service_account_kubeconfig(plane, account, work / "karpy.kubeconfig")
    karpy = start_karpy_run(
        plane,
        "rbac",
        work,
        "--kubeconfig",
        str(kubeconfig),
        "--leader-election-namespace",
        NAMESPACE,
        env={"METRICS_PORT": "0", "HEALTH_PROBE_PORT": "0", "LOG_LEVEL": "info"},
    )
    state = Installed(plane, account, kubeconfig, karpy, set())
    try:
        karpy.wait_for("controllers running")
        yield state
    finally:
        try:
            state.stop()
        finally:
            karpy.stop()
            helm(plane, "uninstall", RELEASE, "--namespace", NAMESPACE)
            plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


# -- 1. the runs -------------------------------------------------------------------


def test_the_seed_walkthrough_runs_as_the_chart_account(installed: Installed, namespace: str) -> None:
    walkthrough.test_pending_pods_get_kwok_nodes_and_empty_nodes_go(installed.plane, namespace)
    installed.ran.add("walkthrough")


def test_a_drift_replacement_runs_as_the_chart_account(
    installed: Installed, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    disruption.test_a_template_change_drifts_every_node_and_each_is_replaced_before_it_goes(
        installed.plane, namespace, tmp_path, capsys
    )
    installed.ran.add("drift")


# -- 2. the audit log --------------------------------------------------------------


# The audit annotation of the authorizer's answer ("allow" or "forbid").
DECISION = "authorization.k8s.io/decision"


def _namespace_terminating(status: dict[str, Any]) -> bool:
    """A 403 of a write into a namespace being deleted: refused by admission, not by RBAC."""
    causes = (status.get("details") or {}).get("causes") or ()
    return any(cause.get("reason") == "NamespaceTerminating" for cause in causes)


def audit_requests(plane: ControlPlane, username: str, until: float) -> tuple[list[ApiRequest], list[str]]:
    """What ``username`` asked for before ``until`` (epoch seconds), and what was refused.

    A refusal is a request RBAC denied, or a 403 for any reason but a namespace
    being deleted (karpy's drain evicts pods of a test namespace going away,
    which admission refuses and karpy expects).
    """
    requests: dict[str, ApiRequest] = {}
    refused: list[str] = []
    for line in (plane.state_dir / "audit.log").read_text().splitlines():
        event = json.loads(line)
        if event["user"]["username"] != username or _epoch(event["requestReceivedTimestamp"]) > until:
            continue
        ref = event.get("objectRef")
        if ref is None:
            request = ApiRequest(event["verb"], "", event["requestURI"].split("?")[0])
        else:
            resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            request = ApiRequest(
                event["verb"],
                ref.get("apiGroup", ""),
                resource,
                ref.get("namespace", ""),
                ref.get("name", ""),
            )
        requests[event["auditID"]] = request
        status = event.get("responseStatus") or {}
        denied = (event.get("annotations") or {}).get(DECISION) == "forbid"
        if denied or (status.get("code") == 403 and not _namespace_terminating(status)):
            refused.append(f"{event['verb']} {event['requestURI']}: {status}")
    return list(requests.values()), refused


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def test_the_audit_log_shows_karpy_used_the_table_and_nothing_was_refused(installed: Installed) -> None:
    if installed.ran != {"walkthrough", "drift"}:
        pytest.fail(
            f"the runs before this test did not pass (passed: {sorted(installed.ran)}): run the module"
        )
    installed.stop()
    log = installed.karpy.log()
    assert "forbidden" not in log.lower(), installed.karpy.tail()

    requests, refused = audit_requests(installed.plane, installed.account.username, installed.stopped_at)
    assert requests, "no audit events of karpy's ServiceAccount"
    assert not refused, "\n".join(refused)
    rules = rules_for(PROVIDER)
    ungranted = {request for request in requests if granting_rule(rules, request, NAMESPACE) is None}
    assert not ungranted
    used = {
        (rule.group, rule.resource, request.verb)
        for request in requests
        for rule in [granting_rule(rules, request, NAMESPACE)]
        if rule is not None
    }
    granted = {(rule.group, rule.resource, verb) for rule in rules for verb in rule.verbs}
    never_used = granted - used
    print(f"\ngranted to karpy and not used by this run: {sorted(never_used)}")
    # Each verb the run did not use must be one the table explains; those can still be used
    # by chance (a cache miss, a repeated Event), so the check is inclusion, not equality.
    assert never_used <= set(NOT_EXERCISED_ON_KWOK), never_used - set(NOT_EXERCISED_ON_KWOK)


# -- 3. what the account may do ----------------------------------------------------


def _kubectl_as(
    plane: ControlPlane, kubeconfig: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl with ``kubeconfig``'s credentials; its exit status is the caller's to judge."""
    return subprocess.run(
        [plane.kubectl_path, "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def allowed(plane: ControlPlane, kubeconfig: Path) -> set[tuple[str, str, str, str]]:
    """(group, resource or URL, resource name, verb) the account of ``kubeconfig`` may do in NAMESPACE."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": NAMESPACE},
    }
    result = _kubectl_as(
        plane, kubeconfig, "create", "--validate=false", "-f", "-", "-o", "json", stdin=json.dumps(review)
    )
    assert result.returncode == 0, result.stderr
    status: dict[str, Any] = json.loads(result.stdout)["status"]
    assert not status.get("incomplete"), status.get("evaluationError")
    rules: set[tuple[str, str, str, str]] = set()
    for rule in status.get("resourceRules") or ():
        for group in rule.get("apiGroups") or ("",):
            for resource in rule["resources"]:
                for name in rule.get("resourceNames") or ("",):
                    rules.update((group, resource, name, verb) for verb in rule["verbs"])
    for rule in status.get("nonResourceRules") or ():
        for url in rule["nonResourceURLs"]:
            rules.update(("", url, "", verb) for verb in rule["verbs"])
    return rules


def test_what_the_account_may_do_is_the_table(installed: Installed, tmp_path: Path) -> None:
    plane = installed.plane
    baseline = service_account_kubeconfig(
        plane, ServiceAccount(NAMESPACE, ANY_ACCOUNT), tmp_path / "default.kubeconfig"
    )
    extra = allowed(plane, installed.kubeconfig) - allowed(plane, baseline)
    table = {
        (rule.group, rule.resource, name, verb)
        for rule in rules_for(PROVIDER)
        for name in rule.resource_names or ("",)
        for verb in rule.verbs
    }
    assert extra == table - allowed(plane, baseline)


def test_the_installed_roles_hold_the_tables_rules(installed: Installed) -> None:
    plane = installed.plane
    role = json.loads(plane.kubectl("get", "role", RELEASE, "-n", NAMESPACE, "-o", "json"))
    cluster_role = json.loads(plane.kubectl("get", "clusterrole", RELEASE, "-o", "json"))
    assert cluster_role["rules"] == policy_rules(PROVIDER, Scope.CLUSTER)
    assert role["rules"] == policy_rules(PROVIDER, Scope.NAMESPACE)
    bindings = get_items(
        plane, "rolebindings", "-n", NAMESPACE, "-l", f"app.kubernetes.io/instance={RELEASE}"
    )
    assert [binding["subjects"] for binding in bindings] == [
        [{"kind": "ServiceAccount", "name": installed.account.name, "namespace": NAMESPACE}]
    ]


def test_helm_renders_the_aws_roles_from_the_table(installed: Installed) -> None:
    # The installed release is kwok's; helm itself renders AWS's (no Nodes created, /version read).
    rendered = helm(
        installed.plane,
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--set",
        "rbac.create=true",
        "--set",
        f"settings.cloudProvider={Provider.AWS}",
        "--set",
        "settings.clusterName=it-rbac",  # AWS needs one (values.schema.json)
        "--show-only",
        "templates/rbac.yaml",
    )
    objects = {obj["kind"]: obj for obj in yaml.safe_load_all(rendered) if obj}
    assert objects["ClusterRole"]["rules"] == policy_rules(Provider.AWS, Scope.CLUSTER)
    assert objects["Role"]["rules"] == policy_rules(Provider.AWS, Scope.NAMESPACE)


@pytest.mark.parametrize(
    "question",
    [
        ("list", "secrets", "--all-namespaces"),
        ("get", "secrets", "-n", NAMESPACE),
        ("create", "pods", "-n", NAMESPACE),
        ("create", "pods", "-n", "default"),
        ("escalate", "clusterroles"),
        ("bind", "clusterroles"),
        ("create", "clusterrolebindings"),
        ("*", "*", "--all-namespaces"),
        ("update", "nodes", "--subresource=status"),
        ("create", "pods", "--subresource=binding", "-n", "default"),
        ("create", "serviceaccounts", "--subresource=token", "-n", NAMESPACE),
        ("update", "leases", "-n", "kube-system"),
    ],
)
def test_the_account_is_refused_what_karpy_never_does(
    installed: Installed, question: tuple[str, ...]
) -> None:
    answer = _kubectl_as(installed.plane, installed.kubeconfig, "auth", "can-i", *question)
    assert answer.stdout.strip() == "no", (question, answer.stdout, answer.stderr)
