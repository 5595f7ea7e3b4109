"""Mutation testing of the enforcement code with cosmic-ray (behind `make mutants`; not in CI).

    python tests/mutants/run.py [TARGET ...] [--list] [--retry-survivors]

Each target is one enforcement module (or two that act together), the functions in it that
enforce something, and a focused selection of the tests that guard them. For each target the
working tree is copied to var/mutants/tree (cosmic-ray edits the files it mutates: never the
checkout) and a session is kept in var/mutants/<target>.sqlite: a second run goes on where the
last one stopped (delete the file to start again; --retry-survivors tries the survivors again,
e.g. after adding tests). The survivors are printed with their diff. Needs the tests'
environment (DATABASE_URL; REDIS_URL of a Redis database no other test run uses meanwhile).
Slow: one pytest run per mutant. Operators that only produce arithmetic noise here (binary
operators, variable insertion/replacement) are left out."""

import argparse
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from workspace import ROOT, copy_tree, environment

WORK = ROOT / "var" / "mutants"
BIN = Path(sys.executable).parent
EXCLUDED_OPERATORS = [
    r"core/ReplaceBinaryOperator_.*",
    r"core/VariableInserter",
    r"core/VariableReplacer",
]


@dataclass
class Target:
    modules: list[str]
    functions: list[str]  # the enclosing function (or class) names to mutate; [] = all
    tests: list[str]
    timeout: int  # seconds per mutant: a few times the selection's own run


TARGETS = {
    "audit": Target(
        ["mcplet_host/audit.py"],
        ["verify_chain", "record_many"],
        ["tests/mcplet_host/test_audit.py", "tests/mcplet_host/test_audit_links.py"],
        120,
    ),
    "bus": Target(
        ["a2a/bus.py", "agents/tasks.py"],
        ["post", "authenticate", "refuse", "deliver"],
        ["tests/agents/test_bus.py", "tests/agents/test_bus_refusals_calllog.py"],
        300,
    ),
    "gateway": Target(
        [
            "mcplet_host/gateway/__init__.py",
            "mcplet_host/gateway/checks.py",
            "mcplet_host/gateway/execute.py",
            "held/lifecycle.py",
        ],
        [],
        [
            "tests/mcplet_host/test_gateway.py",
            "tests/mcplet_host/test_gateway_breaks.py",
            "tests/mcplet_host/test_resume_race.py",
        ],
        400,
    ),
    "partner-api": Target(
        ["a2a/api.py", "a2a/service.py"],
        [
            "authenticate",
            "submit",
            "_check_requested_access",
            "own_task",
            "callable_agents",
            "cancel",
            "get_cache_key",
        ],
        [
            "tests/a2a/test_partner_breaks.py",
            "tests/a2a/test_endpoint.py",
            "tests/a2a/test_partner_key.py",
        ],
        400,
    ),
    "passkey": Target(
        ["passkey/views.py", "passkey/models.py", "passkey/approvals.py", "held/models.py"],
        [
            "approver_required",
            "wrapped",
            "_ceremony",
            "_approval_origin",
            "assertion",
            "challenge",
            "reject",
            "verify_assertion",
            "verify",
            "issue_challenge",
            "_approve_with_passkey",
            "verify_for_backend",
            "_verify_for_backend",
            "check_approver",
            "approve",
            "decline",
        ],
        [
            "tests/passkey/test_callback.py",
            "tests/passkey/test_verify_assertion.py",
            "tests/passkey/test_passkey_breaks.py",
        ],
        400,
    ),
    "discovery": Target(
        ["pools/discovery.py"],
        [],
        ["tests/pools/test_discovery.py"],
        400,
    ),
}


def config(name, target):
    tests = " ".join(target.tests)
    operators = ", ".join(f'"{op}"' for op in EXCLUDED_OPERATORS)
    modules = ", ".join(f'"{m}"' for m in target.modules)
    return (
        "[cosmic-ray]\n"
        f"module-path = [{modules}]\n"
        f"timeout = {target.timeout}\n"
        "excluded-modules = []\n"
        f'test-command = "{sys.executable} -m pytest -x -q -p no:cacheprovider {tests}"\n'
        "\n[cosmic-ray.distributor]\n"
        'name = "local"\n'
        "\n[cosmic-ray.filters.operators-filter]\n"
        f"exclude-operators = [{operators}]\n"
    )


def skip_other_functions(session, functions):
    """Mark mutants outside the enforcing functions as skipped (cosmic-ray has no such filter)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    if not functions:
        return
    with use_db(session, WorkDB.Mode.open) as db:
        for item in list(db.pending_work_items):
            if all(m.definition_name not in functions for m in item.mutations):
                db.set_result(
                    item.job_id,
                    WorkResult(output="Outside the target", worker_outcome=WorkerOutcome.SKIPPED),
                )


def counts(session):
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    tally = {"killed": 0, "survived": 0, "incompetent": 0, "skipped": 0, "pending": 0}
    with use_db(session, WorkDB.Mode.open) as db:
        for _item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                tally["skipped"] += 1
            elif result.test_outcome == TestOutcome.KILLED:
                tally["killed"] += 1
            elif result.test_outcome == TestOutcome.SURVIVED:
                tally["survived"] += 1
            else:
                tally["incompetent"] += 1
        tally["pending"] = db.num_work_items - db.num_results
    return tally


def run(cmd, tree, env, **kwargs):
    return subprocess.run([str(c) for c in cmd], cwd=tree, env=env, **kwargs)


def retry_survivors(session):
    """Forget the survivors' results, so the next exec tries them again (after new tests)."""
    with sqlite3.connect(session) as db:
        db.execute("DELETE FROM work_results WHERE test_outcome = 'SURVIVED'")


def mutate(name, target, retry=False):
    WORK.mkdir(parents=True, exist_ok=True)
    tree = copy_tree(WORK / "tree")
    env = environment(tree, "mutants")
    cfg, session = WORK / f"{name}.toml", WORK / f"{name}.sqlite"
    cfg.write_text(config(name, target), encoding="utf-8")
    if not session.exists():
        run([BIN / "cosmic-ray", "init", cfg, session], tree, env, check=True)
        run([BIN / "cr-filter-operators", session, cfg], tree, env, check=True)
        skip_other_functions(session, target.functions)
    elif retry:
        retry_survivors(session)
    print(f"== {name}: {counts(session)}", flush=True)
    if run([BIN / "cosmic-ray", "baseline", cfg], tree, env).returncode != 0:
        print(f"== {name}: the tests fail on the unmutated code; fix that first")
        return False
    run([BIN / "cosmic-ray", "exec", cfg, session], tree, env, check=True)
    print(f"== {name}: survivors")
    run([BIN / "cr-report", "--surviving-only", "--show-diff", session], tree, env)
    tally = counts(session)
    print(f"== {name}: {tally}", flush=True)
    return tally["survived"] == 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", help=f"some of: {', '.join(TARGETS)} (default all)")
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    parser.add_argument(
        "--retry-survivors", action="store_true", help="run the last survivors again (new tests)"
    )
    args = parser.parse_args(argv)
    names = args.targets or list(TARGETS)
    unknown = sorted(set(names) - set(TARGETS))
    if unknown:
        parser.error(f"unknown targets: {', '.join(unknown)}")
    if args.list:
        for name in names:
            target = TARGETS[name]
            print(f"{name:12} {', '.join(target.modules)} <- {' '.join(target.tests)}")
        return 0
    results = [mutate(name, TARGETS[name], args.retry_survivors) for name in names]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
