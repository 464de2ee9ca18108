"""Approvals: the StartRequests POST with its own retries and deadline (``approver``)."""

from .approver import ApprovalStats, Approver, client_for

__all__ = ["ApprovalStats", "Approver", "client_for"]
