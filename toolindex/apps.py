from django.apps import AppConfig


class ToolIndexConfig(AppConfig):
    name = "toolindex"
    verbose_name = "Tool index"

    def ready(self):
        from toolindex import signals  # noqa: F401
