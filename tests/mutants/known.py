"""The known breaks of issue 14, kept checkable: each one-line break of the enforcement code is
applied in turn to a copy of the working tree, and the tests meant to notice it are run there.

    python tests/mutants/known.py [--only NAME ...] [--list]

Prints one line per break — killed (its tests failed), SURVIVED (they passed) or ERROR — and
exits non-zero unless every break is killed. A break whose pattern no longer matches is
reported as STALE: the code moved, and the pattern (a small regex on the line) needs updating.
Needs the same environment as the tests (DATABASE_URL for PostgreSQL: the resume race runs
there only), and a Redis database nothing else uses meanwhile (each test flushes it: a rate
limit counted by one run is wiped by another). The working tree is never edited."""

import argparse
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from workspace import copy_tree, environment


@dataclass
class Break:
    name: str
    path: str
    pattern: str  # a regex, in MULTILINE mode (`(?s)` where it must span lines)
    replacement: str
    tests: list[str] = field(default_factory=list)
    count: int = 1  # how many matches the pattern must have (a guard against a vague pattern)


A2A = "tests/a2a/test_partner_breaks.py::"
BUS = "tests/agents/test_bus_refusals_calllog.py::"
GW = "tests/mcplet_host/test_gateway_breaks.py::"
PK = "tests/passkey/test_passkey_breaks.py::"
AWA = "tests/security/test_action_without_approval.py::"
LEASE = "tests/agents/test_lease_window.py::"
VAA = "tests/security/test_verify_assertion_abuse.py::"
TM = "tests/toolindex/test_meta_tools.py::"
TS = "tests/toolindex/test_search.py::"
RUN = "tests/passkey/test_run_again.py::"
NEXT = "tests/passkey/test_register_next.py::"
PUSH = "tests/a2a/test_push_configs.py::"
KEPT = "tests/a2a/test_partner_kept.py::"
APPROVER = "tests/passkey/test_approver_kept.py::"
HAND = "tests/agents/test_hand_off.py::"

