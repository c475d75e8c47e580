from servelab.records.manifest import REDACTED, build_manifest, redact, redact_argv


def test_secrets_are_redacted_everywhere():
    m = build_manifest(
        config={"target": {"headers": {"Authorization": "Bearer sk-123", "X-Team": "perf"},
                           "api_key_env": "OPENAI_API_KEY"}},
        argv=["servelab", "run", "--api-key", "sk-123", "--token=abc", "--header", "Authorization: Bearer z"],
        target={"api_key": "sk-123"}, seed=1, started_at="t",
    )
    text = repr(m)
    assert "sk-123" not in text and "abc" not in text and "Bearer z" not in text
    assert m["config"]["target"]["headers"]["X-Team"] == "perf"
    assert m["config"]["target"]["api_key_env"] == "OPENAI_API_KEY"  # the variable's name is not a secret
    assert REDACTED in text


def test_redact_keeps_structure():
    assert redact({"a": [{"token": "x", "n": 1}]}) == {"a": [{"token": REDACTED, "n": 1}]}
    assert redact_argv(["--api-key=q", "x"]) == ["--api-key=" + REDACTED, "x"]
