"""Held calls: a tool call (or an agent's result) that waits for a person, from hold to
continuation (docs/design.md, "Held calls").

- `models.py` — the row (`Ceremony`): what is held, who asks (`Asker`), the decisions;
- `kinds/` — each kind's own rules, one small module per kind, and their registry;
- `lifecycle.py` — run a decided call once, settle it, wake the run that waits;
- `tasks.py` — the Celery tasks and beat's sweeps that drive the lifecycle.

The gateway keeps the checks and the single path to `tools/call`; `passkey/` keeps WebAuthn and
the pages a person decides on."""