BREAKS = [
    Break(
        "disabled-partner-key",
        "a2a/api.py",
        r"not key\.agent\.enabled or ",
        "",
        [A2A + "test_a_disabled_partners_key_no_longer_authenticates"],
    ),
    Break(
        "bus-disabled-sender",
        "agents/tasks.py",
        r"elif not request\.external and not sender\.enabled:",
        "elif False:",
        [BUS + "test_a_disabled_sender_or_recipient_is_refused"],
    ),
    Break(
        "bus-disabled-recipient",
        "agents/tasks.py",
        r"elif not recipient\.enabled:",
        "elif False:",
        [BUS + "test_a_disabled_sender_or_recipient_is_refused"],
    ),
    Break(
        "wildcard-suffix",
        "pools/models.py",
        r"host\.endswith\(pattern\[1:\]\)",
        "host.endswith(pattern[2:])",
        [GW + "test_a_wildcard_entry_is_whole_labels_only"],
    ),
    Break(
        "rate-limit-before-arguments",
        "mcplet_host/gateway/checks.py",
        r"^( +)(_check_arguments\(.*)\n\1(_check_policy\(.*)$",  # swapped
        r"\1\3\n\1\2",
        [GW + "test_an_invalid_call_does_not_use_up_the_pools_rate"],
    ),
    Break(
        "sign-count-cas",
        "passkey/models.py",
        r'\{"pk": self\.pk, "sign_count": self\.sign_count\}',
        '{"pk": self.pk}',
        [PK + "test_two_uses_of_one_sign_count_approve_once"],
    ),
    Break(
        "callback-without-uv",
        "passkey/models.py",
        r"(?s)(def verify\(self, credential.*?require_uv=)require_user_verification\(\)",
        r"\1False",
        [PK + "test_an_assertion_without_user_verification_approves_nothing"],
    ),
    Break(
        "verify-assertion-without-uv",
        "passkey/approvals.py",
        r"(?s)(def _verify_for_backend\(.*?require_uv=)require_user_verification\(\)",
        r"\1False",
        [PK + "test_verify_assertion_wants_user_verification_too"],
    ),
    Break(
        "llm-tools-without-partner-runner",
        "agents/toolset.py",
        r"gateway\.visible_to\(self\.agent, run\.authority\)",
        "gateway.visible_to(self.agent)",
        [A2A + "test_the_model_on_a_partners_task_is_offered_only_tools_inside_both_grants"],
    ),
    Break(
        "llm-tools-without-partner-gateway",
        "mcplet_host/gateway/__init__.py",
        r"(?s)pools &= set\(\n.*?\n        \)\n",
        "pass\n",
        [
            GW + "test_the_llms_tools_on_a_partners_task_are_inside_the_partners_grants",
            A2A + "test_the_model_on_a_partners_task_is_offered_only_tools_inside_both_grants",
        ],
    ),
    Break(
        "discovered-tools-not-gated",
        "mcplet_host/gateway/__init__.py",
        r"if offered is not None and tool not in offered:",
        "if False:",
        [TM + "test_a_tool_not_found_first_is_refused_alike_whether_granted_or_not"],
    ),
    Break(
        "discovery-searches-every-pool",
        "mcplet_host/gateway/__init__.py",
        r"Q\(pool__in=pools\)",
        "Q(pool__isnull=False)",
        [TS + "test_a_tool_outside_the_grants_is_never_returned_not_even_by_its_name"],
    ),
    Break(
        "webhook-any-address",
        "a2a/webhooks.py",
        r"return address\.is_global and not address\.is_multicast",
        "return True",
        [PUSH + "test_a_webhook_at_a_private_address_is_refused_and_audited"],
    ),
    Break(
        "webhook-checked-once",  # the POST trusts the registration's check
        "a2a/push.py",
        r"status = webhooks\.post\(config\.url, allowed,",
        "status = webhooks.post(config.url, webhooks.networks('0.0.0.0/0, ::/0'),",
        [PUSH + "test_each_post_checks_the_address_again"],
    ),
    Break(
        "push-configs-of-any-task",
        "a2a/bindings.py",
        r"return self\.task_row\(agent_id, params\.get\(\"taskId\", \"\"\)\)\.push_configs",
        "from a2a.models import A2AMessage as M; "
        "return M.objects.get(message_id=params['taskId']).push_configs",
        [PUSH + "test_another_partners_task_has_no_configs_for_you"],
    ),
    Break(
        "parameters-tools-recipient-only",
        "a2a/service.py",
        r"gateway\.tools_for\(recipient, authority\)",
        "gateway.tools_for(recipient)",
        [A2A + "test_parameters_tools_must_be_inside_partner_and_recipient_grants"],
    ),
    Break(
        "parameters-pools-partner-only",
        "a2a/service.py",
        r"^ +\.filter\(agents=recipient\)\n",  # the partner's pools only
        "",
        [A2A + "test_parameters_pools_must_be_held_by_partner_and_recipient"],
    ),
    Break(
        "another-partners-message-id",
        "a2a/service.py",
        r"existing\.sender_id != partner\.agent_id or ",
        "",
        [A2A + "test_another_partners_message_id_is_not_their_task"],
    ),
    Break(
        "verify-chain-link",
        "mcplet_host/audit.py",
        r"if event\.prev_hash != expected_prev:",
        "if False:",
        ["tests/mcplet_host/test_audit_links.py"],
    ),
    # Found by the attack suite's later classes.
    Break(
        "tool-call-named-by-its-id",
        "agents/runner.py",
        r'ref = f"\{run\.pk\}:\{place\}"',
        "ref = f\"{run.pk}:{call['id']}\"",
        [AWA + "test_an_approved_tool_call_never_approves_the_result"],
    ),
    Break(
        "resume-without-the-approvals-hash",
        "held/lifecycle.py",
        r"if arguments_hash\(ceremony\.tool_name, ceremony\.arguments\) != .*:",
        "if False:",
        [AWA + "test_a_call_edited_in_the_database_after_its_approval"],
    ),
    Break(
        "passkey-views-take-unusable-json",
        "passkey/views.py",
        r" and storable\.problem\(body\) is None",
        "",
        [VAA + "test_hostile_bodies_are_a_clear_400"],
    ),
    Break(
        "resume-without-row-lock",
        "held/lifecycle.py",
        r"Ceremony\.objects\.select_for_update\(\)\.get\(pk=ceremony_id\)",
        "Ceremony.objects.get(pk=ceremony_id)",
        ["tests/mcplet_host/test_resume_race.py"],
    ),
    # Issue 23: breaks the whole suite let through.
    Break(
        "rerun-drops-provenance",
        "held/kinds/rerun.py",
        r"ceremony\.asker\.nobody_waits\(\),",  # a re-run acts for the host
        "type(ceremony.asker)(ceremony.agent_id, trace_id=ceremony.trace_id, surface='app'),",
        [
            RUN + "test_a_partners_call_run_again_still_acts_for_the_partner",
            RUN + "test_a_partners_call_run_again_after_the_partner_lost_the_pool_runs_nothing",
        ],
    ),
    Break(
        "register-next-unchecked",
        "passkey/views.py",
        r'(?s)(def _next\(request\):.*?)return target if safe else ""',  # an open redirect
        r"\1return target",
        [NEXT + "test_a_hostile_next_is_not_on_the_page"],
    ),
    # Issue 24: an input_required round's retry must carry its own state and answers.
    Break(
        "retry-without-its-round",
        "held/lifecycle.py",
        r"reply=ceremony\.input_round",
        "reply=None",
        [
            "tests/held/test_input_required.py::"
            "test_a_url_step_is_held_then_sent_again_once_with_the_state",
        ],
    ),
    # Issue 26: what partners' requests keep must follow every change as the gateway's does.
    Break(
        "partner-keys-not-watched",
        "mcplet_host/registry.py",
        r'^    \("a2a", "PartnerKey", "", \("last_used_at",\)\),.*\n',
        "",
        [KEPT + "test_a_change_refuses_the_very_next_request"],
    ),
    Break(
        "callable-agents-not-watched",
        "mcplet_host/registry.py",
        r'^    \("agents", "Agent", "callable_agents", \(\)\),\n',
        "",
        [KEPT + "test_a_change_refuses_the_very_next_request"],
    ),
    Break(
        "users-not-watched",
        "mcplet_host/registry.py",
        r'^    \(\*settings\.AUTH_USER_MODEL\.split\("\."\), "", \("last_login",\)\),\n',
        "",
        [APPROVER + "test_a_change_refuses_the_very_next_approval"],
    ),
    Break(
        "user-permissions-not-watched",
        "mcplet_host/registry.py",
        r'^    \(\*settings\.AUTH_USER_MODEL\.split\("\."\), "user_permissions", \(\)\),\n',
        "",
        [APPROVER + "test_a_change_refuses_the_very_next_approval"],
    ),
    Break(
        "run-ends-twice",
        "agents/models/run.py",
        r'where, exclude = \{"pk": self\.pk\}, \{"status__in": self\.FINAL\}',
        'where, exclude = {"pk": self.pk}, None',
        [
            "tests/agents/test_runner.py::test_a_run_cancelled_while_a_worker_advances_it_ends_once",
            "tests/agents/test_runner.py::"
            "test_a_cancel_from_a_copy_read_before_the_run_ended_changes_nothing",
            "tests/agents/test_runner.py::test_a_finish_racing_a_cancel_waits_for_it_then_changes_nothing",
        ],
    ),
    Break(
        "run-ends-twice-in-one-statement",
        "agents/ending.py",
        r"where, exclude = run\.ended_where\(\)",
        'where, exclude = {"pk": run.pk}, None',
        [
            "tests/agents/test_runner.py::test_a_finish_racing_a_cancel_waits_for_it_then_changes_nothing",
            "tests/agents/test_ending.py::test_an_ended_run_ends_no_second_time",
        ],
    ),
    Break(
        "hold-not-said-first",
        "agents/models/run.py",
        r"AgentRun\.objects\.filter\(pk=self\.pk\)\.update\(may_have_held=True\)",
        "pass",
        [
            LEASE + "test_the_run_says_it_may_have_held_before_the_gateway_holds",
            LEASE + "test_a_run_that_breaks_after_holding_a_call_rejects_it",
        ],
    ),
    Break(
        "cancel-trusts-its-copy",
        "agents/ending.py",
        r"^    run\.may_have_held = True\n",
        "",
        [LEASE + "test_a_run_that_held_nothing_ends_without_looking"],
    ),
    Break(
        "approved-after-a-decision",
        "held/models.py",
        r'"pk": self\.pk, "status": self\.Status\.PENDING, "expires_at__gt": now',
        '"pk": self.pk, "expires_at__gt": now',
        [
            "tests/held/test_decisions.py::test_an_approval_from_a_copy_read_before_a_reject_runs_nothing",
            "tests/held/test_decisions.py::test_an_approval_racing_a_reject_waits_for_it_then_changes_nothing",
        ],
    ),
    Break(  # a kept statement for `WHERE flag` reused for `WHERE NOT flag`: the wrong rows
        "kept-bool-not-in-shape",
        "mcplet_host/kept.py",
        r"if value is None or isinstance\(value, bool\):",
        "if value is None:",
        ["tests/mcplet_host/test_kept.py::test_true_and_false_are_two_statements"],
    ),
    Break(  # the run inserted whether or not the request's mark changed its row
        "run-without-its-mark",
        "mcplet_host/guarded.py",
        r'\(select := insert\.as_select\("guard"\)\)',
        '(select := insert.as_select("(SELECT 1) AS unguarded"))',
        [BUS + "test_a_refused_request_delivered_again_once_it_would_pass_runs_nothing"],
    ),
    Break(  # a run's hand-off inserted whether or not its end changed the run
        "hand-off-without-its-end",
        "mcplet_host/guarded.py",
        r'f"also AS \(\{added\[0\]\}\)"',
        "f\"also AS ({added[0].replace('FROM guard', 'FROM (SELECT 1) AS unguarded')})\"",
        ["tests/agents/test_ending.py::test_an_ended_run_ends_no_second_time"],
    ),
    Break(  # a run that held a call ends in one statement without looking for it first
        "held-end-without-the-look",
        "agents/ending.py",
        r"request is None or run\.left_pending\(\)",
        "request is None",
        [
            "tests/agents/test_lease_window.py::"
            "test_a_run_that_breaks_after_holding_its_action_or_result_rejects_it",
        ],
    ),
    Break(  # a hand-off delivered here trusted as its sender's run read it: no checks
        "hand-off-here-unchecked",
        "agents/tasks.py",
        r"^                _deliver\(message_id, signature\)$",
        "                r = A2AMessage.objects.get(message_id=message_id)\n"
        "                runner.advance_started(runner.start(r, AgentRun.agent.field"
        ".related_model.objects.get(agent_id=r.recipient_id)))",
        [HAND + "test_a_hand_off_delivered_here_is_checked_as_the_broker_s_would_be"],
    ),
    Break(  # hand-offs delivered here whatever the limit
        "hand-offs-here-unlimited",
        "a2a/bus.py",
        r" and _hand_offs\.taken < settings\.MCPLET_HAND_OFFS_HERE",
        "",
        [HAND + "test_with_no_hand_offs_here_the_hand_off_waits_for_the_broker"],
    ),
    Break(  # a delivery checked with the registry as this process last kept it
        "delivery-registry-stale",
        "a2a/bus.py",
        r"registry\.at\(row\.registry_token\)",
        "registry.at(registry._kept.token or row.registry_token)",
        [
            "tests/agents/test_bus.py::test_a_delivery_checks_with_the_registry_read_with_its_request"
        ],
    ),
    Break(  # a worker's kept connection taken as sound without a look at its socket
        "kept-connection-unchecked",
        "mcplet_host/celery.py",
        r"return not poller\.poll\(0\)",
        "return True",
        [
            "tests/mcplet_host/test_worker_connections.py::"
            "test_a_connection_the_server_terminated_is_replaced_before_the_task_uses_it"
        ],
    ),
]


