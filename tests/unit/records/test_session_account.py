"""One definition of a session's model time and counts, used by agent sessions and trace replay alike."""

from servelab.records.schema import OK, TIMEOUT, RequestRecord, SessionRecord


def test_add_request_counts_model_time_from_send_to_the_end_of_the_answer():
    s = SessionRecord(session_id=1)
    ok = RequestRecord(request_id=1, status=OK, sent_ns=1_000, end_ns=5_000, usage_prompt_tokens=120,
                       usage_completion_tokens=30, usage_cached_tokens=100, srv_queue_ns=700)
    s.add_request(ok, sent_ns=1_000, now_ns=9_999)  # the executor resumed later: its delay is not model time
    assert (s.requests, s.model_ns, s.queue_ns) == (1, 4_000, 700)
    assert (s.input_tokens, s.output_tokens, s.cached_tokens) == (120, 30, 100)
    # No end recorded: the wait lasted until now. Estimated tokens when the server gave no usage.
    lost = RequestRecord(request_id=2, status=TIMEOUT, est_prompt_tokens=80, est_completion_tokens=3)
    s.add_request(lost, sent_ns=10_000, now_ns=12_500)
    assert (s.requests, s.model_ns, s.queue_ns) == (2, 4_000 + 2_500, 700)
    assert (s.input_tokens, s.output_tokens, s.cached_tokens) == (200, 33, 100)
    assert s.turns == 0  # turns are the executor's to count (an ok answer may still need a retry)


def test_agent_sessions_and_replay_share_it():
    import inspect

    from servelab.load import replay, session

    for mod in (session, replay):
        src = inspect.getsource(mod)
        assert ".add_request(" in src and "model_ns +=" not in src, mod.__name__
