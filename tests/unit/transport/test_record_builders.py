"""Records are built in one place (transport.base): a request's record before it is sent, one the client
ended (cancelled, cut by a session timeout), and one for a job that raised in the client."""

import inspect

from servelab.records.schema import CANCELLED, CLIENT_ERROR, TIMEOUT
from servelab.transport.base import ModelRequest, client_error_record, ended_record


def _req() -> ModelRequest:
    return ModelRequest(request_id=42, max_tokens=64, est_prompt_tokens=900, session_id=7, turn=3, attempt=1,
                        warmup=True, intended_ns=5_000)


def test_an_ended_record_carries_the_request_and_how_it_ended():
    r = ended_record(_req(), TIMEOUT, end_ns=9_000, error="step timeout after 2.000s", sent_ns=6_000)
    assert (r.request_id, r.session_id, r.turn, r.attempt, r.warmup) == (42, 7, 3, 1, True)
    assert (r.intended_ns, r.sent_ns, r.end_ns) == (5_000, 6_000, 9_000)
    assert (r.requested_output_tokens, r.est_prompt_tokens) == (64, 900)
    assert (r.status, r.error) == (TIMEOUT, "step timeout after 2.000s")
    c = ended_record(_req(), CANCELLED)  # cancelled before an answer: never sent, no end
    assert (c.status, c.sent_ns, c.end_ns, c.error, c.first_token_ns) == (CANCELLED, None, None, None, None)


def test_a_client_error_record_names_the_exception_within_500_characters():
    r = client_error_record(3, 1_000, False, 2_500, ValueError("bad plan"), session_id=11)
    assert (r.request_id, r.session_id, r.warmup, r.intended_ns, r.end_ns) == (3, 11, False, 1_000, 2_500)
    assert (r.status, r.error) == (CLIENT_ERROR, "client error: ValueError: bad plan")
    assert len(client_error_record(0, 0, False, 0, RuntimeError("x" * 900)).error) == 500


def test_no_executor_builds_a_record_field_by_field():
    from servelab.bench import job_errors, mix, single
    from servelab.load import replay, session

    for mod in (session, replay, single, job_errors, mix):
        assert "RequestRecord(" not in inspect.getsource(mod), mod.__name__
