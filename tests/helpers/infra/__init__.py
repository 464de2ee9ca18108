"""Helpers for the offline checks of the Azure side (Bicep, KQL, workbooks, contract)."""
