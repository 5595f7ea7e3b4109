"""Include at the root: `path("", include("passkey.urls"))`."""

from django.urls import path

from passkey import views

app_name = "passkey"

urlpatterns = [
    path("passkey/login/", views.login, name="login"),
    path("passkey/register/", views.register, name="register"),
    path("passkey/register/options/", views.register_options, name="register-options"),
    path("passkey/register/verify/", views.register_verify, name="register-verify"),
    path("passkey/ceremonies/<str:token>/", views.ceremony, name="ceremony"),
    path("passkey/ceremonies/<str:token>/open/", views.open_page, name="open"),
    path("passkey/ceremonies/<str:token>/challenge/", views.challenge, name="challenge"),
    path("passkey/ceremonies/<str:token>/assertion/", views.assertion, name="assertion"),
    path("passkey/ceremonies/<str:token>/reject/", views.reject, name="reject"),
    path("passkey/ceremonies/<str:token>/step/", views.step, name="step"),
    path("passkey/ceremonies/<str:token>/run-again/", views.run_again, name="run-again"),
    path("passkey/ceremonies/<str:token>/answer/", views.answer, name="answer"),
    path("auth/verify-assertion", views.verify_assertion, name="verify-assertion"),
]
