from django import forms

from a2a import outbound
from agents.models import Agent
from pools.forms import HeaderMappingField


class AgentForm(forms.ModelForm):
    credentials = HeaderMappingField(
        help_text="Remote: one Header: value per line, sent with every request to it (e.g. "
        "Authorization: Bearer …). Saved secrets are never shown again.",
    )

    class Meta:
        model = Agent
        # The admin's fieldsets choose the fields shown; these are the ones this form checks.
        fields = ["kind", "card_url", "credentials", "accessible_pools", "callable_agents"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.initial["credentials"] = self.fields["credentials"].masked(
            self.instance.credentials or {}
        )

    def clean_credentials(self):
        return self.fields["credentials"].parse(
            self.cleaned_data["credentials"], self.instance.credentials or {}
        )

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("kind") != Agent.Kind.REMOTE:
            return cleaned
        # Being called gives a remote agent nothing of ours: no pools, no partner's reach.
        for field in ("accessible_pools", "callable_agents"):
            if cleaned.get(field):
                self.add_error(field, "A remote agent holds none: leave this empty.")
        if cleaned.get("card_url") and "credentials" in cleaned:
            self.instance.card_url = cleaned["card_url"]
            self.instance.credentials = cleaned["credentials"]
            try:  # saving fetches the card again: a remote agent is saved with its card
                self.instance.refresh_card()
            except outbound.RemoteError as exc:
                self.add_error("card_url", f"Cannot use its card: {exc}.")
        return cleaned
