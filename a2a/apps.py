from django.apps import AppConfig


class A2AConfig(AppConfig):
    name = "a2a"
    verbose_name = "A2A"

    def ready(self):
        from a2a import events
        from mcplet_host.signals import audit_recorded

        audit_recorded.connect(events.announce, dispatch_uid="a2a-announce")
