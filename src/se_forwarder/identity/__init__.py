"""Who the agent (and the collector) is to Azure: ``[identity]`` (``config.py``), the credential
built from it (``credential.py``) and the bounded azure-core transport its tokens and Logs
Ingestion's answers are read through (``bounded_transport.py``). Below the sinks and the
collector, which share it; azure-identity and azure-core are imported only by ``credential.build``
and ``bounded_transport``, when an Azure sink or the collector is configured."""
