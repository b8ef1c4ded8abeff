"""Events about a SlurmCluster as the operator's controllers send them: posted through the manager's one recorder
(the Event names the operator as its source, whichever controller decided it), and logged with the controller's name.
Each controller sends its own Events; none sends in another's name."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slurmctl.runtime import WARNING, Manager
from slurmctl.runtime.logs import kv
from slurmctl.runtime.objects import meta_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Events:
    """One controller's Events: `controller` is its name in the log line that goes with each."""

    manager: Manager
    controller: str

    def record(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        md = meta_of(obj)
        log.log(
            logging.WARNING if type_ == WARNING else logging.INFO,
            "event %s",
            kv(
                controller=self.controller,
                namespace=md.namespace,
                name=md.name,
                type=type_,
                reason=reason,
                message=message,
            ),
        )
        self.manager.recorder.record(obj, type_, reason, message)

    def warn(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        self.record(obj, WARNING, reason, message)
