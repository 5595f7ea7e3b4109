"""The audit append in one statement on PostgreSQL: the chain head is locked, the events are
numbered, hashed (mcplet_host.models.chain_hash) and inserted, and the head moved, in one round
trip — so the head's row lock lasts one statement, not four round trips of the client."""

from django.db import migrations

APPEND = """
CREATE OR REPLACE FUNCTION mcplet_audit_append(events jsonb)
RETURNS TABLE (new_id bigint, new_seq bigint, new_prev varchar, new_hash varchar)
LANGUAGE plpgsql AS $$
DECLARE
  head_seq bigint;
  head_hash varchar;
  e jsonb;
BEGIN
  SELECT last_seq, last_hash INTO head_seq, head_hash
    FROM mcplet_host_auditchainhead WHERE id = 1 FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO mcplet_host_auditchainhead (id, last_seq, last_hash)
      VALUES (1, 0, repeat('0', 64)) ON CONFLICT (id) DO NOTHING;
    SELECT last_seq, last_hash INTO head_seq, head_hash
      FROM mcplet_host_auditchainhead WHERE id = 1 FOR UPDATE;
  END IF;
  FOR e IN SELECT value FROM jsonb_array_elements(events) LOOP
    new_seq := head_seq + 1;
    new_prev := head_hash;
    new_hash := encode(sha256(convert_to(
      new_prev || ':' || new_seq::text || ':' || (e->>'digest'), 'UTF8')), 'hex');
    INSERT INTO mcplet_host_auditevent (seq, "timestamp", trace_id, event_type, actor_type,
        actor_id, target_server, target_tool, result, details, prev_hash, hash)
      VALUES (new_seq, (e->>'timestamp')::timestamptz, e->>'trace_id', e->>'event_type',
        e->>'actor_type', e->>'actor_id', e->>'target_server', e->>'target_tool',
        e->>'result', e->'details', new_prev, new_hash)
      RETURNING id INTO new_id;
    head_seq := new_seq;
    head_hash := new_hash;
    RETURN NEXT;
  END LOOP;
  UPDATE mcplet_host_auditchainhead SET last_seq = head_seq, last_hash = head_hash
    WHERE id = 1;
END $$;
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(APPEND)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS mcplet_audit_append(jsonb)")


class Migration(migrations.Migration):
    dependencies = [("mcplet_host", "0005_registry_version")]

    operations = [migrations.RunPython(create, drop)]
