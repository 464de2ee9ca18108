"""Local stand-ins for the Azure services (tests and the demo): they speak the real protocols and
enforce the real services' rules, so the unmodified Azure SDKs talk to them."""
