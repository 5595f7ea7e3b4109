from django.apps import AppConfig


class A2AConfig(AppConfig):
    name = "a2a"
    verbose_name = "A2A"
