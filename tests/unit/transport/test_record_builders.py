"""Records are built in one place: request records in transport.base (a request's record before it is sent,
one the client ended (cancelled, cut by a session timeout), one for a job that raised in the client, and one a
dead worker had in flight), session records in records.schema (a session starting, one a dead worker had
started)."""

import inspect

from servelab.records.schema import (
    CANCELLED,
    CLIENT_ERROR,
    TIMEOUT,
    SessionStatus,
    lost_session,
    started_session,
)
from servelab.transport.base import ModelRequest, client_error_record, ended_record, lost_record


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


def test_a_lost_record_knows_its_id_worker_and_when_its_worker_was_last_heard_from():
    r = lost_record(5, 1, 15_000, "worker 1 (h) died with this in flight: exit -9")
    assert (r.request_id, r.worker, r.status, r.intended_ns) == (5, 1, CANCELLED, 15_000)
    assert (r.sent_ns, r.end_ns, r.requested_output_tokens, r.est_prompt_tokens) == (None, None, None, None)
    assert r.error == "worker 1 (h) died with this in flight: exit -9"


def test_a_started_session_has_its_id_profile_start_and_warmup_and_counts_nothing_yet():
    s = started_session(7, "coding-agent", 12_000, True)
    assert (s.session_id, s.profile, s.start_ns, s.warmup) == (7, "coding-agent", 12_000, True)
    assert (s.worker, s.status, s.end_ns, s.error) == (0, SessionStatus.CANCELLED, None, None)
    assert (s.requests, s.turns, s.model_ns, s.input_tokens) == (0, 0, 0, 0)


def test_a_lost_session_knows_its_id_worker_and_when_its_worker_was_last_heard_from():
    s = lost_session(4, 2, 15_000, "worker 2 (h) died with this in flight: exit -9")
    assert (s.session_id, s.worker, s.status, s.start_ns, s.end_ns) == (4, 2, "cancelled", 15_000, None)
    assert (s.profile, s.warmup, s.requests) == ("", False, 0)
    assert s.error == "worker 2 (h) died with this in flight: exit -9"


def test_no_executor_builds_a_record_field_by_field():
    from servelab.bench import finish, job_errors, mix, single
    from servelab.load import replay, session

    for mod in (session, replay, single, job_errors, mix, finish):
        src = inspect.getsource(mod)
        assert "RequestRecord(" not in src, mod.__name__
        assert "SessionRecord(" not in src, mod.__name__
