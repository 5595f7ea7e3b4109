"""Held calls moved to the `held` app; their table stayed: state only."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0007_remote_a2a_agents'),
        ('held', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
        migrations.AlterField(
            model_name='agentrun',
            name='waiting_for',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='held.ceremony'),
        ),
        ]),
    ]
