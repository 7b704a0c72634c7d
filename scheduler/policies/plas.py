"""PLAS (sequential programs): a call starts from its program's summed service."""

from __future__ import annotations

from scheduler.policies.base import Policy


class PLASPolicy(Policy):
    name = "plas"
