from django.dispatch import Signal

# Sent after the commit that appended audit events, with `events` (a list of AuditEvent).
# The dashboard listens to stream them live; the audit trail does not know who listens.
audit_recorded = Signal()
