"""`EventRecorder`: the scheduler's and the reaper's decisions as `events.k8s.io/v1` Events on the object a person
would describe (a role's StatefulSet, else the release's topology ConfigMap), so `kubectl describe statefulset` and
`kubectl get events` show them. A repeat of the same Event (object, reason, note) is counted as its series on the
first one (patched), as client-go's recorder does, within this process. Best-effort: an Event that cannot be written
never fails a decision; a 403 (the Role lacks `create` on events.k8s.io events) is logged once, with the fix, and
no Event is tried again."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from .. import naming
from ..reasons import Reason
from .event_body import ObjectRef, SeriesKey, event_body, series_key, series_patch
from .lease import lease_name

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT = 10.0
MAX_SERIES = 256  # the repeats remembered; the oldest is forgotten (its next repeat starts a new Event)
OWNER_POD_VARIABLE = "AREAL_K8S_OWNER_POD"  # the trainer pod's name, in the Job `areal-workers submit` writes
CONTROLLER_RULES = "rbac/role.yaml, from charts/areal-workers/files/controller-rules.yaml"
REAPER_RULES = "rbac/reaper.yaml, from charts/areal-workers/files/reaper-rules.yaml"


class EventsApi(Protocol):
    """What the recorder writes with (the kubernetes client's EventsV1Api)."""

    def create_namespaced_event(self, namespace: str, body: Any, **kwargs: Any) -> Any: ...

    def patch_namespaced_event(self, name: str, namespace: str, body: Any, **kwargs: Any) -> Any: ...


def reporting_instance() -> str:
    """The trainer's pod when it runs in one, else this host."""
    return os.environ.get(OWNER_POD_VARIABLE) or socket.gethostname()


class EventRecorder:
    """The Events of one release. `core`/`apps` resolve the objects' uids (None: referred to by name only)."""

    def __init__(
        self,
        events: EventsApi,
        namespace: str,
        release: str,
        core: client.CoreV1Api | None = None,
        apps: client.AppsV1Api | None = None,
        instance: str | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
        rules: str = CONTROLLER_RULES,
    ) -> None:
        self.events, self.namespace, self.release, self.core, self.apps = events, namespace, release, core, apps
        self.instance = instance or reporting_instance()
        self._clock, self.rules = clock, rules
        self._series: OrderedDict[SeriesKey, tuple[str, int]] = OrderedDict()  # -> (first Event's name, count)
        self._release_object: ObjectRef | None = None
        self._lock = threading.Lock()
        self.refused = False  # the Role lacks the rule: nothing is tried any more

    # --- what an Event is about ------------------------------------------------------------------

    def statefulset(self, name: str) -> ObjectRef:
        ref = ObjectRef("apps/v1", "StatefulSet", name, self.namespace)
        if self.apps is None or self.refused:
            return ref
        try:
            found = self.apps.read_namespaced_stateful_set(name, self.namespace, _request_timeout=REQUEST_TIMEOUT)
        except (ApiException, HTTPError) as error:  # gone (a deleted role) or not created yet: by name
            logger.debug("event on StatefulSet %s without its uid: %s", name, error)
            return ref
        return ObjectRef("apps/v1", "StatefulSet", name, self.namespace, found.metadata.uid)

    def release_object(self) -> ObjectRef:
        """The release's topology ConfigMap (remembered once seen: an uninstall deletes it), else the trainer's
        Lease, by name."""
        if self._release_object is None and self.core is not None and not self.refused:
            selector = f"{naming.release_selector(self.release)},{naming.LABEL_COMPONENT}=topology"
            try:
                items = self.core.list_namespaced_config_map(
                    self.namespace, label_selector=selector, _request_timeout=REQUEST_TIMEOUT
                ).items
            except (ApiException, HTTPError) as error:
                logger.debug("the topology ConfigMap of %s for an event: %s", self.release, error)
                items = []
            if items:
                meta = items[0].metadata
                self._release_object = ObjectRef("v1", "ConfigMap", meta.name, self.namespace, meta.uid)
        return self._release_object or ObjectRef(
            "coordination.k8s.io/v1", "Lease", lease_name(self.release), self.namespace
        )

    # --- recording -------------------------------------------------------------------------------

    def record(
        self, reason: Reason, action: str, note: str, regarding: ObjectRef | None = None, warning: bool = False
    ) -> None:
        """One decision about `regarding` (None: the release); a repeat of the same is counted on the first. Safe
        from several threads (a liveness check records a failure from the thread of the call that found it)."""
        with self._lock:
            if self.refused:
                return
            regarding = regarding or self.release_object()
            moment = self._clock()
            key = series_key(regarding, reason, note)
            try:
                if self._count(key, moment):
                    return
                if regarding.kind == "StatefulSet" and regarding.uid is None:  # read only for a new Event
                    regarding = self.statefulset(regarding.name)
                body = event_body(regarding, reason, action, note, self.instance, moment, self.release, warning)
                self.events.create_namespaced_event(self.namespace, body, _request_timeout=REQUEST_TIMEOUT)
            except (ApiException, HTTPError) as error:
                self._failed(error, reason)
                return
            self._series[key] = (body["metadata"]["name"], 1)
            while len(self._series) > MAX_SERIES:
                self._series.popitem(last=False)

    def on_statefulset(self, name: str | None, reason: Reason, action: str, note: str, warning: bool = False) -> None:
        """`record` about StatefulSet `name` (None: about the release)."""
        regarding = ObjectRef("apps/v1", "StatefulSet", name, self.namespace) if name else None
        self.record(reason, action, note, regarding, warning)

    def _count(self, key: SeriesKey, moment: datetime) -> bool:
        """Counts a repeat on the Event that began the series; False when there is none, or that Event is gone
        (expired)."""
        if key not in self._series:
            return False
        name, count = self._series[key]
        try:
            self.events.patch_namespaced_event(
                name, self.namespace, series_patch(count + 1, moment), _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as error:
            if error.status != 404:
                raise
            del self._series[key]
            return False
        self._series[key] = (name, count + 1)
        self._series.move_to_end(key)
        return True

    def _failed(self, error: ApiException | HTTPError, reason: Reason) -> None:
        if isinstance(error, ApiException) and error.status == 403:
            self.refused = True
            logger.warning(
                "no Events are recorded for release %s in namespace %s: the API server refused (%s); add verbs create "
                "and patch on events in API group events.k8s.io to the Role (%s)",
                self.release,
                self.namespace,
                error.reason,
                self.rules,
            )
            return
        status = f"{error.status} {error.reason}" if isinstance(error, ApiException) else str(error)
        logger.warning("the %s Event of release %s was not recorded: %s", reason, self.release, status)
