"""Approvals: the StartRequests POST with its own retries and deadline (``approver``)."""

from .approver import ApprovalStats, Approver

__all__ = ["ApprovalStats", "Approver"]
