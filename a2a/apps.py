from django.apps import AppConfig


class A2AConfig(AppConfig):
    name = "a2a"
    verbose_name = "A2A"

    def ready(self):
        from a2a import events, push
        from a2a.models import PartnerKey
        from mcplet_host import config_audit as config
        from mcplet_host.signals import audit_recorded

        config.track(PartnerKey, "partner_key", extra=("revoked_at",), created="issued")

        audit_recorded.connect(events.announce, dispatch_uid="a2a-announce")
        audit_recorded.connect(push.on_audit, dispatch_uid="a2a-push")