def patched(source, brk):
    """The source with the break applied, or None when the pattern does not match as expected."""
    regex = re.compile(brk.pattern, re.MULTILINE)
    found = len(regex.findall(source))
    if found != brk.count:
        return None
    return regex.sub(brk.replacement, source, count=1)


def run_tests(tree, tests):
    env = environment(tree, "known")
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    result = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    return result.returncode, result.stdout[-3000:] + result.stderr[-2000:]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="names of the breaks to try")
    parser.add_argument("--list", action="store_true", help="list the breaks and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="print pytest's output")
    args = parser.parse_args(argv)
    breaks = [b for b in BREAKS if not args.only or b.name in args.only]
    if args.list:
        for brk in breaks:
            print(f"{brk.name:36} {brk.path}: /{brk.pattern}/")
        return 0
    results = {}
    with tempfile.TemporaryDirectory(prefix="known-breaks-") as tmp:
        tree = copy_tree(Path(tmp) / "tree")
        tests = sorted({t for brk in breaks for t in brk.tests})
        code, output = run_tests(tree, tests)
        if code != 0:
            print(output)
            print("baseline: the tests fail on the unbroken code; fix that first")
            return 2
        for brk in breaks:
            target = tree / brk.path
            original = target.read_text(encoding="utf-8")
            source = patched(original, brk)
            if source is None:
                results[brk.name] = "STALE"
                print(f"STALE     {brk.name}: /{brk.pattern}/ no longer matches {brk.path}")
                continue
            target.write_text(source, encoding="utf-8")
            started = time.monotonic()
            try:
                code, output = run_tests(tree, brk.tests)
            finally:
                target.write_text(original, encoding="utf-8")
            verdict = {0: "SURVIVED", 1: "killed"}.get(code, "ERROR")
            results[brk.name] = verdict
            print(f"{verdict:9} {brk.name} ({time.monotonic() - started:.0f} s)", flush=True)
            if args.verbose or verdict == "ERROR":
                print(output)
    killed = sum(v == "killed" for v in results.values())
    print(f"{killed} killed, {len(results) - killed} not killed, of {len(results)} known breaks")
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
