from django.apps import AppConfig


class PasskeyConfig(AppConfig):
    name = "passkey"
    verbose_name = "Passkey approvals"

    def ready(self):
        from passkey import signals  # noqa: F401 (connects the ceremony hooks)
