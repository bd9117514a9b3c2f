"""Who may do what: reads for any authenticated user, writes for users with the model permission."""

from rest_framework.permissions import DjangoModelPermissions


class ConfigurationPermissions(DjangoModelPermissions):
    """DjangoModelPermissions: anonymous users get nothing; GET/HEAD/OPTIONS need only a login;
    POST, PUT/PATCH and DELETE need profiles.add_/change_/delete_<model>."""

    authenticated_users_only = True
