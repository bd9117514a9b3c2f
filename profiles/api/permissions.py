"""Who may do what: reads for any authenticated user, writes for users with the model permission."""

from rest_framework.permissions import BasePermission, DjangoModelPermissions

# The dashboard's change log needs it too (mutations/dashboard/changes.py).
CHANGE_VIEW_PERMISSION = "profiles.view_objectchange"


class ConfigurationPermissions(DjangoModelPermissions):
    """DjangoModelPermissions: anonymous users get nothing; GET/HEAD/OPTIONS need only a login;
    POST, PUT/PATCH and DELETE need profiles.add_/change_/delete_<model>."""

    authenticated_users_only = True


class ChangeLogPermission(BasePermission):
    """The change log (who changed what, and every value before and after) only for users who may view it, as
    on the dashboard; restoring a change also needs the change or add permission of its model (the view checks)."""

    message = f"reading the change log needs the permission {CHANGE_VIEW_PERMISSION}"

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.has_perm(CHANGE_VIEW_PERMISSION))
