"""A workbook's JSON as the report's plan, each item run (Merge items, Resource Graph rows)."""
