from django.apps import AppConfig


class PasskeyConfig(AppConfig):
    name = "passkey"
    verbose_name = "Passkey approvals"

    def ready(self):
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Group

        from mcplet_host import config_audit as config
        from passkey import signals  # noqa: F401 (connects the ceremony hooks)
        from passkey.models import BackendToken, group_may_approve, may_approve

        config.track(
            BackendToken,
            "verify_token",
            extra=("revoked_at",),
            created="issued",
            server="server.name",
        )
        # Operators' accounts, and who may approve held calls (directly or through a group).
        user = get_user_model()
        config.track(user, "user", exclude=("last_login", "date_joined"), secret=("password",))
        config.track(Group, "group")
        config.track_grants(
            user.user_permissions, "user", "permissions", approver_check=may_approve
        )
        config.track_grants(user.groups, "user", "groups", approver_check=may_approve)
        config.track_grants(
            Group.permissions,
            "group",
            "permissions",
            approver_check=group_may_approve,
            members=lambda group: sorted(u.get_username() for u in group.user_set.all()),
        )
