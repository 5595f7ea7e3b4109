"""Held calls move here from `passkey`, where their table stays (`passkey_ceremony`): this
migration only tells Django's state so, moves the model's content type (and with it the
permissions operators granted, `approve_ceremony` included) and marks re-runs as their kind."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def move_content_type(apps, schema_editor, old="passkey", new="held"):
    ContentType = apps.get_model("contenttypes", "ContentType")
    if not ContentType.objects.filter(app_label=new, model="ceremony").exists():
        ContentType.objects.filter(app_label=old, model="ceremony").update(app_label=new)


def move_content_type_back(apps, schema_editor):
    move_content_type(apps, schema_editor, old="held", new="passkey")


def mark_reruns(apps, schema_editor):
    Ceremony = apps.get_model("held", "Ceremony")
    Ceremony.objects.filter(rerun_of__isnull=False).update(kind="rerun")


def unmark_reruns(apps, schema_editor):
    Ceremony = apps.get_model("held", "Ceremony")
    Ceremony.objects.filter(kind="rerun").update(kind="tool_call")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('passkey', '0007_ceremony_form_elicitation'),
        ('contenttypes', '0002_remove_content_type_name'),
        ('pools', '0006_derive_reference_verify_url'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[migrations.CreateModel(
            name='Ceremony',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('tool_call', 'a tool call'), ('result', "an agent's result (e.g. a plan) before its hand-off"), ('step_up', "a tool call waiting for a person's step on the server's side"), ('form', 'a form a server asks a person to fill in during a call'), ('rerun', "a person's re-run of a call whose outcome is unknown")], default='tool_call', max_length=16)),
                ('token', models.CharField(editable=False, max_length=64, unique=True)),
                ('nonce', models.CharField(editable=False, max_length=64)),
                ('status', models.CharField(choices=[('pending', 'waiting for approval'), ('approved', 'approved, about to run'), ('executing', 'Executing'), ('executed', 'Executed'), ('rejected', 'Rejected'), ('expired', 'Expired'), ('failed', 'Failed'), ('outcome_unknown', 'outcome unknown')], default='pending', max_length=16)),
                ('agent_id', models.CharField(max_length=100)),
                ('provenance', models.JSONField(blank=True, default=dict, help_text='Who the call acts for: the partner its workflow started for and the agents before the asking one (mcplet_host.authority).')),
                ('proposed_by_model', models.BooleanField(default=False, help_text="The asking agent's LLM proposed this call (not host code).")),
                ('trace_id', models.CharField(blank=True, db_index=True, max_length=64)),
                ('server_name', models.CharField(blank=True, max_length=100)),
                ('tool_name', models.CharField(max_length=200)),
                ('surface', models.CharField(max_length=8)),
                ('arguments', models.JSONField()),
                ('arguments_hash', models.CharField(max_length=64)),
                ('prompt_message', models.TextField(blank=True)),
                ('enforcement', models.CharField(choices=[('strict', 'strict (the MCPlet verifies the passkey assertion)'), ('host-only', "host-only (the host's confirmation is enough)")], max_length=16)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('expires_at', models.DateTimeField()),
                ('decided_at', models.DateTimeField(blank=True, null=True)),
                ('executed_at', models.DateTimeField(blank=True, null=True)),
                ('result', models.JSONField(blank=True, help_text='The §9.1 envelope of the call.', null=True)),
                ('continuation', models.CharField(blank=True, help_text='Celery task told (with this id) once it is final.', max_length=200)),
                ('continuation_ref', models.CharField(blank=True, max_length=100)),
                ('elicitations', models.JSONField(blank=True, default=list, help_text="A step-up's steps as the server sent them (URL or QR), shown to the person.")),
                ('decided_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
                ('mcplet', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, to='pools.mcplet')),
                ('rerun_of', models.ForeignKey(blank=True, help_text='The first attempt, whose outcome is unknown, that a person runs again with this call (and its idempotency key).', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='reruns', to='held.ceremony')),
            ],
            options={
                'db_table': 'passkey_ceremony',
                'ordering': ['-created_at'],
                'permissions': [('approve_ceremony', 'Can approve or reject tool calls with a passkey')],
            },
        )]),
        migrations.RunPython(move_content_type, move_content_type_back),
        migrations.RunPython(mark_reruns, unmark_reruns),
    ]
