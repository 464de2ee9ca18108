"""From the tracker to the outbox: observations recorded as committed rows (``recorder``), records
held until the VM's identity is known (``hold``), a document's problems counted once
(``doc_problems``) and what a damaged outbox lost rebuilt from the tracker state (``rebuild``)."""
