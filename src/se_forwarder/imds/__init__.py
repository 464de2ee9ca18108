"""The source: everything that talks to, or parses answers from, the Instance Metadata Service."""
