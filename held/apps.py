from django.apps import AppConfig


class HeldConfig(AppConfig):
    name = "held"
    verbose_name = "Held calls"
