import pytest

from servelab.errors import ConfigError
from servelab.workload.tokens import (
    EstimateCounter,
    LocalTokenizerCounter,
    ServerCounter,
    find_tokenizer_file,
    resolve_counter,
)


def _wordlevel_json(path) -> None:
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator(["alpha beta gamma delta"], trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tok.save(str(path))


async def test_estimate_is_four_tokens_per_three_words():
    c = EstimateCounter()
    assert c.count_now("") == 0
    assert c.count_now("one two three") == 4
    assert await c.count("one two three four") == 6  # ceil(4 / 0.75)
    assert c.source == "estimate"


async def test_server_counter_caches_and_counts_calls():
    seen = []

    async def fn(text: str) -> int:
        seen.append(text)
        return len(text)

    c = ServerCounter(fn)
    assert await c.count("abc") == 3 and await c.count("abc") == 3 and await c.count("de") == 2
    assert seen == ["abc", "de"] and c.calls == 2


async def test_resolve_prefers_a_server_that_answers():
    async def answers(text: str) -> int:
        return 9

    async def cannot(text: str) -> None:
        return None

    assert (await resolve_counter(answers, None)).source == "server"
    assert (await resolve_counter(cannot, None)).source == "estimate"
    assert (await resolve_counter(None, None)).source == "estimate"


async def test_resolve_falls_back_to_the_named_local_tokenizer(tmp_path):
    path = tmp_path / "tokenizer.json"
    _wordlevel_json(path)

    async def cannot(text: str) -> None:
        return None

    c = await resolve_counter(cannot, str(path))
    assert c.source == "local" and isinstance(c, LocalTokenizerCounter)
    assert c.count_now("alpha beta gamma") == 3
    assert (await resolve_counter(None, str(tmp_path))).source == "local"  # a folder holding one


def test_find_tokenizer_in_the_hugging_face_cache(tmp_path, monkeypatch):
    snap = tmp_path / "models--acme--tiny" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "tokenizer.json").write_text("{}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert find_tokenizer_file("acme/tiny") == snap / "tokenizer.json"


def test_named_tokenizer_errors_say_where_and_how(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match="neither a tokenizer.json path nor a model") as e:
        LocalTokenizerCounter.load("nobody/nothing")
    assert "never downloads" in str(e.value)
    with pytest.raises(ConfigError, match="holds no tokenizer.json"):
        LocalTokenizerCounter.load(str(tmp_path))
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    pytest.importorskip("tokenizers")
    with pytest.raises(ConfigError, match="not a readable tokenizer.json"):
        LocalTokenizerCounter.load(str(bad))
