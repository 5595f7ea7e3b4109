"""The next step the dashboard shows beside a run's or a held call's error."""

from dashboard.templatetags.dashboard_tags import next_step
from mcplet_host.gateway.envelopes import INVALID_RESULT, OUTCOME_UNKNOWN, RESULT_TOO_LARGE


def test_each_code_of_a_call_that_ran_or_may_have_says_what_to_do():
    for code in (INVALID_RESULT, OUTCOME_UNKNOWN, RESULT_TOO_LARGE):
        assert next_step({"code": code, "message": "…"}), code
    assert "MCPLET_MAX_MESSAGE_BYTES" in next_step({"code": RESULT_TOO_LARGE})


def test_no_step_for_what_is_not_an_error():
    assert next_step(None) == next_step("X_RESULT_TOO_LARGE") == ""
