"""Django's model backend, with each signed-in user and their permissions kept with the registry
(mcplet_host.registry): its triggers follow the user, group and permission tables too, so a user
deactivated, a password changed or a permission withdrawn — any way at all — is read afresh by
the very next request, and a request that finds nothing changed reads one row for all of it.
(Logging in moves nothing: `last_login` is not watched.)"""

from django.contrib.auth import backends

from mcplet_host import registry


class ModelBackend(backends.ModelBackend):
    def get_user(self, user_id):
        snapshot = registry.current()
        parent = super()
        user = snapshot.copy_of(("user", str(user_id)), lambda: parent.get_user(user_id))
        if user is not None:
            user.registry_snapshot = snapshot  # what the rest of its request reads from
        return user

    def get_all_permissions(self, user_obj, obj=None):
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        if not hasattr(user_obj, "_perm_cache"):
            snapshot = getattr(user_obj, "registry_snapshot", None) or registry.current()
            kept = snapshot.kept(
                ("permissions", user_obj.pk),
                lambda: frozenset(super(ModelBackend, self).get_all_permissions(user_obj)),
            )
            user_obj._perm_cache = set(kept)
        return user_obj._perm_cache
