"""Held calls moved to the `held` app; their table stayed: state only."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0008_waiting_for_held_ceremony'),
        ('passkey', '0007_ceremony_form_elicitation'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
        migrations.DeleteModel(
            name='Ceremony',
        ),
        ]),
    ]
