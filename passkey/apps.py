from django.apps import AppConfig


class PasskeyConfig(AppConfig):
    name = "passkey"
    verbose_name = "Passkey approvals"
