import pytest


@pytest.fixture
def staff_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("operator", "op@example.org", "pw-operator-1")
    client.force_login(user)
    return client
