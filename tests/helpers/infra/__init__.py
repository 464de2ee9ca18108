"""Helpers for the offline checks of the Azure side: KQL, workbooks, the contract (the Bicep
checks and evaluator are a package of their own, tools/bicep_eval)."""
