"""The generated answer set (deterministic, exact answers checked independently) and JSONL loading."""

from __future__ import annotations

import operator
import re

import pytest

from servelab.accuracy.dataset import KINDS, generate_items, load_dataset, load_jsonl
from servelab.accuracy.matchers import match
from servelab.errors import ConfigError

_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def _solve(prompt: str) -> str:
    """Answer a generated prompt by reading it, independently of the generator."""
    m = re.match(r"Compute (\d+) ([-+*]) (\d+)\.", prompt)
    if m:
        return str(_OPS[m.group(2)](int(m.group(1)), int(m.group(3))))
    table = dict(re.findall(r"^([a-z]+): (\d+)$", prompt, re.M))
    assert len(table) == 6
    if (m := re.search(r"What is the code of ([a-z]+)\?", prompt)):
        return table[m.group(1)]
    value = re.search(r"Which name has the code (\d+)\?", prompt).group(1)
    (name,) = [k for k, v in table.items() if v == value]
    return name


def test_generated_answers_are_right():
    items = generate_items(100, seed=7)
    for it in items:
        answer = _solve(it.prompt)
        assert match(it.matcher, answer, it.expected).correct, it
        if it.matcher == "number":
            assert answer == it.expected
        else:  # the name, and no other name of the table
            others = set(re.findall(r"^([a-z]+): ", it.prompt, re.M)) - {answer}
            assert not any(match(it.matcher, o, it.expected).correct for o in others), it
    assert {it.kind for it in items} == set(KINDS)
    assert {it.matcher for it in items if it.kind == "reverse"} == {"regex"}
    assert len({it.id for it in items}) == 100


def test_generated_set_is_deterministic_and_prefix_stable():
    assert generate_items(30, seed=1) == generate_items(30, seed=1)
    assert generate_items(50, seed=1)[:30] == generate_items(30, seed=1)
    assert [it.prompt for it in generate_items(30, seed=2)] != [
        it.prompt for it in generate_items(30, seed=1)
    ]


def test_jsonl_loading(tmp_path):
    p = tmp_path / "set.jsonl"
    p.write_text('{"prompt": "2+2?", "expected": 4, "matcher": "number"}\n\n'
                 '{"prompt": "Capital of France?", "expected": "(?i)paris", "matcher": "regex", "id": "fr"}\n'
                 '{"prompt": "Say yes", "expected": "yes"}\n')
    items = load_jsonl(p)
    assert [(i.id, i.expected, i.matcher) for i in items] == [
        ("line-1", "4", "number"), ("fr", "(?i)paris", "regex"), ("line-4", "yes", "exact")]
    assert len(load_dataset(p, n=2)) == 2
    assert {i.matcher for i in load_dataset(p, matcher="regex")} == {"regex"}


@pytest.mark.parametrize(("line", "needle"), [
    ("not json", "set.jsonl:2: not valid JSON"),
    ('["a"]', "expected a JSON object"),
    ('{"prompt": "", "expected": "x"}', "'prompt' must be a non-empty string"),
    ('{"prompt": "q"}', "'expected' must be a string or a number"),
    ('{"prompt": "q", "expected": "x", "matcher": "fuzzy"}', "'matcher' must be one of exact, regex, number"),
    ('{"prompt": "q", "expected": "four", "matcher": "number"}', "is not a number"),
    ('{"prompt": "q", "expected": "(", "matcher": "regex"}', "not a valid regular expression"),
    ('{"prompt": "q", "expected": "x", "answer": "x"}', "unknown field(s) ['answer']"),
    ('{"prompt": "q", "expected": "x", "id": "a"}', "duplicate id 'a' (first on line 1)"),
])
def test_jsonl_errors_name_file_and_line(tmp_path, line, needle):
    p = tmp_path / "set.jsonl"
    p.write_text('{"prompt": "first", "expected": "x", "id": "a"}\n' + line + "\n")
    with pytest.raises(ConfigError) as e:
        load_jsonl(p)
    assert needle in str(e.value)
    assert "set.jsonl:2" in str(e.value)


def test_bad_dataset_arguments(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_jsonl(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(ConfigError, match="holds no items"):
        load_jsonl(tmp_path / "empty.jsonl")
    with pytest.raises(ConfigError, match="--n must be at least 1"):
        load_dataset(n=0)
    with pytest.raises(ConfigError, match="unknown matcher"):
        load_dataset(matcher="fuzzy")
    # Forcing the number matcher on the generated set fails on its name answers.
    with pytest.raises(ConfigError, match="is not a number"):
        load_dataset(n=10, matcher="number")
